from __future__ import annotations

import numpy as np
import pytest

from ropeexport.report.views import ComparisonRecord, CurveRecord, WorstElement
from ropeexport.verification.compare import Comparison

pytestmark = pytest.mark.fast  # the comparison rule, on hand-made arrays


def compare(actual: list[float], expected: list[float], atol: float = 1e-5, rtol: float = 1e-5) -> Comparison:
    c = Comparison("float64", "ort", "y", "fp32", atol, rtol)
    a = np.array(actual, dtype=np.float64)[None, None, None, :]
    e = np.array(expected, dtype=np.float64)[None, None, None, :]
    c.update("p", a, e, lambda index: {"index": list(index)})
    return c


# (actual, expected, passes): the element rule is abs > atol and abs > rtol * |expected| -> fail.
CASES = [
    pytest.param([1.0], [1.0], True, id="equal"),
    pytest.param([0.0], [0.0], True, id="zero"),
    pytest.param([5e-6], [0.0], True, id="within-atol-at-zero"),
    pytest.param([2e-5], [0.0], False, id="past-atol-at-zero"),
    pytest.param([1000.005], [1000.0], True, id="within-rtol"),
    pytest.param([1000.1], [1000.0], False, id="past-both"),
    pytest.param([np.nan], [0.0], False, id="nan-against-zero"),
    pytest.param([np.nan], [1e-7], False, id="nan-against-tiny"),
    pytest.param([np.nan], [np.nan], False, id="nan-against-nan"),
    pytest.param([-np.inf], [-np.inf], True, id="equal-masks"),
    pytest.param([-np.inf], [-3.0], False, id="mask-where-none-expected"),
    pytest.param([-3.0], [-np.inf], False, id="no-mask-where-expected"),
    pytest.param([np.inf], [-np.inf], False, id="opposite-infinities"),
]


@pytest.mark.parametrize(("actual", "expected", "passes"), CASES)
def test_element_rule(actual: list[float], expected: list[float], passes: bool) -> None:
    assert compare(actual, expected).passed is passes


def test_worst_element_is_located_and_reported() -> None:
    c = compare([1.0, 2.5, 3.0], [1.0, 2.0, 3.0])
    assert not c.passed and c.failures == 1
    worst = WorstElement(c.worst)
    assert worst.location["index"] == [0, 0, 0, 1] and worst.actual == 2.5 and worst.expected == 2.0
    assert ComparisonRecord(c.to_dict()).max_abs == 0.5


def test_a_runtime_error_fails_the_comparison_with_its_reason() -> None:
    c = Comparison("eager", "ort", "y", "fp32", 1e-5, 1e-5)
    c.fail("probe-1", "RuntimeError: boom")
    d = ComparisonRecord(c.to_dict())
    assert not c.passed and d.max_abs is None and d.worst.error == "RuntimeError: boom"


def test_broadcast_expectation_collapses_only_when_the_output_agrees_across_the_axis() -> None:
    expected = np.broadcast_to(np.array([1.0, 2.0])[None, None, None, :], (1, 4, 1, 2))
    same = np.array(expected, dtype=np.float32)
    c = Comparison("eager", "ort", "y", "fp32", 1e-5, 1e-5)
    c.update("p", same, expected, lambda index: {"head": index[1]})
    assert c.passed and c.elements == 8
    differs = same.copy()
    differs[0, 3, 0, 1] = 2.5  # one head wrong: the full comparison must run and find it
    c = Comparison("eager", "ort", "y", "fp32", 1e-5, 1e-5)
    c.update("p", differs, expected, lambda index: {"head": index[1]})
    assert not c.passed and c.failures == 1 and WorstElement(c.worst).location["head"] == 3


@pytest.mark.parametrize(("actual", "expected", "passes"), CASES)
def test_share_of_allowance_is_above_one_exactly_where_an_element_fails(
    actual: list[float], expected: list[float], passes: bool
) -> None:
    c = compare(actual, expected)
    ratio = ComparisonRecord(c.to_dict()).max_ratio
    assert (ratio is not None and ratio <= 1) == passes


def test_masked_positions_leave_no_point_on_the_error_curve() -> None:
    # Query 0 sees key 0 only; keys 1 and 2 are masked (-inf on both sides): they have no error to show.
    expected = np.array([[[[0.5, -np.inf, -np.inf]]]])
    actual = np.array([[[[0.5 + 2e-6, -np.inf, -np.inf]]]])
    c = Comparison("float64", "ort", "bias", "fp32", 1e-5, 1e-5)
    distance = np.array([[[[0, -1, -2]]]])
    c.update("p", actual, expected, lambda index: {}, ("distance i-j", distance))
    made = c.curve()
    assert made is not None
    curve = CurveRecord(made)
    assert curve.x == [0]
    assert curve.max_abs[0] == pytest.approx(2e-6) and curve.max_ratio[0] == pytest.approx(0.2)
