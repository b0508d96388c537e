"""RoPE frequency schedules: pure functions from the spec to ``(inv_freq, attention_factor)``.

One registry keyed by name, with Hugging Face transformers' parameter names and semantics (``rope_scaling`` /
``rope_parameters``); the code is our own, in float64 throughout. ``dim`` below is the rotary dimension
(``head_dim * partial_rotary_factor`` in transformers' terms), and every ``inv_freq`` has ``dim // 2`` entries.

Regimes:
- ``static``: one set of frequencies for every call (default, linear, ntk, yarn, llama3).
- ``switch``: one of two sets, chosen per batch row by ``L = max(position_ids[b]) + 1 >
  original_max_position_embeddings`` (longrope: short factors below, long factors above; ``regimes``).
- ``continuous``: the frequencies are a function of ``L`` once it exceeds ``original_max_position_embeddings``
  (dynamic NTK); below it they are the default ones.

References: Chen et al. 2023 (position interpolation, "linear"); bloc97 2023 (NTK-aware scaling, "ntk");
emozilla 2023 (dynamic NTK); Peng et al. 2023 (YaRN); Meta 2024 (Llama 3.1 "llama3"); Ding et al. 2024 (LongRoPE).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ropeexport.errors import SpecError

ParamKind = Literal["float", "int", "bool", "floats"]
Regime = Literal["static", "switch", "continuous"]


MAX_PARAM = 1e6  # any schedule parameter's magnitude (factors, betas, mscales): far past every published config


@dataclass(frozen=True)
class Param:
    """One scaling parameter: its type, whether it is required, its default and its lower bound."""

    name: str
    kind: ParamKind
    help: str
    required: bool = False
    default: Any = None
    minimum: float | None = None
    strict_minimum: bool = False  # True: value must be > minimum, False: >= minimum
    maximum: float = MAX_PARAM  # no schedule of any model comes near it; 1e308 would overflow the formulas
    omitted: bool = False  # absent stays absent (not None) in the resolved set: specs written before it hash alike

    def allowed(self) -> str:
        """Describe the allowed values in words, for error messages and ``ropeexport list``."""
        kind = {"float": "a number", "int": "an integer", "bool": "true or false", "floats": "a list of numbers"}
        text = kind[self.kind]
        if self.minimum is not None:
            text += f" {'>' if self.strict_minimum else '>='} {self.minimum:g}"
        return text + f" and at most {self.maximum:g}" if self.kind in ("float", "int", "floats") else text

    def coerce(self, value: Any, where: str) -> Any:
        """Turn a JSON/TOML value or a CLI string into this parameter's type, or raise SpecError naming ``where``."""
        try:
            if self.kind == "bool":
                if isinstance(value, bool):
                    return value
                if isinstance(value, str) and value.lower() in ("true", "1", "yes", "false", "0", "no"):
                    return value.lower() in ("true", "1", "yes")
                raise ValueError
            if self.kind == "floats":
                items = value.split(",") if isinstance(value, str) else list(value)
                out = [self._number(v, float) for v in items]
                if not out:
                    raise ValueError
                return out
            return self._number(value, int if self.kind == "int" else float)
        except (TypeError, ValueError, OverflowError):
            shown = repr(value) if len(repr(value)) <= 60 else f"{repr(value)[:24]}... ({len(str(value))} characters)"
            raise SpecError(where, f"must be {self.allowed()}, got {shown}") from None

    def _number(self, value: Any, kind: type) -> float | int:
        if isinstance(value, bool):
            raise ValueError
        number = kind(value) if not isinstance(value, str) else kind(value.strip())
        if kind is int and isinstance(value, float) and not value.is_integer():
            raise ValueError
        if not math.isfinite(number):
            raise ValueError
        if self.minimum is not None and (number <= self.minimum if self.strict_minimum else number < self.minimum):
            raise ValueError
        if abs(number) > self.maximum:
            raise ValueError
        return number


@dataclass(frozen=True)
class Frequencies:
    """Inverse frequencies (float64, [dim // 2]) and the factor transformers multiplies into cos and sin."""

    inv_freq: np.ndarray
    attention_factor: float


ComputeFn = Callable[[int, float, Mapping[str, Any], int], Frequencies]
CheckFn = Callable[[int, int, Mapping[str, Any]], None]


