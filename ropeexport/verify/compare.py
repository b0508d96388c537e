"""Comparing runtime outputs with a reference: error metrics, tolerances, and where the worst error sits.

An element fails only when both its absolute error exceeds atol and its relative error exceeds rtol (as Polygraphy
does); a comparison fails when any element fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ropeexport.numerics import ulp_distance


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
        a = np.asarray(actual, dtype=np.float64)
        e = np.asarray(expected, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            abs_err = np.where(a == e, 0.0, np.abs(a - e))  # equal infinities (masked logits) agree
        abs_err[np.isnan(abs_err) | (np.isnan(a) != np.isnan(e))] = np.inf
        # Relative error means nothing where the expected value is below atol (outputs that cancel to ~0): those
        # elements are judged by atol alone, and max_rel is taken over the others.
        with np.errstate(invalid="ignore"):
            rel_err = np.where(np.abs(e) >= self.atol, abs_err / np.maximum(np.abs(e), self.atol), 0.0)
        rel_err[np.isnan(rel_err)] = np.inf  # inf error against an infinite expectation
        finite = np.isfinite(a) & np.isfinite(e)
        ulps = np.where(abs_err > 0, np.inf, 0.0)
        ulps[finite] = ulp_distance(a[finite], e[finite], self.dtype, floor=1.0)  # see ulp_distance
        n = self.elements + a.size
        self.mean_abs = (self.mean_abs * self.elements + float(np.sum(np.minimum(abs_err, 1e300)))) / n
        self.elements = n
        self.failures += int(np.count_nonzero((abs_err > self.atol) & (rel_err > self.rtol)))
        self.max_rel = max(self.max_rel, float(rel_err.max()))
        self.max_ulp = max(self.max_ulp, float(ulps.max()))
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
