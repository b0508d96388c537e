"""Comparing runtime outputs with a reference: error metrics, tolerances, and where the worst error sits.

An element fails only when its absolute error exceeds both atol and rtol * |expected| (as Polygraphy does); NaN
against a number, or an infinity against anything else, always fails. A comparison fails when any element fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ropeexport.dtypes import DTYPES
from ropeexport.tolerances import TOLERANCES, Tolerance

__all__ = ["TOLERANCES", "Comparison", "Tolerance"]


# Error histograms: log10 bins of a tenth of a decade from 1e-12 to 1e6 (exact zeros counted apart). p99 values are
# read from them, so they are upper bounds within a factor 10^0.1 (26%).
HIST_EDGES = np.round(np.arange(-12.0, 6.05, 0.1), 1)
CURVE_POINTS = 2048  # a per-position curve longer than this is binned, keeping each bin's worst error


@dataclass
class Comparison:
    """Errors of one runtime output against one reference, over every probe.

    Metrics: max / mean / p99 of absolute and relative error (relative only where |expected| >= atol), max ulp
    distance at max(|expected|, 1), cosine similarity, the worst element's location, a histogram of log10 errors, and
    a per-position curve of the worst absolute error (when the artifact kind says which axis is "position").
    """

    reference: str
    runtime: str
    output: str
    dtype: str
    atol: float
    rtol: float
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: float = 0.0
    max_ratio: float = 0.0  # the worst element's error as a share of its allowance max(atol, rtol |expected|)
    mean_abs: float = 0.0
    mean_rel: float = 0.0
    elements: int = 0
    failures: int = 0
    worst: dict[str, Any] = field(default_factory=dict)
    axis: str = ""
    _curve: dict[int, float] = field(default_factory=dict, repr=False)
    _ratio_curve: dict[int, float] = field(default_factory=dict, repr=False)
    _abs_hist: np.ndarray = field(default_factory=lambda: np.zeros(len(HIST_EDGES) + 1), repr=False)
    _rel_hist: np.ndarray = field(default_factory=lambda: np.zeros(len(HIST_EDGES) + 1), repr=False)
    _zeros: float = 0.0
    _rel_elements: float = 0.0
    _dots: np.ndarray = field(default_factory=lambda: np.zeros(3), repr=False)  # sum a.e, a.a, e.e

    @property
    def passed(self) -> bool:
        """True when no element exceeded both atol and rtol."""
        return self.failures == 0 and self.elements > 0

    def __bool__(self) -> bool:
        return self.passed

    def update(
        self,
        probe: str,
        actual: np.ndarray,
        expected: np.ndarray,
        locate: Callable[[tuple[int, ...]], dict[str, Any]],
        axis: tuple[str, np.ndarray] | None = None,
    ) -> None:
        """Fold one probe in.

        ``locate`` turns the index of the worst element into where it sits (for reports); ``axis`` is (name, int
        array broadcastable to the output) giving each element's position for the per-position curve.
        """
        if actual.shape != expected.shape:
            self.failures += max(1, expected.size)
            self.elements += expected.size
            self.max_abs = self.max_rel = self.max_ulp = self.max_ratio = float("inf")
            self.worst = {"probe": probe, "error": f"shape {list(actual.shape)} != {list(expected.shape)}"}
            return
        size = actual.size
        actual, expected, kept = _collapse(actual, expected)
        weight = size / max(actual.size, 1)  # each compared element stands for this many (collapsed axes)
        a = np.asarray(actual, dtype=np.float64)
        e = np.asarray(expected, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            abs_err = np.abs(a - e)
        mag = np.abs(e)
        # The rule: an element fails when abs_err > atol and abs_err > rtol * |expected| (no division, so it holds
        # where the expected value is 0).
        failing = (abs_err > self.atol) & (abs_err > self.rtol * mag)
        finite = np.isfinite(abs_err)
        masked = np.zeros(abs_err.shape, bool)
        if not finite.all():
            # Equal infinities (masked logits) agree; any other NaN or infinity is a failure of unbounded size.
            same = a == e
            masked = ~finite & same  # hidden by a causal mask: no error, and no position on the error curve
            abs_err[same] = 0.0
            bad = ~finite & ~same
            abs_err[bad] = np.inf
            failing |= bad
            mag[~np.isfinite(mag)] = 0.0
        # Each element's share of what it may err by: > 1 exactly where it fails (the rule above, divided through).
        allowed = np.maximum(self.atol, self.rtol * mag)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(
                allowed > 0, abs_err / np.where(allowed > 0, allowed, 1.0), np.where(abs_err > 0, np.inf, 0.0)
            )
        self.max_ratio = max(self.max_ratio, float(ratio.max(initial=0.0)))
        self.failures += int(np.count_nonzero(failing) * weight)
        # Relative error where it means something: expected values at least atol in magnitude.
        judged = mag >= self.atol
        rel_err = np.divide(abs_err, mag, out=np.zeros_like(abs_err), where=judged)
        self.max_rel = max(self.max_rel, float(rel_err.max(initial=0.0)))
        # ulps at max(|expected|, 1) (see numerics.ulp_distance), from the binary exponent: no log2 per element.
        _, exponent = np.frexp(np.maximum(mag, 1.0))
        ulps = np.ldexp(abs_err, DTYPES[self.dtype].mantissa_bits + 1 - exponent)
        self.max_ulp = max(self.max_ulp, float(ulps.max(initial=0.0)))
        n = self.elements + size
        bounded = np.minimum(abs_err, 1e300)
        self.mean_abs = (self.mean_abs * self.elements + float(bounded.mean()) * size) / n
        n_rel = self._rel_elements + float(np.count_nonzero(judged)) * weight
        if n_rel:
            self.mean_rel = (
                self.mean_rel * self._rel_elements + float(np.minimum(rel_err, 1e300).sum()) * weight
            ) / n_rel
        self._rel_elements = n_rel
        self.elements = n
        self._zeros += float(np.count_nonzero(abs_err == 0)) * weight
        self._abs_hist += _log_histogram(abs_err) * weight
        self._rel_hist += _log_histogram(rel_err[judged]) * weight
        both = np.isfinite(a) & np.isfinite(e)
        self._dots += np.array([np.dot(a[both], e[both]), np.dot(a[both], a[both]), np.dot(e[both], e[both])]) * weight
        if axis is not None:
            self.axis = axis[0]
            positions = _take_kept(axis[1], kept)
            hidden = np.where(masked, -np.inf, 0.0)  # masked elements never set a bin's worst
            self._fold_curve(self._curve, abs_err + hidden, positions)
            self._fold_curve(self._ratio_curve, ratio + hidden, positions)
        if a.size and float(abs_err.max()) >= self.max_abs and np.isfinite(self.max_abs):
            self.max_abs = float(abs_err.max())
            index = tuple(int(i) for i in np.unravel_index(int(np.argmax(abs_err)), a.shape))
            self.worst = {
                "probe": probe,
                **locate(index),
                "actual": _json_float(a[index]),
                "expected": _json_float(e[index]),
            }

    @staticmethod
    def _fold_curve(curve: dict[int, float], abs_err: np.ndarray, positions: np.ndarray) -> None:
        # Reduce over the axes the position does not vary along first (heads, channels): cheap, and few keys remain.
        # A position whose every element is masked (-inf here) gets no point: it has no error to show.
        over = tuple(i for i, n in enumerate(positions.shape) if n == 1 and abs_err.shape[i] > 1)
        reduced = abs_err.max(axis=over, keepdims=True) if over else abs_err
        keys = np.broadcast_to(positions, reduced.shape).ravel()
        values = reduced.ravel()
        order = np.argsort(keys, kind="stable")
        keys, values = keys[order], values[order]
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        for key, worst in zip(keys[starts].tolist(), np.maximum.reduceat(values, starts).tolist(), strict=True):
            if worst > curve.get(key, -1.0):
                curve[key] = worst

    def fail(self, probe: str, reason: str) -> None:
        """Record a probe the runtime could not run (it raised): the comparison fails with the reason."""
        self.failures += 1
        self.max_abs = self.max_rel = self.max_ulp = self.max_ratio = float("inf")
        if "error" not in self.worst:  # keep the first: later probes often fail for the same reason
            self.worst = {"probe": probe, "error": reason}

    def p99(self, hist: np.ndarray, zeros: float = 0.0) -> float | None:
        """Upper bound of the 99th percentile from a log10 histogram (exact zeros count as zero error)."""
        total = zeros + hist.sum()
        if not total:
            return None
        if zeros >= 0.99 * total:
            return 0.0
        cumulative = zeros + np.cumsum(hist)
        index = int(np.searchsorted(cumulative, 0.99 * total))
        return float(10.0 ** HIST_EDGES[min(index, len(HIST_EDGES) - 1)]) if index < len(HIST_EDGES) else float("inf")

    def curve(self) -> dict[str, Any] | None:
        """The per-position worst absolute error, binned to at most CURVE_POINTS points (each bin keeps its max)."""
        if not self._curve:
            return None
        keys = np.array(sorted(self._curve))
        values = np.array([self._curve[k] for k in keys.tolist()])
        width = max(1, -(-(int(keys[-1]) - int(keys[0]) + 1) // CURVE_POINTS))
        if width > 1:
            bins = (keys - keys[0]) // width
            starts = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]])
            keys, values = keys[starts], np.maximum.reduceat(values, starts)
        values = np.where(np.isfinite(values), values, np.nan)  # infinite or NaN errors become null
        ratios = np.array([self._ratio_curve.get(k, np.nan) for k in sorted(self._curve)])
        if width > 1:
            ratios = np.fmax.reduceat(ratios, starts)
        ratios = np.where(np.isfinite(ratios), ratios, np.nan)
        return {
            "reference": self.reference,
            "runtime": self.runtime,
            "output": self.output,
            "axis": self.axis,
            "bin_width": width,
            "x": keys.tolist(),
            "max_abs": [None if np.isnan(v) else float(v) for v in values],
            # Each bin's worst error as a share of its allowance: the tolerance envelope is the line y = 1.
            "max_ratio": [None if np.isnan(v) else float(v) for v in ratios],
        }

    def to_dict(self) -> dict[str, object]:
        """JSON-friendly, with ``passed``; a metric that is not finite (the runtime raised) becomes null."""
        dots = self._dots
        cosine = float(dots[0] / np.sqrt(dots[1] * dots[2])) if dots[1] > 0 and dots[2] > 0 else None
        out = {
            "reference": self.reference,
            "runtime": self.runtime,
            "output": self.output,
            "dtype": self.dtype,
            "atol": self.atol,
            "rtol": self.rtol,
            "passed": self.passed,
            "elements": self.elements,
            "failures": self.failures,
            "max_abs": self.max_abs,
            "mean_abs": self.mean_abs,
            "p99_abs": self.p99(self._abs_hist, self._zeros),
            "max_rel": self.max_rel,
            "mean_rel": self.mean_rel,
            "p99_rel": self.p99(self._rel_hist, max(self._rel_elements - self._rel_hist.sum(), 0.0)),
            "max_ulp": self.max_ulp,
            "max_ratio": self.max_ratio,
            "cosine": cosine,
            "worst": self.worst,
            "histogram": {
                "edges_log10": HIST_EDGES.tolist(),
                "zeros": int(self._zeros),
                "counts": [int(c) for c in self._abs_hist],
            },
        }
        for key in ("max_abs", "max_rel", "max_ulp", "max_ratio", "mean_abs", "mean_rel", "p99_abs", "p99_rel"):
            value = out[key]
            if isinstance(value, float) and not np.isfinite(value):
                out[key] = None  # JSON has no infinity; worst["error"] says what happened
        return out


def _log_histogram(errors: np.ndarray) -> np.ndarray:
    """Counts of nonzero errors by log10 bin: [below the first edge, each bin, at or above the last edge]."""
    nonzero = errors[errors > 0]
    if not nonzero.size:
        return np.zeros(len(HIST_EDGES) + 1)
    logs = np.log10(np.minimum(nonzero, 1e300))
    return np.bincount(np.searchsorted(HIST_EDGES, logs, side="right"), minlength=len(HIST_EDGES) + 1)[
        : len(HIST_EDGES) + 1
    ].astype(np.float64)


def _take_kept(positions: np.ndarray, kept: list[int | None]) -> np.ndarray:
    """The position array after the same axes were collapsed as the outputs (index 0 along each)."""
    for axis, index in enumerate(kept):
        if index is not None and positions.shape[axis] > 1:
            positions = positions.take([index], axis=axis)
    return positions


def _json_float(value: Any) -> float | str:
    """A float for JSON: infinities and NaN as strings ("-inf"), which JSON cannot hold as numbers."""
    value = float(value)
    return value if np.isfinite(value) else str(value)


def _collapse(actual: np.ndarray, expected: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[int | None]]:
    """Drop axes along which the expected value is one broadcast slice and the actual output is bitwise one slice.

    Comparing that slice is then the same as comparing every element, at a fraction of the cost (sweeps repeat one
    vector across heads). Any difference between slices, NaN included, keeps the full comparison. The third value
    marks each collapsed axis (0: the slice kept) so that position arrays can follow.
    """
    kept: list[int | None] = [None] * expected.ndim
    for axis in range(expected.ndim):
        if expected.shape[axis] > 1 and expected.strides[axis] == 0:
            first = actual.take([0], axis=axis)
            if np.array_equal(actual, np.broadcast_to(first, actual.shape)):
                actual, expected = first, expected.take([0], axis=axis)
                kept[axis] = 0
    return actual, expected, kept