@dataclass(frozen=True)
class Schedule:
    """A named frequency schedule with its parameters and the function that computes its frequencies."""

    name: str
    summary: str
    regime: Regime
    params: tuple[Param, ...]
    compute: ComputeFn
    check: CheckFn | None = None
    min_rotary_dim: int = 2
    derived: Mapping[str, Callable[[int, Mapping[str, Any]], Any]] = field(default_factory=dict)

    def resolve(self, raw: Mapping[str, Any], rotary_dim: int, max_positions: int) -> dict[str, Any]:
        """Validate ``raw`` parameters, fill defaults, and return the full parameter set (sorted by name)."""
        known = {p.name: p for p in self.params}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            allowed = ", ".join(sorted(known)) or "none"
            raise SpecError(
                f"scaling_params.{unknown[0]}",
                f"unknown parameter for scaling '{self.name}'; allowed: {allowed}",
            )
        if rotary_dim < self.min_rotary_dim:
            raise SpecError("rotary_dim", f"must be at least {self.min_rotary_dim} for scaling '{self.name}'")
        out: dict[str, Any] = {}
        for p in self.params:
            if p.name in raw and raw[p.name] is not None:
                out[p.name] = p.coerce(raw[p.name], f"scaling_params.{p.name}")
            elif p.required:
                raise SpecError(f"scaling_params.{p.name}", f"required for scaling '{self.name}' ({p.help})")
            elif p.omitted:
                continue
            elif p.name in self.derived:
                out[p.name] = self.derived[p.name](max_positions, out)
            else:
                out[p.name] = p.default
        if self.check is not None:
            self.check(rotary_dim, max_positions, out)
        return dict(sorted(out.items()))

    def frequencies(self, rotary_dim: int, theta: float, params: Mapping[str, Any], seq_len: int) -> Frequencies:
        """Frequencies in effect for a row whose ``max(position_ids[b]) + 1`` is ``seq_len``."""
        return self.compute(rotary_dim, theta, params, seq_len)

    def threshold(self, params: Mapping[str, Any]) -> int | None:
        """The length past which a length-dependent schedule changes its frequencies (None when static)."""
        return None if self.regime == "static" else int(params["original_max_position_embeddings"])


def default_inv_freq(dim: int, theta: float) -> np.ndarray:
    """theta^(-2i/dim) for i < dim/2, float64 [dim // 2] (Su et al. 2021, eq. 15)."""
    return 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def _default(dim: int, theta: float, params: Mapping[str, Any], seq_len: int) -> Frequencies:
    return Frequencies(default_inv_freq(dim, theta), 1.0)


def _linear(dim: int, theta: float, params: Mapping[str, Any], seq_len: int) -> Frequencies:
    # Position interpolation: positions divided by the factor, i.e. every frequency divided by it.
    return Frequencies(default_inv_freq(dim, theta) / params["factor"], 1.0)


def _ntk(dim: int, theta: float, params: Mapping[str, Any], seq_len: int) -> Frequencies:
    # NTK-aware: keep the highest frequency, stretch the lowest by `factor`, by rescaling the base.
    base = theta * params["factor"] ** (dim / (dim - 2))
    return Frequencies(default_inv_freq(dim, base), 1.0)


def _dynamic(dim: int, theta: float, params: Mapping[str, Any], seq_len: int) -> Frequencies:
    original = params["original_max_position_embeddings"]
    length = max(seq_len, original)  # at or below the original length this is the default base
    factor = params["factor"]
    base = theta * ((factor * length / original) - (factor - 1)) ** (dim / (dim - 2))
    return Frequencies(default_inv_freq(dim, base), 1.0)


