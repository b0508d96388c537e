"""The one formatting rule for errors and shares (``report.words.error`` / ``share``), used by every report and CLI
line: errors in scientific notation with three significant digits, shares of the allowance in fixed notation.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from ropeexport.report.words import error, share

ERRORS = [
    (2.98e-08, "2.98e-08"),
    (0.0027, "2.70e-03"),  # the audit's 0.0027 now reads like the 2.98e-08 beside it
    (1e-4, "1.00e-04"),  # a bound prints like the errors it bounds
    (0.5, "5.00e-01"),
    (12.0, "1.20e+01"),
    (0.0, "0.00e+00"),
    (3, "3.00e+00"),  # an int error (JSON's 0 or 3) is still an error
    (None, "n/a"),  # a runtime that raised
    (float("inf"), "inf"),
    (float("nan"), "nan"),
    (True, "True"),  # not a number: said as it is, never formatted as 1.00e+00
    ("text", "text"),
]


@pytest.mark.parametrize(("value", "expected"), ERRORS)
def test_error(value: Any, expected: str) -> None:
    assert error(value) == expected


SHARES = [
    (0.12, "0.12 of allowed"),
    (0.2, "0.20 of allowed"),
    (1.0, "1.00 of allowed"),  # the limit still passes
    (0.005, "0.01 of allowed"),
    (0.0027, "<0.01 of allowed"),  # never 0.00, which reads as exact, nor 0.0027 beside 0.12
    (2.7e-05, "<0.01 of allowed"),
    (0.0, "exact"),
    (3.4, "3.40x allowed"),
    (12345.6, "12,345.60x allowed"),
    (float("inf"), "infx allowed"),
    (None, "n/a"),
    (False, "False"),
]


@pytest.mark.parametrize(("value", "expected"), SHARES)
def test_share(value: Any, expected: str) -> None:
    assert share(value) == expected


@pytest.mark.parametrize("value", [10.0**k * m for k in range(-12, 4) for m in (1.0, 2.5, 9.99)])
def test_errors_never_mix_notations(value: float) -> None:
    """Every finite error has the same shape, whatever its size: d.dde±dd."""
    assert re.fullmatch(r"\d\.\d\de[+-]\d\d", error(value)), error(value)
