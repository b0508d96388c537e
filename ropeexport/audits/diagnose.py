"""A site's observed cos/sin against the config's schedule in float64, and the fault named in the field's words.

Every comparison is made per call length L (``families.rope.regimes.check_lengths``: the regimes a schedule has), on
rows 0 .. L - 1:
- error: max |observed - exact| over cos and sin, with its position; exact to the dtype when within one unit in the
  last place of the stored dtype (times the attention factor, for factors above 1);
- what the model really does, read from its values: the magnitude sqrt(cos^2 + sin^2) at position 0 is its
  attention factor; the inverse frequencies are unwrapped from the angles atan2(sin, cos) at positions 1, 2, 4, ..
  (each doubling resolves the turns the previous estimate predicts, up to the last row), precise to ~1e-7 relative;
- the cause: a table of diagnoses tried in order (``causes``: clamped rows, cos and sin exchanged, sin negated,
  positions offset, right frequencies with a precision finding, a known mis-reading of the schedule, another theta,
  another factor or a constant ratio, and what is measured when nothing explains it); a wrong attention factor is
  said beside whichever cause. Anything else is said as it is measured, never guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ropeexport.audits.causes import ULP, Measured, diagnose, estimate_frequencies, finding
from ropeexport.families.rope.regimes import frequencies
from ropeexport.families.rope.spec import RopeSpec

__all__ = ["LengthCheck", "compare", "curve", "estimate_frequencies", "finding"]


@dataclass
class LengthCheck:
    """One call length's comparison of a site (module doc)."""

    length: int
    rows: int
    max_abs: float
    position: int
    exact: bool
    findings: list[dict[str, Any]] = field(default_factory=list)  # {"name": a stable key, "text": the words}
    attention_factor: float | None = None
    tolerance: float = 0.0
    curve: dict[str, list[float]] = field(default_factory=dict)  # worst error per bin of positions: x (bin start), y

    def to_dict(self) -> dict[str, object]:
        """The probe as plain data (audit.json)."""
        return {"length": self.length, "rows": self.rows, "max_abs": self.max_abs, "position": self.position,
                "exact": self.exact, "attention_factor": self.attention_factor, "findings": self.findings,
                "tolerance": self.tolerance, "curve": self.curve}  # fmt: skip


def compare(spec: RopeSpec, cos: np.ndarray, sin: np.ndarray, length: int, dtype: str, label: str = "",
            layers: tuple[int, ...] = (), others: tuple[tuple[str, Any], ...] = ()) -> LengthCheck:  # fmt: skip
    """The observed rows of one call of L tokens against the exact tables (module doc); ``label`` and ``layers`` say
    whose they are, ``others`` the model's other encodings (their layers' label, spec), a cause ``causes`` names.
    """  # noqa: D205
    rows = min(len(cos), length)
    inv, factor = frequencies(spec, length)
    tol = ULP.get(dtype, ULP["float32"]) * max(1.0, abs(factor))
    measured = Measured(spec, length, cos[:rows], sin[:rows], inv, factor, tol, dtype, label=label, layers=layers,
                        others=others)  # fmt: skip
    max_abs, position = measured.worst
    findings: list[dict[str, Any]] = []
    if rows < length:
        text = (f"the table has {len(cos)} rows: positions {len(cos)} .. {length - 1} of a call of {length} tokens "
                f"have no cos/sin (frozen at length {len(cos)}?)")  # fmt: skip
        findings.append(finding("table-rows", text))
    observed_factor = float(math.hypot(cos[0, 0], sin[0, 0])) if rows else None
    exact = max_abs <= tol and rows == length
    probe = LengthCheck(length, rows, max_abs, position, exact, findings, observed_factor, tol,
                        curve(measured.diff))  # fmt: skip
    if probe.exact or rows < 2:
        return probe
    measured.factor_off = observed_factor is not None and abs(observed_factor - factor) > tol
    if measured.factor_off:
        squared = factor != 1.0 and abs(float(observed_factor or 0.0) - factor * factor) <= tol  # applied twice
        said = " (its square: applied twice)" if squared else ""
        why = "" if squared else _softmax_mscale(spec, float(observed_factor or 0.0), factor, tol)
        findings.append(finding("attention-factor", f"attention factor {observed_factor:.6g}{said} where the "
                                 f"config's {spec.scaling} implies {factor:.6g}{why}"))  # fmt: skip
    findings += diagnose(measured)
    return probe


def _softmax_mscale(spec: RopeSpec, observed: float, factor: float, tol: float) -> str:
    """Words for a YaRN table scaled by the softmax's mscale too (DeepSeek V2 / V3: transformers multiplies the
    softmax scale by yarn_get_mscale(factor, mscale_all_dim) squared and leaves cos/sin at mscale / mscale_all_dim's
    ratio; an export that also scales cos/sin by it scales q.k by its square once more), else "".
    """  # noqa: D205
    params = spec.scaling_params or {}
    scale, all_dim = params.get("factor"), params.get("mscale_all_dim")
    if spec.scaling != "yarn" or not scale or not all_dim or float(scale) <= 1:
        return ""
    softmax = 0.1 * float(all_dim) * math.log(float(scale)) + 1.0  # transformers' yarn_get_mscale
    if abs(observed - factor * softmax) > tol:
        return ""
    return (f": the softmax's mscale ({softmax:.6g}: mscale_all_dim {float(all_dim):g} at x{float(scale):g}) applied "
            "to cos/sin as well (transformers scales only the softmax, by its square)")


def curve(diff: np.ndarray, bins: int = 256) -> dict[str, list[float]]:
    """The worst error in each of up to ``bins`` equal bins of positions (what audit.html plots)."""
    if not len(diff):
        return {"x": [], "y": []}
    edges = np.unique(np.linspace(0, len(diff), min(bins, len(diff)) + 1).astype(np.int64))
    spans = zip(edges[:-1], edges[1:], strict=True)
    return {"x": [int(a) for a in edges[:-1]], "y": [float(diff[a:b].max()) for a, b in spans]}