def proportional_pairs(dim: int, proportion: float) -> int:
    """The pairs proportional RoPE rotates: ``int(proportion * dim // 2)``, as transformers writes it (a float floor
    division, then int: 0.25 x 512 -> 64).
    """  # noqa: D205
    return int(proportion * dim // 2)


def _proportional(dim: int, theta: float, params: Mapping[str, Any], seq_len: int) -> Frequencies:
    # Gemma 4's global layers (transformers 5.23 ``_compute_proportional_rope_parameters``): the first
    # int(p * dim // 2) pairs at theta^(-2i/dim), the exponent over the whole rotated width (not over p * dim, as a
    # partial rotary factor would), the other pairs at frequency 0 (cos 1, sin 0: those channels pass unchanged), every
    # frequency / factor; rotate-half pairs (i, i + dim/2) over the whole width.
    inv = default_inv_freq(dim, theta)
    inv[proportional_pairs(dim, params["partial_rotary_factor"]) :] = 0.0
    return Frequencies(inv / params["factor"], 1.0)


def _check_proportional(rotary_dim: int, max_positions: int, params: Mapping[str, Any]) -> None:
    proportion = params["partial_rotary_factor"]
    if not 0 < proportion <= 1:
        raise SpecError("scaling_params.partial_rotary_factor", f"must be in (0, 1], got {proportion!r}")
    if proportional_pairs(rotary_dim, proportion) < 1:
        raise SpecError("scaling_params.partial_rotary_factor", f"{proportion!r} leaves no real frequency: "
                        f"int({proportion!r} x {rotary_dim} // 2) = 0 pairs rotate")  # fmt: skip


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(dim: int, theta: float, params: Mapping[str, Any], seq_len: int) -> Frequencies:
    factor = params["factor"]
    original = params["original_max_position_embeddings"]
    attention = params["attention_factor"]
    if attention is None:
        if params["mscale"] and params["mscale_all_dim"]:
            attention = _yarn_mscale(factor, params["mscale"]) / _yarn_mscale(factor, params["mscale_all_dim"])
        else:
            attention = _yarn_mscale(factor)

    def correction_dim(rotations: float) -> float:
        # The dimension whose wavelength makes `rotations` turns over the original context.
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(params["beta_fast"]), correction_dim(params["beta_slow"])
    if params["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp, as transformers does
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolation = 1.0 - ramp  # 1: keep the original frequency, 0: interpolate it by `factor`
    inv_freq = default_inv_freq(dim, theta)
    inv_freq = (inv_freq / factor) * (1.0 - extrapolation) + inv_freq * extrapolation
    if params.get("alpha") is not None:  # LeRoPE (Mistral Large 4): each frequency times exp(its learned alpha)
        inv_freq = inv_freq * np.exp(np.asarray(params["alpha"], np.float64))
    return Frequencies(inv_freq, float(attention))


def _check_yarn(dim: int, max_positions: int, params: Mapping[str, Any]) -> None:
    alpha = params.get("alpha")
    if alpha is not None and len(alpha) != dim // 2:
        raise SpecError("scaling_params.alpha", f"must have rotary_dim/2 = {dim // 2} entries, got {len(alpha)}")


def _llama3(dim: int, theta: float, params: Mapping[str, Any], seq_len: int) -> Frequencies:
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    original = params["original_max_position_embeddings"]
    inv_freq = default_inv_freq(dim, theta)
    wavelen = 2 * math.pi / inv_freq
    low_freq_wavelen, high_freq_wavelen = original / low, original / high
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return Frequencies(np.where(medium, smoothed, scaled), 1.0)


def _longrope(dim: int, theta: float, params: Mapping[str, Any], seq_len: int) -> Frequencies:
    original = params["original_max_position_embeddings"]
    long = seq_len > original
    ext = np.asarray(params["long_factor" if long else "short_factor"], dtype=np.float64)
    attention = params["attention_factor"]
    if attention is None:
        factor = params["factor"]
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    return Frequencies(default_inv_freq(dim, theta) / ext, float(attention))


def _check_llama3(dim: int, max_positions: int, params: Mapping[str, Any]) -> None:
    if params["high_freq_factor"] <= params["low_freq_factor"]:
        raise SpecError(
            "scaling_params.high_freq_factor",
            f"must be greater than low_freq_factor ({params['low_freq_factor']:g})",
        )


def _check_longrope(dim: int, max_positions: int, params: Mapping[str, Any]) -> None:
    for name in ("short_factor", "long_factor"):
        if len(params[name]) != dim // 2:
            raise SpecError(
                f"scaling_params.{name}",
                f"must have rotary_dim/2 = {dim // 2} entries, got {len(params[name])}",
            )
        if min(params[name]) <= 0:
            raise SpecError(f"scaling_params.{name}", "every entry must be > 0")


_FACTOR = Param("factor", "float", "scaling factor, at least 1", required=True, minimum=1.0, maximum=1e4)
_ORIGINAL = Param(
    "original_max_position_embeddings",
    "int",
    "the context length the model was trained at",
    required=True,
    minimum=1,
    maximum=2**24,
)

SCHEDULES: dict[str, Schedule] = {}


def register(schedule: Schedule) -> Schedule:
    """Add a schedule to the registry; a second schedule of the same name is a programming error."""
    if schedule.name in SCHEDULES:
        raise ValueError(f"schedule {schedule.name!r} is already registered")
    SCHEDULES[schedule.name] = schedule
    return schedule


register(Schedule("default", "theta^(-2i/d), no scaling", "static", (), _default))
register(Schedule("linear", "position interpolation: frequencies / factor", "static", (_FACTOR,), _linear))
register(Schedule("ntk", "fixed NTK-aware: base * factor^(d/(d-2))", "static", (_FACTOR,), _ntk, min_rotary_dim=4))
register(
    Schedule(
        "dynamic",
        "dynamic NTK: base recomputed from L = max(position_ids)+1 once L > original_max_position_embeddings",
        "continuous",
        (_FACTOR, _ORIGINAL),
        _dynamic,
        min_rotary_dim=4,
    )
)
register(
    Schedule(
        "yarn",
        "YaRN: per-frequency ramp between interpolation and extrapolation, attention factor on cos/sin",
        "static",
        (
            _FACTOR,
            _ORIGINAL,
            Param(
                "beta_fast", "float", "rotations where extrapolation ends", default=32.0, minimum=0, strict_minimum=True
            ),
            Param(
                "beta_slow",
                "float",
                "rotations where interpolation begins",
                default=1.0,
                minimum=0,
                strict_minimum=True,
            ),
            Param("mscale", "float", "DeepSeek mscale numerator", default=None, minimum=0),
            Param("mscale_all_dim", "float", "DeepSeek mscale denominator", default=None, minimum=0),
            Param(
                "attention_factor", "float", "overrides the derived attention factor", minimum=0, strict_minimum=True
            ),
            Param("truncate", "bool", "round the correction range to whole dimensions", default=True),
            Param("alpha", "floats", "rotary_dim/2 learned log factors: inv_freq * exp(alpha) (Mistral Large 4's "
                  "LeRoPE, its checkpoint's lerope.alpha)", maximum=80.0, omitted=True),
        ),
        _yarn,
        check=_check_yarn,
    )
)
register(
    Schedule(
        "llama3",
        "Llama 3.1: low frequencies / factor, high kept, a smooth blend between",
        "static",
        (
            _FACTOR,
            Param(
                "low_freq_factor",
                "float",
                "wavelength bound of the scaled band",
                required=True,
                minimum=0,
                strict_minimum=True,
            ),
            Param(
                "high_freq_factor",
                "float",
                "wavelength bound of the kept band",
                required=True,
                minimum=0,
                strict_minimum=True,
            ),
            _ORIGINAL,
        ),
        _llama3,
        check=_check_llama3,
    )
)
register(
    Schedule(
        "longrope",
        "LongRoPE: per-frequency short/long factors, switched on L > original_max_position_embeddings",
        "switch",
        (
            Param("short_factor", "floats", "rotary_dim/2 factors used up to the original length", required=True),
            Param("long_factor", "floats", "rotary_dim/2 factors used past the original length", required=True),
            _ORIGINAL,
            Param("factor", "float", "context extension; default max_positions / original", minimum=1.0),
            Param(
                "attention_factor",
                "float",
                "overrides sqrt(1 + ln(factor)/ln(original))",
                minimum=0,
                strict_minimum=True,
            ),
        ),
        _longrope,
        check=_check_longrope,
        derived={
            "factor": lambda max_positions, p: max(1.0, max_positions / float(p["original_max_position_embeddings"]))
        },
    )
)


register(
    Schedule(
        "proportional",
        "Gemma 4: the first int(p*d/2) pairs at theta^(-2i/d), the rest frequency 0, all / factor",
        "static",
        (
            Param("partial_rotary_factor", "float", "the share of pairs with a real frequency (Gemma 4: 0.25)",
                  default=1.0, minimum=0, strict_minimum=True),
            Param("factor", "float", "frequencies / factor", default=1.0, minimum=0, strict_minimum=True,
                  maximum=1e4),
        ),
        _proportional,
        check=_check_proportional,
    )
)


def get_schedule(name: str) -> Schedule:
    """Look a schedule up by exact name; an unknown name raises SpecError listing the valid ones."""
    try:
        return SCHEDULES[name]
    except KeyError:
        raise SpecError("scaling", f"unknown schedule {name!r}; allowed: {', '.join(SCHEDULES)}") from None
