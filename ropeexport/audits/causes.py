"""Why a rotary table is not exact: a table of diagnoses tried in order, each recognising one cause from the observed
rows against the exact float64 ones (``Measured``) and naming it in the field's words.

A diagnosis returns None when its cause does not explain the table (the next one is tried), else the findings it
names; an empty list is explained with nothing to add (right frequencies under a wrong attention factor, which
``diagnose.compare`` has said already). In order (``CAUSES``):
1. ``clamped``: rows past r repeat row r (positions clamped, a table frozen at length r + 1); rows 0 .. r are then
   diagnosed in turn;
2. ``cos-sin-exchanged``: every angle is pi/2 minus the exact one;
3. ``sin-negated``: every angle is minus the exact one (the rotation runs the other way);
4. ``position-offset``: row p holds position p + k (k read from row 0's angles, the lowest frequency first, each
   finer one resolving the turns the coarser predicts);
5. right frequencies (``Measured.same``): a precision finding: float32 angles, float32 frequencies seen through fp16
   (bf16) rounding, float32 frequencies, or values off as measured;
6. ``other-layers-table``: the table of another group of layers (a per-layer config: the sliding layers given the
   global layers' table), in the field's words with both encodings;
   ``other-layers-scaling``: another group's scaling at this group's own theta (the sliding layers given the global
   layers' linear x8 at theta 10000);
   ``one-head-dim``: the config's schedule made at another group's head_dim, zero-padded to this layer's width (Gemma
   4's global proportional table made at the sliding layers' head_dim: fewer real pairs, each another frequency);
   another group's width is never compared as this one's (``Measured.same``);
7. a known mis-reading of the config's schedule: scaling ignored, the LongRoPE switch never or wrongly taken, dynamic
   NTK at another length, YaRN's correction range truncated the other way, YaRN applied twice (to its own output);
8. ``theta``: the config's schedule (or the default one) of another base, read from the two highest frequencies;
9. ``scaling-factor``: the config's schedule with another ``factor``, read from the lowest frequency; else a constant
   ratio to the config's frequencies (``frequency-ratio``), as measured;
10. ``frequencies-differ``: which dimension turns at which rate, as measured; never guessed.

Angles are compared modulo 2 pi, each within a few float32 units of the exact angle plus four units of the stored
dtype (``Measured.envelope``): what float32 angles and one rounding can do, so a structural cause (a sign, an offset)
is named through them too. Frequencies are compared within 1e-4 relative, or within what the rows can tell
(``Measured.resolution``: a 16-bit table's angles resolve a frequency no finer than four units over its last row).
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from ropeexport.audits.layers import describe, layer_finding
from ropeexport.errors import SpecError
from ropeexport.families.rope.regimes import frequencies, switch_length
from ropeexport.families.rope.schedules import get_schedule
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.report.words import error

ULP = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7, "float64": 2.0**-52}
MATCH = 1e-4  # relative agreement of two inverse-frequency vectors that names a cause
HALF = {"float16": "fp16", "bfloat16": "bf16"}  # 16-bit dtypes, as the field names them
# What ``right_frequencies`` names: the config's schedule, values off by precision (what exact tables repair)
PRECISION = frozenset({"float32-angles", *(f"float32-through-{h}" for h in HALF.values()), "float32-frequencies",
                       "values-off"})  # fmt: skip


def finding(name: str, text: str) -> dict[str, str]:
    """A finding as audit.json holds it: a stable ``name`` (``scaling-ignored``) and the words a user reads."""
    return {"name": name, "text": text}


def estimate_frequencies(cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Inverse frequencies [w] unwrapped from the angles at positions 1, 2, 4, .. (``diagnose`` module doc)."""
    angle = np.arctan2(sin, cos)  # [rows, w], in (-pi, pi]
    estimate = angle[1].copy()  # position 1: the frequency itself (every inverse frequency is below pi)
    k = 2
    while k < len(angle):
        turns = np.round((k * estimate - angle[k]) / (2 * np.pi))
        estimate = (angle[k] + 2 * np.pi * turns) / k
        k *= 2
    return estimate


