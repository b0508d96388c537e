"""A site's observed cos/sin against the config's schedule in float64, and the fault named in the field's words.

Every comparison is made per call length L (``families.rope.regimes.probe_lengths``: the regimes a schedule has), on
rows 0 .. L - 1:
- error: max |observed - exact| over cos and sin, with its position; exact to the dtype when within one unit in the
  last place of the stored dtype (times the attention factor, for factors above 1);
- what the model really does, read from its values: the magnitude sqrt(cos^2 + sin^2) at position 0 is its
  attention factor; the inverse frequencies are unwrapped from the angles atan2(sin, cos) at positions 1, 2, 4, ..
  (each doubling resolves the turns the previous estimate predicts, up to the last row), precise to ~1e-7 relative;
- the cause: the estimated frequencies matched (1e-4 relative) against the config's schedule and its known
  mis-readings: the default schedule (scaling ignored), the other LongRoPE regime (switch never or wrongly taken),
  dynamic NTK at another length (left unscaled, frozen), YaRN with the correction range truncated the other way,
  and a constant ratio (another factor or theta); with the right frequencies and factor, an error within what
  float32 angles (position x frequency rounded to float32) can make is named "float32 angles", and one whose
  frequencies drift by up to 1e-5 relative (computed in float32 through a schedule's steps) "float32 frequencies";
  cos and sin exchanged are recognised too. Anything else is said as it is measured, never guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ropeexport.families.rope.regimes import exact_tables, frequencies, switch_length
from ropeexport.families.rope.schedules import get_schedule
from ropeexport.families.rope.spec import RopeSpec

ULP = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7, "float64": 2.0**-52}
MATCH = 1e-4  # relative agreement of two inverse-frequency vectors that names a cause


@dataclass
class LengthCheck:
    """One call length's comparison of a site (module doc)."""

    length: int
    rows: int
    max_abs: float
    position: int
    exact: bool
    findings: list[dict[str, str]] = field(default_factory=list)  # {"name": a stable key, "text": the words}
    attention_factor: float | None = None
    tolerance: float = 0.0
    curve: dict[str, list[float]] = field(default_factory=dict)  # worst error per bin of positions: x (bin start), y

    def to_dict(self) -> dict[str, object]:
        """The probe as plain data (audit.json)."""
        return {"length": self.length, "rows": self.rows, "max_abs": self.max_abs, "position": self.position,
                "exact": self.exact, "attention_factor": self.attention_factor, "findings": self.findings,
                "tolerance": self.tolerance, "curve": self.curve}  # fmt: skip


