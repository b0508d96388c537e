"""Comparing runtime outputs with a reference: error metrics, tolerances, and where the worst error sits.

An element fails only when its absolute error exceeds both atol and rtol * |expected| (as Polygraphy does); NaN
against a number, or an infinity against anything else, always fails. A comparison fails when any element fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ropeexport.numerics import FORMATS


@dataclass(frozen=True)
class Tolerance:
    """atol and rtol for one dtype, with the reason for their size."""

    atol: float
    rtol: float
    reason: str


# Inputs are standard-normal, so outputs stay below ~6 in magnitude.
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(
        1e-5,
        1e-5,
        "fused kernels may use FMA and another operation order (<= 2 ulp seen); against "
        "float64 add the 0.5-ulp table rounding and three fp32 roundings. A position off by one, an "
        "ignored scaling or fp32 angles past position ~1000 err by 1e-4 or more.",
    ),
    "fp16": Tolerance(
        8e-3,
        4e-3,
        "each fp16 multiply and add rounds (eps 9.8e-4) and the table carries 0.5 ulp: up "
        "to ~2 ulp of outputs near 4, i.e. 8e-3 absolute where outputs cancel toward zero.",
    ),
    "bf16": Tolerance(6e-2, 3e-2, "bf16 keeps 8 significant bits (eps 7.8e-3): ~2 ulp of outputs near 4."),
}


@dataclass
class Comparison:
    """Errors of one runtime output against one reference, over every probe."""

    reference: str
    runtime: str
    output: str
    dtype: str
    atol: float
    rtol: float
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: float = 0.0
    mean_abs: float = 0.0
    elements: int = 0
    failures: int = 0
    worst: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True when no element exceeded both atol and rtol."""
        return self.failures == 0 and self.elements > 0

    def __bool__(self) -> bool:
        return self.passed

    def update(
        self, probe: str, actual: np.ndarray, expected: np.ndarray, locate: Callable[[tuple[int, ...]], dict[str, Any]]
    ) -> None:
        """Fold one probe in; ``locate`` turns the index of the worst element into where it sits (for reports)."""
        if actual.shape != expected.shape:
            self.failures += max(1, expected.size)
            self.worst = {"probe": probe, "error": f"shape {list(actual.shape)} != {list(expected.shape)}"}
            return
        size = actual.size
        actual, expected = _collapse(actual, expected)
        a = np.asarray(actual, dtype=np.float64)
        e = np.asarray(expected, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            abs_err = np.abs(a - e)
        mag = np.abs(e)
        # The rule: an element fails when abs_err > atol and abs_err > rtol * |expected| (no division, so it holds
        # where the expected value is 0).
        failing = (abs_err > self.atol) & (abs_err > self.rtol * mag)
        finite = np.isfinite(abs_err)
        if not finite.all():
            # Equal infinities (masked logits) agree; any other NaN or infinity is a failure of unbounded size.
            same = a == e
            abs_err[same] = 0.0
            bad = ~finite & ~same
            abs_err[bad] = np.inf
            failing |= bad
            mag[~np.isfinite(mag)] = 0.0
        self.failures += int(np.count_nonzero(failing))
        # max_rel is reported where it means something: expected values at least atol in magnitude.
        rel_err = np.divide(abs_err, mag, out=np.zeros_like(abs_err), where=mag >= self.atol)
        self.max_rel = max(self.max_rel, float(rel_err.max(initial=0.0)))
        # ulps at max(|expected|, 1) (see numerics.ulp_distance), from the binary exponent: no log2 per element.
        _, exponent = np.frexp(np.maximum(mag, 1.0))
        ulps = np.ldexp(abs_err, FORMATS[self.dtype].mantissa_bits + 1 - exponent)
        self.max_ulp = max(self.max_ulp, float(ulps.max(initial=0.0)))
        n = self.elements + size
        self.mean_abs = (self.mean_abs * self.elements + float(np.minimum(abs_err, 1e300).mean()) * size) / n
        self.elements = n
        if a.size and float(abs_err.max()) >= self.max_abs and np.isfinite(self.max_abs):
            self.max_abs = float(abs_err.max())
            index = tuple(int(i) for i in np.unravel_index(int(np.argmax(abs_err)), a.shape))
            self.worst = {
                "probe": probe,
                **locate(index),
                "actual": _json_float(a[index]),
                "expected": _json_float(e[index]),
            }

    def fail(self, probe: str, reason: str) -> None:
        """Record a probe the runtime could not run (it raised): the comparison fails with the reason."""
        self.failures += 1
        self.max_abs = self.max_rel = self.max_ulp = float("inf")
        self.worst = {"probe": probe, "error": reason}

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly, with ``passed``; a metric that is not finite (the runtime raised) becomes null."""
        out = asdict(self) | {"passed": self.passed}
        for key in ("max_abs", "max_rel", "max_ulp", "mean_abs"):
            if not np.isfinite(out[key]):
                out[key] = None  # JSON has no infinity; worst["error"] says what happened
        return out


def _json_float(value: Any) -> float | str:
    """A float for JSON: infinities and NaN as strings ("-inf"), which JSON cannot hold as numbers."""
    value = float(value)
    return value if np.isfinite(value) else str(value)


def _collapse(actual: np.ndarray, expected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop axes along which the expected value is one broadcast slice and the actual output is bitwise one slice.

    Comparing that slice is then the same as comparing every element, at a fraction of the cost (sweeps repeat one
    vector across heads). Any difference between slices, NaN included, keeps the full comparison.
    """
    for axis in range(expected.ndim):
        if expected.shape[axis] > 1 and expected.strides[axis] == 0:
            first = actual.take([0], axis=axis)
            if np.array_equal(actual, np.broadcast_to(first, actual.shape)):
                actual, expected = first, expected.take([0], axis=axis)
    return actual, expected