def _wrapped(angles: np.ndarray) -> np.ndarray:
    """|angles| folded into [0, pi]: the distance of two angles modulo 2 pi."""
    return np.abs((angles + np.pi) % (2 * np.pi) - np.pi)


def _number(x: float) -> str:
    """A parameter as a config writes it: 500000, 1e-05, 2.5."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:.6g}"


def _rounded(x: float) -> list[float]:
    """``x`` to 1 .. 6 significant digits, then as measured: the plainest value a config would hold comes first."""
    return [*dict.fromkeys(float(f"{x:.{d}g}") for d in range(1, 7)), x]


@dataclass
class Measured:
    """One call's observed rows [n, w] (n <= L, float64 as stored) against the config's schedule at L."""

    spec: RopeSpec
    length: int
    cos: np.ndarray
    sin: np.ndarray
    inv: np.ndarray  # the config's inverse frequencies at L [w]
    factor: float  # the config's attention factor at L
    tol: float  # one unit of the stored dtype, times the factor (``diagnose.compare``)
    dtype: str
    factor_off: bool = False  # the observed attention factor is another (said already)
    label: str = ""  # the site's layers: their group's label and indices (``who``), () when not told
    layers: tuple[int, ...] = ()
    others: tuple[tuple[str, Any], ...] = ()  # the model's other encodings: (their layers' label, spec)

    @property
    def rows(self) -> int:
        """How many rows are compared."""
        return len(self.cos)

    def head(self, rows: int) -> Measured:
        """The same call, rows 0 .. rows - 1 only."""
        return replace(self, cos=self.cos[:rows], sin=self.sin[:rows])

    def exact_angles(self, offset: int = 0) -> np.ndarray:
        """[n, w] float64: (p + offset) x inverse frequency for rows p (``regimes.exact_tables``' product)."""
        return np.outer(np.arange(offset, offset + self.rows, dtype=np.float64), self.inv)

    @cached_property
    def exact(self) -> np.ndarray:
        """The exact angles of rows 0 .. n - 1 [n, w]."""
        return self.exact_angles()

    @cached_property
    def diff(self) -> np.ndarray:
        """[n]: each row's worst |observed - exact| over cos and sin."""
        cos, sin = self.factor * np.cos(self.exact), self.factor * np.sin(self.exact)
        return np.maximum(np.abs(self.cos - cos), np.abs(self.sin - sin)).max(axis=1, initial=0.0)

    @cached_property
    def worst(self) -> tuple[float, int]:
        """(max |observed - exact|, its position)."""
        position = int(np.argmax(self.diff)) if self.rows else 0
        return (float(self.diff[position]) if self.rows else float("inf")), position

    @cached_property
    def angles(self) -> np.ndarray:
        """The observed angles atan2(sin, cos) [n, w]."""
        return np.arctan2(self.sin, self.cos)

    @cached_property
    def envelope(self) -> np.ndarray:
        """[n, w]: how far an angle may be from the exact one through float32 angles and the dtype's rounding."""
        return 4 * np.spacing(np.abs(self.exact).astype(np.float32)).astype(np.float64) + 4 * self.tol

    def agrees(self, angles: np.ndarray, exact: np.ndarray | None = None) -> bool:
        """Every angle of ``angles`` within the envelope of ``exact`` (default: the exact angles), modulo 2 pi."""
        return bool(np.all(_wrapped(angles - (self.exact if exact is None else exact)) <= self.envelope))

    @cached_property
    def seen(self) -> np.ndarray:
        """The inverse frequencies the rows turn at [w] (``estimate_frequencies``)."""
        return estimate_frequencies(self.cos, self.sin)

    @cached_property
    def resolution(self) -> np.ndarray:
        """[w]: how finely the rows tell a frequency: the envelope at the last row the estimate reads, over it."""
        last = 1 << max(0, (self.rows - 1).bit_length() - 1)  # the largest power of two below n
        angle = np.abs(last * self.inv).astype(np.float32)
        return (4 * np.spacing(angle).astype(np.float64) + 4 * self.tol) / last

    def same(self, inv: np.ndarray) -> bool:
        """The rows turn at ``inv``: within 1e-4 relative, or within what they can tell (``resolution``)."""
        if inv.shape != self.seen.shape:  # another width (a layer group with its own head_dim: Gemma 4) is not this
            return False
        return bool(np.all(np.abs(self.seen - inv) <= np.maximum(MATCH * np.abs(inv), self.resolution)))


Diagnosis = Callable[[Measured], "list[dict[str, Any]] | None"]


def clamped(m: Measured) -> list[dict[str, str]] | None:
    """Rows past r all equal to row r: the positions clamped, the table frozen at length r + 1."""
    last = np.all(m.cos == m.cos[-1], axis=1) & np.all(m.sin == m.sin[-1], axis=1)
    run = int(np.argmin(last[::-1])) if not last.all() else m.rows  # the trailing rows equal to the last one
    if run < 2:
        return None  # no two rows of an exact table are equal: every one turns the highest frequency on
    row = m.rows - run
    text = f"rows past {row} repeat row {row} (table clamped / frozen at length {row + 1})"
    return [finding("clamped", text), *diagnose(m.head(row + 1))]


def exchanged(m: Measured) -> list[dict[str, str]] | None:
    """cos and sin exchanged: the angles are pi/2 - the exact ones."""
    return [finding("cos-sin-exchanged", "cos and sin exchanged")] if m.agrees(np.pi / 2 - m.angles) else None


def negated(m: Measured) -> list[dict[str, str]] | None:
    """sin negated: the angles are minus the exact ones."""
    if not m.agrees(-m.angles):
        return None
    return [finding("sin-negated", "sin negated (rotation in the opposite direction)")]


def offset(m: Measured) -> list[dict[str, str]] | None:
    """Row p holds position p + k, k != 0: k unwrapped from row 0's angles (k x frequency), lowest frequency first."""
    order = [int(i) for i in np.argsort(m.inv) if m.inv[i] > 0]
    if not order:
        return None
    first = m.angles[0]
    k = first[order[0]] / m.inv[order[0]]
    for i in order[1:]:
        turns = np.round((k * m.inv[i] - first[i]) / (2 * np.pi))
        k = (first[i] + 2 * np.pi * turns) / m.inv[i]
    shift = int(round(k))
    if shift == 0 or not m.agrees(m.angles, m.exact_angles(shift)):
        return None
    signed = f"+{shift}" if shift > 0 else str(shift)
    return [finding("position-offset", f"positions offset by {signed} (row p holds position p{signed})")]


def right_frequencies(m: Measured) -> list[dict[str, str]] | None:
    """The config's frequencies, values off: float32 angles, float32 through fp16, float32 frequencies, or as
    measured; nothing to add when a wrong attention factor explains the error.
    """  # noqa: D205
    if not m.same(m.inv):
        return None
    max_abs, position = m.worst
    if m.factor_off:
        return []
    where = f"{error(max_abs)} at position {position}"
    if m.agrees(m.angles):  # position x frequency in float32 (the frequency too): a few float32 units of the angle
        half = HALF.get(m.dtype)
        if half is not None:
            return [finding(f"float32-through-{half}", f"float32 frequencies seen through {half} rounding: {where} "
                            f"(the table computed in float32, then rounded to {m.dtype}: precision, not another "
                            "schedule)")]  # fmt: skip
        return [finding("float32-angles", f"float32 angles: {where} (the angle position x frequency in float32)")]
    drift = np.abs(m.seen - m.inv) / m.inv
    worst = int(np.argmax(drift))
    if drift[worst] <= 1e-5:  # a few dozen float32 units: the frequencies themselves computed in float32
        return [finding("float32-frequencies", f"float32 frequencies: {where} (inverse frequencies computed in "
                        f"float32, dimension {worst} off by {error(drift[worst])} relative; angles too)")]  # fmt: skip
    return [finding("values-off", f"values off by {where} with the right frequencies (not float32 rounding)")]


def other_layers(m: Measured) -> list[dict[str, Any]] | None:
    """The table of another group of layers (a per-layer config): the sliding layers given the global one."""
    for label, spec in m.others:
        inv, factor = frequencies(spec, m.length)
        if m.same(inv) and abs(factor - m.factor) <= 4 * m.tol:
            template = f"{{who}} use{{s}} the {label} layers' table: {describe(spec)}; config: {describe(m.spec)}"
            return [layer_finding("other-layers-table", template, m.label, m.layers or ())]
    for label, spec in m.others:  # their scaling at this layer's own theta (the builder's Gemma 3 local cache)
        if spec.scaling == m.spec.scaling and spec.scaling_params == m.spec.scaling_params:
            continue
        mixed = replace(m.spec, scaling=spec.scaling, scaling_params=spec.scaling_params)
        if m.same(frequencies(mixed, m.length)[0]):
            template = f"{{who}} take{{s}} the {label} layers' scaling: {describe(mixed)}; config: {describe(m.spec)}"
            return [layer_finding("other-layers-scaling", template, m.label, m.layers or ())]
    return None


def other_head_dim(m: Measured) -> list[dict[str, Any]] | None:
    """The config's schedule made at another layer group's head_dim, zero-padded to this layer's width: one head_dim
    taken for every layer of a model whose layers have their own (optimum #2436 on Gemma 4: the global layers'
    proportional table made at the sliding layers' head_dim, so fewer real frequency pairs, each another frequency).
    """  # noqa: D205
    for label, spec in m.others:
        if spec.head_dim == m.spec.head_dim or m.spec.rotary_dim * spec.head_dim % m.spec.head_dim:
            continue
        try:
            narrow = replace(m.spec, head_dim=spec.head_dim,
                             rotary_dim=m.spec.rotary_dim * spec.head_dim // m.spec.head_dim)  # fmt: skip
            inv = frequencies(narrow, m.length)[0]
        except (ValueError, ArithmeticError, SpecError):  # a width this layer's schedule cannot take
            continue
        padded = np.zeros_like(m.inv)
        padded[: min(inv.size, padded.size)] = inv[: padded.size]
        if m.same(padded):
            real = int(np.count_nonzero(inv))
            template = (f"{{who}} use{{s}} a table made at the {label} layers' head_dim {spec.head_dim} ({real} real "
                        f"frequency pair{'s' if real != 1 else ''} where the config has "
                        f"{int(np.count_nonzero(m.inv))}, zero-padded to {m.inv.size}): one head_dim for every layer; "
                        f"config: head_dim {m.spec.head_dim}, {describe(m.spec)}")  # fmt: skip
            return [layer_finding("one-head-dim", template, m.label, m.layers or ())]
    return None


def _misreadings(spec: RopeSpec, length: int) -> list[tuple[dict[str, str], np.ndarray]]:
    """Known mis-readings of the config's schedule at call L: (finding, inverse frequencies)."""
    out: list[tuple[dict[str, str], np.ndarray]] = []
    schedule = get_schedule(spec.scaling)
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
        truncate = bool(spec.scaling_params.get("truncate", True))
        state = "not truncated" if truncate else "truncated"
        text = f"YaRN correction range {state} (the config says truncate: {str(truncate).lower()})"
        out.append((finding("yarn-truncation", text), frequencies(spec, length, truncate=not truncate)[0]))
        # YaRN's blend applied to its own output: each dimension's scale g (1/factor .. 1) squared
        base = frequencies(spec, length, "default")[0]
        twice = base * (frequencies(spec, length)[0] / base) ** 2
        factor = float(spec.scaling_params.get("factor", 1.0))
        text = (f"YaRN applied twice: the frequencies are the config's YaRN x{_number(factor)} applied to its own "
                f"output (x{_number(factor * factor)} on the dimensions it interpolates fully, its ramp's blend "
                "squared)")  # fmt: skip
        out.append((finding("yarn-applied-twice", text), twice))
    return out


def misreading(m: Measured) -> list[dict[str, str]] | None:
    """The first known mis-reading of the config's schedule the rows turn at."""
    return next(([found] for found, inv in _misreadings(m.spec, m.length) if m.same(inv)), None)


def theta(m: Measured) -> list[dict[str, str]] | None:
    """The config's schedule of another base, or the default schedule of it (scaling ignored too): the base read from
    the two highest frequencies (theta^(2/r) apart in every schedule that leaves them unscaled).
    """  # noqa: D205
    spec, seen = m.spec, m.seen
    if len(seen) < 2 or not seen[1] > 0 or not seen[0] > seen[1]:
        return None
    base = float((seen[0] / seen[1]) ** (spec.rotary_dim / 2))
    if not np.isfinite(base):
        return None
    names = [spec.scaling] + (["default"] if spec.scaling != "default" else [])
    for value in _rounded(base):
        if value <= 1.0 or _number(value) == _number(spec.theta):  # the config's, as it would be said
            continue
        said = finding("theta", f"theta {_number(value)} where the config says {_number(spec.theta)}"
                       f"{_times(value, spec.theta)}")
        for name in names:
            params = spec.scaling_params if name == spec.scaling else {}
            if m.same(get_schedule(name).frequencies(spec.rotary_dim, value, params, m.length).inv_freq):
                if name == spec.scaling:
                    return [said]
                ignored = "rope_scaling ignored (the table matches the default schedule; the config says "
                return [said, finding("scaling-ignored", f"{ignored}{spec.scaling})")]
    return None


def scaling_factor(m: Measured) -> list[dict[str, str]] | None:
    """The config's schedule with another ``factor`` (read from the lowest frequency, which every factor divides);
    else a constant ratio to the config's frequencies, as measured.
    """  # noqa: D205
    spec = m.spec
    ratio = float(np.mean(m.seen / m.inv))
    constant = m.same(ratio * m.inv)
    factor = spec.scaling_params.get("factor")
    if factor is not None:
        lowest = int(np.argmin(m.inv))
        for value in _rounded(float(factor) * m.inv[lowest] / m.seen[lowest]):
            if value <= 0 or _number(value) == _number(float(factor)):
                continue
            try:
                inv = frequencies(spec, m.length, factor=value)[0]
            except (ValueError, ArithmeticError):  # a factor the schedule cannot take (below 1, say)
                continue
            if m.same(inv):
                text = f"rope_scaling factor {_number(value)} where the config says {_number(float(factor))}"
                if constant:
                    text += f" (inverse frequencies {ratio:.6g} x the config's {spec.scaling} ones)"
                return [finding("scaling-factor", text)]
    if constant:
        return [finding("frequency-ratio", f"inverse frequencies {ratio:.6g} x the config's {spec.scaling} ones "
                        "(a constant ratio no parameter of its schedule explains)")]  # fmt: skip
    return None


def _times(value: float, config: float) -> str:
    """`` (100x too small)`` where one base is a power of ten (>= 10) times the other: a fallback or a unit slip
    (EXAONE's theta fallback 100x off, DeepSpeed PR #8345), else nothing.
    """  # noqa: D205
    ratio = max(value, config) / min(value, config)
    power = round(float(np.log10(ratio)))
    if power < 1 or abs(ratio / 10.0**power - 1) > 1e-9:
        return ""
    return f" ({10**power}x {'too large' if value > config else 'too small'})"


def as_measured(m: Measured) -> list[dict[str, str]]:
    """What is measured, never guessed: the dimension whose frequency is furthest from the config's."""
    max_abs, position = m.worst
    worst = int(np.argmax(np.abs(m.seen - m.inv) / m.inv))
    return [finding("frequencies-differ", f"frequencies differ from the config's {m.spec.scaling}: dimension {worst} "
                    f"turns at {m.seen[worst]:.6g} rad/position where {m.inv[worst]:.6g} is exact ({error(max_abs)} at "
                    f"position {position})")]  # fmt: skip


CAUSES: tuple[Diagnosis, ...] = (clamped, exchanged, negated, offset, right_frequencies, other_layers,
                                 other_head_dim, misreading,
                                 theta, scaling_factor, as_measured)  # fmt: skip


def diagnose(m: Measured) -> list[dict[str, Any]]:
    """The findings of the first cause in ``CAUSES`` that explains ``m`` (none when its rows are exact)."""
    if m.rows < 2 or m.worst[0] <= m.tol:
        return []
    for cause in CAUSES:
        found = cause(m)
        if found is not None:
            return found
    return []