def estimate_frequencies(cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Inverse frequencies [w] unwrapped from the angles at positions 1, 2, 4, .. (module doc)."""
    angle = np.arctan2(sin, cos)  # [rows, w], in (-pi, pi]
    estimate = angle[1].copy()  # position 1: the frequency itself (every inverse frequency is below pi)
    k = 2
    while k < len(angle):
        turns = np.round((k * estimate - angle[k]) / (2 * np.pi))
        estimate = (angle[k] + 2 * np.pi * turns) / k
        k *= 2
    return estimate


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))


def finding(name: str, text: str) -> dict[str, str]:
    """A finding as audit.json holds it: a stable ``name`` (``scaling-ignored``) and the words a user reads."""
    return {"name": name, "text": text}


def _candidates(spec: RopeSpec, length: int) -> list[tuple[dict[str, str], np.ndarray]]:
    """Known mis-readings of the config's schedule at call L: (finding, inverse frequencies)."""
    out: list[tuple[dict[str, str], np.ndarray]] = []
    schedule = get_schedule(spec.scaling)
    params = spec.scaling_params
    if spec.scaling != "default":
        text = f"rope_scaling ignored (the table matches the default schedule; the config says {spec.scaling})"
        out.append((finding("scaling-ignored", text), frequencies(spec, length, "default")[0]))
    threshold = switch_length(spec)
    if schedule.regime == "switch" and threshold is not None:
        if length > threshold:
            text = (f"long factors never used: at L = {length} > original_max_position_embeddings {threshold} the "
                    "short factors are in effect (the switch is not taken, or on another length)")  # fmt: skip
            out.append((finding("switch-never-taken", text), frequencies(spec, threshold)[0]))
        else:
            text = (f"long factors used at L = {length} <= original_max_position_embeddings {threshold}: the switch "
                    "is on another length (the allocated one?)")  # fmt: skip
            out.append((finding("switch-on-wrong-length", text), frequencies(spec, threshold + 1)[0]))
    if schedule.regime == "continuous" and threshold is not None:
        for other in sorted({threshold, spec.max_positions} - {max(length, threshold)}):
            name, what = (
                ("dynamic-unscaled", "left unscaled")
                if other == threshold
                else ("dynamic-frozen", f"frozen at L = {other}")
            )
            text = f"dynamic NTK {what}: at L = {length} the frequencies are those of L = {other}"
            out.append((finding(name, text), frequencies(spec, other)[0]))
    if spec.scaling == "yarn":
        truncate = bool(params.get("truncate", True))
        state = "not truncated" if truncate else "truncated"
        text = f"YaRN correction range {state} (the config says truncate: {str(truncate).lower()})"
        out.append((finding("yarn-truncation", text), frequencies(spec, length, truncate=not truncate)[0]))
    return out


def compare(spec: RopeSpec, cos: np.ndarray, sin: np.ndarray, length: int, dtype: str) -> LengthCheck:
    """The observed rows of one call of L tokens against the exact tables (module doc)."""
    rows = min(len(cos), length)
    exact_cos, exact_sin = exact_tables(spec, length)
    _, factor = frequencies(spec, length)
    tol = ULP.get(dtype, ULP["float32"]) * max(1.0, abs(factor))
    diff = np.maximum(np.abs(cos[:rows] - exact_cos[:rows]), np.abs(sin[:rows] - exact_sin[:rows])).max(axis=1)
    position = int(np.argmax(diff)) if rows else 0
    max_abs = float(diff[position]) if rows else math.inf
    findings: list[dict[str, str]] = []
    if rows < length:
        text = (f"the table has {len(cos)} rows: positions {len(cos)} .. {length - 1} of a call of {length} tokens "
                f"have no cos/sin (frozen at length {len(cos)}?)")  # fmt: skip
        findings.append(finding("table-rows", text))
    observed_factor = float(math.hypot(cos[0, 0], sin[0, 0])) if rows else None
    exact = max_abs <= tol and rows == length
    probe = LengthCheck(length, rows, max_abs, position, exact, findings, observed_factor, tol, curve(diff))
    if probe.exact or rows < 2:
        return probe
    if np.max(np.abs(cos[:rows] - exact_sin[:rows])) <= tol and np.max(np.abs(sin[:rows] - exact_cos[:rows])) <= tol:
        findings.append(finding("cos-sin-exchanged", "cos and sin exchanged"))
        return probe
    factor_off = observed_factor is not None and abs(observed_factor - factor) > tol
    if factor_off:
        findings.append(finding("attention-factor", f"attention factor {observed_factor:.6g} where the config's "
                                 f"{spec.scaling} implies {factor:.6g}"))  # fmt: skip
    inv, _ = frequencies(spec, length)
    seen = estimate_frequencies(cos[:rows], sin[:rows])
    if _relative(seen, inv) <= MATCH:
        if max_abs > tol and not factor_off:  # a wrong factor explains the error already
            findings.append(_rounding(cos[:rows], sin[:rows], inv, seen, max_abs, position, tol))
        return probe
    for misreading, candidate in _candidates(spec, length):
        if _relative(seen, candidate) <= MATCH:
            findings.append(misreading)
            return probe
    ratio = seen / inv
    if float(np.std(ratio) / np.mean(ratio)) <= MATCH:
        findings.append(finding("frequency-ratio", f"inverse frequencies {float(np.mean(ratio)):.6g} x the "
                                 f"config's {spec.scaling} ones (another factor or theta)"))  # fmt: skip
        return probe
    worst = int(np.argmax(np.abs(seen - inv) / inv))
    findings.append(finding("frequencies-differ", f"frequencies differ from the config's {spec.scaling}: "
                             f"dimension {worst} turns at {seen[worst]:.6g} rad/position where {inv[worst]:.6g} is "
                             f"exact ({max_abs:.2g} at position {position})"))  # fmt: skip
    return probe


def curve(diff: np.ndarray, bins: int = 256) -> dict[str, list[float]]:
    """The worst error in each of up to ``bins`` equal bins of positions (what audit.html plots)."""
    if not len(diff):
        return {"x": [], "y": []}
    edges = np.unique(np.linspace(0, len(diff), min(bins, len(diff)) + 1).astype(np.int64))
    spans = zip(edges[:-1], edges[1:], strict=True)
    return {"x": [int(a) for a in edges[:-1]], "y": [float(diff[a:b].max()) for a, b in spans]}


def _rounding(
    cos: np.ndarray, sin: np.ndarray, inv: np.ndarray, seen: np.ndarray, max_abs: float, position: int, tol: float
) -> dict[str, str]:
    """Right frequencies and factor, values off: float32 angles, float32 frequencies, or as measured."""
    positions = np.arange(len(cos), dtype=np.float64)[:, None]
    exact = positions * inv[None, :]
    error = np.abs(np.angle(np.exp(1j * (np.arctan2(sin, cos) - exact))))
    where = f"{max_abs:.2g} at position {position}"
    # position x frequency rounded to float32 (and the frequency itself): within a few float32 ulps of the angle
    envelope = 4 * np.spacing(exact.astype(np.float32)).astype(np.float64) + 4 * tol
    if np.all(error <= envelope):
        return finding("float32-angles", f"float32 angles: {where} (the angle position x frequency in float32)")
    drift = np.abs(seen - inv) / inv
    worst = int(np.argmax(drift))
    if drift[worst] <= 1e-5:  # a few dozen float32 units: the frequencies themselves computed in float32
        return finding("float32-frequencies", f"float32 frequencies: {where} (inverse frequencies computed in "
                        f"float32, dimension {worst} off by {drift[worst]:.2g} relative; angles too)")  # fmt: skip
    return finding("values-off", f"values off by {where} with the right frequencies (not float32 rounding)")
