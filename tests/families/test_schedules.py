"""Every schedule in ropeexport.families.rope.schedules.SCHEDULES against its closed form, written here from the papers
and Hugging Face transformers' ``modeling_rope_utils`` semantics, plus the registry's rejections.

The expected values never call the package's helpers: each ``expect_*`` function below restates the formula with
Python's math module, one frequency at a time, so a shared mistake would have to be made twice.

Notation: d rotary_dim, i < d/2 the pair index, theta the base, L = max(position_ids) + 1 of a call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest

from ropeexport.errors import SpecError
from ropeexport.families.rope.schedules import SCHEDULES, Frequencies, get_schedule
from ropeexport.families.rope.spec import RopeSpec

pytestmark = pytest.mark.fast  # registry: every frequency schedule against its closed form

# ---------------------------------------------------------------------------------------------------------------------
# Closed forms, one frequency at a time.


def theta_i(i: int, d: int, base: float) -> float:
    """RoFormer eq. 15: theta_i = base^(-2i/d)."""
    return base ** (-2.0 * i / d)


def expect_default(d: int, theta: float, p: Mapping[str, Any], seq_len: int) -> tuple[list[float], float]:
    return [theta_i(i, d, theta) for i in range(d // 2)], 1.0


def expect_linear(d: int, theta: float, p: Mapping[str, Any], seq_len: int) -> tuple[list[float], float]:
    # Chen et al. 2023: position m becomes m / factor, i.e. every frequency is divided by the factor.
    return [theta_i(i, d, theta) / p["factor"] for i in range(d // 2)], 1.0


def expect_ntk(d: int, theta: float, p: Mapping[str, Any], seq_len: int) -> tuple[list[float], float]:
    # NTK-aware: base' = base * factor^(d / (d - 2)).
    base = theta * p["factor"] ** (d / (d - 2))
    return [theta_i(i, d, base) for i in range(d // 2)], 1.0


def expect_dynamic(d: int, theta: float, p: Mapping[str, Any], seq_len: int) -> tuple[list[float], float]:
    original, factor = p["original_max_position_embeddings"], p["factor"]
    if seq_len <= original:
        return expect_default(d, theta, p, seq_len)
    base = theta * ((factor * seq_len / original) - (factor - 1)) ** (d / (d - 2))
    return [theta_i(i, d, base) for i in range(d // 2)], 1.0


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def expect_yarn(d: int, theta: float, p: Mapping[str, Any], seq_len: int) -> tuple[list[float], float]:
    """Peng et al. 2023, as transformers computes it (``_compute_yarn_parameters``)."""
    factor, original = p["factor"], p["original_max_position_embeddings"]

    # The (fractional) pair index whose frequency turns `rotations` times over the original context:
    # original * theta^(-2i/d) / (2 pi) = rotations  <=>  i = d ln(original / (2 pi rotations)) / (2 ln theta).
    def pair_with_rotations(rotations: float) -> float:
        return d * math.log(original / (2 * math.pi * rotations)) / (2 * math.log(theta))

    low, high = pair_with_rotations(p["beta_fast"]), pair_with_rotations(p["beta_slow"])
    if p["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    out = []
    for i in range(d // 2):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)  # 0 below low (keep), 1 above high (interpolate)
        keep = 1.0 - ramp
        base_freq = theta_i(i, d, theta)
        out.append(base_freq / factor * (1 - keep) + base_freq * keep)
    if p["attention_factor"] is not None:
        attention = p["attention_factor"]
    elif p["mscale"] and p["mscale_all_dim"]:
        attention = yarn_get_mscale(factor, p["mscale"]) / yarn_get_mscale(factor, p["mscale_all_dim"])
    else:
        attention = 0.1 * math.log(factor) + 1.0
    return out, attention


def expect_llama3(d: int, theta: float, p: Mapping[str, Any], seq_len: int) -> tuple[list[float], float]:
    """Meta's ``apply_scaling`` (Llama 3.1 reference code)."""
    factor, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
    original = p["original_max_position_embeddings"]
    out = []
    for i in range(d // 2):
        freq = theta_i(i, d, theta)
        wavelen = 2 * math.pi / freq
        if wavelen < original / high:
            out.append(freq)
        elif wavelen > original / low:
            out.append(freq / factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append((1 - smooth) * freq / factor + smooth * freq)
    return out, 1.0


def expect_longrope(d: int, theta: float, p: Mapping[str, Any], seq_len: int) -> tuple[list[float], float]:
    """Ding et al. 2024 / Phi-3: per-pair rescale factors, long ones once L exceeds the original length."""
    original = p["original_max_position_embeddings"]
    ext = p["long_factor"] if seq_len > original else p["short_factor"]
    out = [theta_i(i, d, theta) / ext[i] for i in range(d // 2)]
    if p["attention_factor"] is not None:
        return out, p["attention_factor"]
    factor = p["factor"]
    return out, (1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original)))


def expect_proportional(d: int, theta: float, p: Mapping[str, Any], seq_len: int) -> tuple[list[float], float]:
    """Gemma 4 (transformers' ``_compute_proportional_rope_parameters``): int(p * d // 2) real pairs over the whole
    width's exponent, then zeros, all / factor.
    """  # noqa: D205
    real = int(p["partial_rotary_factor"] * d // 2)
    return [(theta_i(i, d, theta) if i < real else 0.0) / p["factor"] for i in range(d // 2)], 1.0


EXPECT: dict[str, Callable[[int, float, Mapping[str, Any], int], tuple[list[float], float]]] = {
    "default": expect_default,
    "linear": expect_linear,
    "ntk": expect_ntk,
    "dynamic": expect_dynamic,
    "yarn": expect_yarn,
    "llama3": expect_llama3,
    "longrope": expect_longrope,
    "proportional": expect_proportional,
}

LLAMA31 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
YARN = {"factor": 4.0, "original_max_position_embeddings": 4096}
LONG16 = {  # 16 pairs: rotary_dim 32
    "original_max_position_embeddings": 2048,
    "short_factor": [1.0 + 0.05 * i for i in range(16)],
    "long_factor": [1.0 + 0.5 * i for i in range(16)],
}


def case(
    id: str,
    scaling: str,
    params: Mapping[str, Any] | None = None,
    *,
    dim: int = 64,
    theta: float = 10000.0,
    max_positions: int = 8192,
    seq_len: int = 1,
) -> Any:
    return pytest.param(
        {
            "scaling": scaling,
            "params": dict(params or {}),
            "dim": dim,
            "theta": theta,
            "max_positions": max_positions,
            "seq_len": seq_len,
        },
        id=id,
    )


CASES = [
    case("default", "default"),
    case("default-d8-theta500k", "default", dim=8, theta=500000.0),
    case("default-d2", "default", dim=2),
    case("linear-2", "linear", {"factor": 2.0}),
    case("linear-1", "linear", {"factor": 1.0}),
    case("linear-8-d128", "linear", {"factor": 8.0}, dim=128, theta=500000.0),
    case("ntk-4", "ntk", {"factor": 4.0}),
    case("ntk-2.5-d4", "ntk", {"factor": 2.5}, dim=4),
    case("dynamic-below", "dynamic", {"factor": 4.0, "original_max_position_embeddings": 2048}, seq_len=100),
    case("dynamic-at", "dynamic", {"factor": 4.0, "original_max_position_embeddings": 2048}, seq_len=2048),
    case("dynamic-just-past", "dynamic", {"factor": 4.0, "original_max_position_embeddings": 2048}, seq_len=2049),
    case("dynamic-4x", "dynamic", {"factor": 4.0, "original_max_position_embeddings": 2048}, seq_len=8192),
    case("dynamic-2x-f2", "dynamic", {"factor": 2.0, "original_max_position_embeddings": 1024}, dim=32, seq_len=2048),
    case("yarn", "yarn", YARN),
    case("yarn-no-truncate", "yarn", {**YARN, "truncate": False}),
    case("yarn-betas", "yarn", {**YARN, "beta_fast": 16.0, "beta_slow": 2.0}, dim=128, theta=500000.0),
    case("yarn-mscale", "yarn", {**YARN, "mscale": 0.707, "mscale_all_dim": 1.0}),
    case("yarn-mscale-equal", "yarn", {**YARN, "mscale": 0.707, "mscale_all_dim": 0.707}),
    case("yarn-mscale-only", "yarn", {**YARN, "mscale": 0.707}),
    case("yarn-attention-override", "yarn", {**YARN, "attention_factor": 0.5, "mscale": 1.0, "mscale_all_dim": 0.5}),
    case("yarn-factor-1", "yarn", {**YARN, "factor": 1.0}),
    case("yarn-equal-betas", "yarn", {**YARN, "beta_fast": 2.0, "beta_slow": 2.0, "truncate": False}),
    case("yarn-tiny-original", "yarn", {**YARN, "original_max_position_embeddings": 2}),
    case("yarn-tiny-dim", "yarn", {**YARN, "beta_fast": 32.0, "beta_slow": 1.0}, dim=4),
    case("llama3.1", "llama3", LLAMA31, dim=128, theta=500000.0),
    case("llama3-other", "llama3", {**LLAMA31, "factor": 32.0, "original_max_position_embeddings": 4096}, dim=64),
    case("longrope-short", "longrope", LONG16, dim=32, seq_len=2048),
    case("longrope-long", "longrope", LONG16, dim=32, seq_len=2049),
    case("longrope-long-far", "longrope", LONG16, dim=32, seq_len=8192),
    case("longrope-factor", "longrope", {**LONG16, "factor": 16.0}, dim=32, seq_len=4000),
    case("longrope-attention", "longrope", {**LONG16, "attention_factor": 1.25}, dim=32, seq_len=4000),
    case("longrope-no-extension", "longrope", LONG16, dim=32, max_positions=1024, seq_len=1024),
    # Gemma 4's global layers: 64 real pairs of 256 at theta 1e6, 192 at frequency 0
    case("proportional-gemma4", "proportional", {"partial_rotary_factor": 0.25}, dim=512, theta=1e6),
    case("proportional-factor", "proportional", {"partial_rotary_factor": 0.5, "factor": 8.0}, dim=64),
    case("proportional-all", "proportional", {"partial_rotary_factor": 1.0}, dim=64),
    case("proportional-odd-share", "proportional", {"partial_rotary_factor": 0.3}, dim=100),
]


@pytest.mark.parametrize(("share", "factor", "head_dim"), [(0.25, 1.0, 512), (0.25, 1.0, 256), (0.5, 4.0, 128),
                                                           (0.3, 1.0, 100)])  # fmt: skip
def test_proportional_is_transformers_own(share: float, factor: float, head_dim: int) -> None:
    # transformers 5.23's own function on a Gemma 4 text config's global layers (per_layer_config's head_dim)
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {"rope_type": "proportional", "partial_rotary_factor": share, "rope_theta": 1e6, "factor": factor}
    config = transformers.AutoConfig.for_model("gemma4_text", num_hidden_layers=2, global_head_dim=head_dim,
                                               layer_types=["sliding_attention", "full_attention"],
                                               rope_parameters={"sliding_attention": {"rope_type": "default",
                                                                                      "rope_theta": 1e4},
                                                                "full_attention": params})  # fmt: skip
    theirs, attention = ROPE_INIT_FUNCTIONS["proportional"](config.per_layer_config["full_attention"], None,
                                                            layer_type="full_attention")  # fmt: skip
    ours = get_schedule("proportional").frequencies(head_dim, 1e6, {"partial_rotary_factor": share,
                                                                     "factor": factor}, 1)  # fmt: skip
    theirs64 = theirs.double().numpy()
    assert attention == ours.attention_factor == 1.0
    assert np.array_equal(theirs64 == 0, ours.inv_freq == 0)  # the same zero-frequency tail
    np.testing.assert_allclose(ours.inv_freq, theirs64, rtol=2e-7, atol=0)  # theirs in float32


def test_every_schedule_has_a_case() -> None:
    # A schedule registered in schedules.py and not here (or in the shared case table every export, plugin and block
    # test draws from) fails: adding a schedule is its function, its row here and its parameters in tests/cases.py.
    from tests.cases import SCHEDULE_PARAMS

    covered = {c.values[0]["scaling"] for c in CASES}
    assert covered == set(SCHEDULES) == set(EXPECT) == set(SCHEDULE_PARAMS)


@pytest.mark.parametrize("c", CASES)
def test_schedule_matches_closed_form(c: dict[str, Any]) -> None:
    spec = RopeSpec(
        head_dim=c["dim"],
        num_heads=1,
        theta=c["theta"],
        max_positions=c["max_positions"],
        scaling=c["scaling"],
        scaling_params=c["params"],
    )
    schedule = get_schedule(c["scaling"])
    got = schedule.frequencies(c["dim"], c["theta"], spec.scaling_params, c["seq_len"])
    assert isinstance(got, Frequencies)
    assert got.inv_freq.dtype == np.float64 and got.inv_freq.shape == (c["dim"] // 2,)
    inv_freq, attention = EXPECT[c["scaling"]](c["dim"], c["theta"], spec.scaling_params, c["seq_len"])
    np.testing.assert_allclose(got.inv_freq, inv_freq, rtol=1e-13, atol=0)
    assert got.attention_factor == pytest.approx(attention, rel=1e-14)


# ---------------------------------------------------------------------------------------------------------------------
# Properties that pin each schedule's meaning, independent of how the closed form is written.


def _freqs(
    scaling: str, params: Mapping[str, Any], dim: int, theta: float, seq_len: int = 1, max_positions: int = 8192
) -> tuple[np.ndarray, float, dict[str, Any]]:
    spec = RopeSpec(
        head_dim=dim, num_heads=1, theta=theta, max_positions=max_positions, scaling=scaling, scaling_params=params
    )
    f = get_schedule(scaling).frequencies(dim, theta, spec.scaling_params, seq_len)
    return f.inv_freq, f.attention_factor, dict(spec.scaling_params)


def test_default_endpoints() -> None:
    inv, attention, _ = _freqs("default", {}, 64, 10000.0)
    assert inv[0] == 1.0 and attention == 1.0
    # The last pair: theta^(-(d-2)/d).
    assert inv[-1] == pytest.approx(10000.0 ** (-62 / 64), rel=1e-15)
    assert np.all(np.diff(inv) < 0)


@pytest.mark.parametrize("factor", [2.0, 4.0, 16.0])
def test_ntk_keeps_highest_and_stretches_lowest(factor: float) -> None:
    d, theta = 64, 10000.0
    inv, _, _ = _freqs("ntk", {"factor": factor}, d, theta)
    default, _, _ = _freqs("default", {}, d, theta)
    assert inv[0] == default[0] == 1.0
    # The lowest frequency is divided by exactly the factor: (theta * f^(d/(d-2)))^(-(d-2)/d) = theta^(..) / f.
    assert inv[-1] == pytest.approx(default[-1] / factor, rel=1e-13)


@pytest.mark.parametrize("seq_len", [1, 1000, 2047, 2048])
def test_dynamic_is_default_up_to_original(seq_len: int) -> None:
    params = {"factor": 4.0, "original_max_position_embeddings": 2048}
    inv, _, _ = _freqs("dynamic", params, 64, 10000.0, seq_len)
    default, _, _ = _freqs("default", {}, 64, 10000.0)
    assert np.array_equal(inv, default)
    past, _, _ = _freqs("dynamic", params, 64, 10000.0, 2049)
    assert np.all(past[1:] < default[1:])


def test_dynamic_at_factor_times_original_is_ntk() -> None:
    # The dynamic base is the fixed NTK base for s = f*L/o - (f - 1), so at L = o * (1 + (s - 1)/f) dynamic NTK
    # with factor f equals fixed NTK with factor s.
    f, o, s = 4.0, 2048, 2.0
    seq_len = o * (1 + (s - 1) / f)
    assert seq_len == int(seq_len)
    dyn, _, _ = _freqs("dynamic", {"factor": f, "original_max_position_embeddings": o}, 64, 10000.0, int(seq_len))
    ntk, _, _ = _freqs("ntk", {"factor": s}, 64, 10000.0)
    np.testing.assert_allclose(dyn, ntk, rtol=1e-13)


@pytest.mark.parametrize(
    "params",
    [
        pytest.param(YARN, id="defaults"),
        pytest.param({**YARN, "truncate": False}, id="no-truncate"),
        pytest.param({**YARN, "factor": 16.0, "beta_fast": 16.0, "beta_slow": 2.0}, id="betas"),
    ],
)
def test_yarn_bands_by_rotations(params: dict[str, Any]) -> None:
    """Pairs turning more than beta_fast times over the original context keep their frequency; fewer than
    beta_slow times are interpolated by the factor; between, the frequency lies between the two."""
    d, theta = 128, 10000.0
    inv, _, p = _freqs("yarn", params, d, theta)
    default, _, _ = _freqs("default", {}, d, theta)
    rotations = p["original_max_position_embeddings"] * default / (2 * math.pi)
    fast, slow = rotations > p["beta_fast"], rotations < p["beta_slow"]
    middle = ~fast & ~slow
    assert fast.any() and slow.any() and middle.any()
    assert np.array_equal(inv[fast], default[fast])
    np.testing.assert_allclose(inv[slow], default[slow] / p["factor"], rtol=1e-15)
    assert np.all(inv[middle] <= default[middle]) and np.all(inv[middle] >= default[middle] / p["factor"] * (1 - 1e-15))


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        pytest.param(YARN, 0.1 * math.log(4.0) + 1, id="default"),
        pytest.param({**YARN, "factor": 40.0}, 0.1 * math.log(40.0) + 1, id="factor-40"),
        pytest.param({**YARN, "mscale": 1.0, "mscale_all_dim": 1.0}, 1.0, id="mscale-equal"),
        pytest.param(
            {**YARN, "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.5},
            (0.1 * math.log(40.0) + 1) / (0.05 * math.log(40.0) + 1),
            id="deepseek-ratio",
        ),
        pytest.param({**YARN, "mscale": 2.0}, 0.1 * math.log(4.0) + 1, id="mscale-alone-ignored"),
        pytest.param({**YARN, "attention_factor": 0.75}, 0.75, id="override"),
        pytest.param({**YARN, "factor": 1.0}, 1.0, id="factor-1"),
    ],
)
def test_yarn_attention_factor(params: dict[str, Any], expected: float) -> None:
    _, attention, _ = _freqs("yarn", params, 64, 10000.0)
    assert attention == pytest.approx(expected, rel=1e-15)


def test_llama31_bands() -> None:
    """Llama 3.1 (factor 8, low 1, high 4, original 8192, theta 500000, dim 128): wavelengths under 2048 are kept,
    over 8192 are divided by 8, and in between the frequency is blended linearly in original / wavelength."""
    d, theta = 128, 500000.0
    inv, attention, _ = _freqs("llama3", LLAMA31, d, theta)
    default, _, _ = _freqs("default", {}, d, theta)
    wavelen = 2 * math.pi / default
    high_band, low_band = wavelen < 8192 / 4, wavelen > 8192 / 1
    medium = ~high_band & ~low_band
    # By hand: wavelen_i = 2 pi 500000^(i/64) < 2048  <=>  i < 64 ln(2048 / 2 pi) / ln(500000) = 28.2, and
    # > 8192  <=>  i > 64 ln(8192 / 2 pi) / ln(500000) = 34.99: pairs 0-28 kept, 29-34 blended, 35-63 scaled.
    assert np.array_equal(np.flatnonzero(high_band), np.arange(0, 29))
    assert np.array_equal(np.flatnonzero(medium), np.arange(29, 35))
    assert np.array_equal(np.flatnonzero(low_band), np.arange(35, 64))
    assert np.array_equal(inv[high_band], default[high_band])
    np.testing.assert_allclose(inv[low_band], default[low_band] / 8, rtol=1e-15)
    smooth = (8192 / wavelen[medium] - 1) / (4 - 1)
    assert np.all((smooth >= 0) & (smooth <= 1))
    np.testing.assert_allclose(inv[medium], default[medium] * ((1 - smooth) / 8 + smooth), rtol=1e-14)
    assert attention == 1.0
    # The schedule is still monotone: no pair overtakes its neighbour.
    assert np.all(np.diff(inv) < 0)


@pytest.mark.parametrize(
    ("seq_len", "which"),
    [(1, "short_factor"), (2048, "short_factor"), (2049, "long_factor"), (8192, "long_factor")],
)
def test_longrope_switches_on_original(seq_len: int, which: str) -> None:
    inv, _, p = _freqs("longrope", LONG16, 32, 10000.0, seq_len)
    default, _, _ = _freqs("default", {}, 32, 10000.0)
    np.testing.assert_allclose(inv * np.asarray(LONG16[which]), default, rtol=1e-15)


@pytest.mark.parametrize(
    ("max_positions", "extra", "factor", "attention"),
    [
        (8192, {}, 4.0, math.sqrt(1 + math.log(4.0) / math.log(2048))),
        (131072, {}, 64.0, math.sqrt(1 + math.log(64.0) / math.log(2048))),
        (3000, {}, 3000 / 2048, math.sqrt(1 + math.log(3000 / 2048) / math.log(2048))),
        (2048, {}, 1.0, 1.0),
        (1024, {}, 1.0, 1.0),
        (8192, {"factor": 32.0}, 32.0, math.sqrt(1 + math.log(32.0) / math.log(2048))),
        (8192, {"attention_factor": 1.5}, 4.0, 1.5),
    ],
)
def test_longrope_factor_and_attention(
    max_positions: int, extra: dict[str, Any], factor: float, attention: float
) -> None:
    _, got_attention, p = _freqs("longrope", {**LONG16, **extra}, 32, 10000.0, 4096, max_positions)
    assert p["factor"] == pytest.approx(factor, rel=1e-15)
    assert got_attention == pytest.approx(attention, rel=1e-15)


@pytest.mark.parametrize(
    ("scaling", "params", "threshold"),
    [
        ("default", {}, None),
        ("linear", {"factor": 2.0}, None),
        ("ntk", {"factor": 2.0}, None),
        ("yarn", YARN, None),
        ("llama3", LLAMA31, None),
        ("dynamic", {"factor": 2.0, "original_max_position_embeddings": 1000}, 1000),
        ("longrope", LONG16, 2048),
    ],
)
def test_threshold_only_for_length_dependent(scaling: str, params: dict[str, Any], threshold: int | None) -> None:
    _, _, p = _freqs(scaling, params, 32, 10000.0)
    schedule = get_schedule(scaling)
    assert schedule.threshold(p) == threshold
    assert (schedule.regime == "static") == (threshold is None)
    if threshold is None:
        # Static: the call length changes nothing.
        a = schedule.frequencies(32, 10000.0, p, 1).inv_freq
        b = schedule.frequencies(32, 10000.0, p, 10**6).inv_freq
        assert np.array_equal(a, b)


# ---------------------------------------------------------------------------------------------------------------------
# Registry and validation.


def test_unknown_schedule_lists_every_name() -> None:
    with pytest.raises(SpecError) as err:
        get_schedule("nope")
    assert "'nope'" in str(err.value)
    for name in SCHEDULES:
        assert name in str(err.value)
    assert err.value.field == "scaling"
    with pytest.raises(SpecError, match="scaling"):
        RopeSpec(scaling="Linear")  # exact names only


@pytest.mark.parametrize(
    ("scaling", "params", "field"),
    [
        pytest.param("default", {"factor": 2.0}, "scaling_params.factor", id="default-takes-nothing"),
        pytest.param("linear", {"factor": 2.0, "fator": 2.0}, "scaling_params.fator", id="misspelt"),
        pytest.param("yarn", {**YARN, "beta": 3.0}, "scaling_params.beta", id="yarn-unknown"),
        pytest.param("linear", {}, "scaling_params.factor", id="linear-missing-factor"),
        pytest.param(
            "dynamic", {"factor": 2.0}, "scaling_params.original_max_position_embeddings", id="dynamic-missing-original"
        ),
        pytest.param(
            "llama3",
            {k: v for k, v in LLAMA31.items() if k != "low_freq_factor"},
            "scaling_params.low_freq_factor",
            id="llama3-missing-low",
        ),
        pytest.param(
            "longrope",
            {k: v for k, v in LONG16.items() if k != "long_factor"},
            "scaling_params.long_factor",
            id="longrope-missing-long",
        ),
        pytest.param("linear", {"factor": 0.5}, "scaling_params.factor", id="linear-factor-below-1"),
        pytest.param("ntk", {"factor": 0.99}, "scaling_params.factor", id="ntk-factor-below-1"),
        pytest.param("yarn", {**YARN, "factor": 0.25}, "scaling_params.factor", id="yarn-factor-below-1"),
        pytest.param("llama3", {**LLAMA31, "factor": 0.5}, "scaling_params.factor", id="llama3-factor-below-1"),
        pytest.param("longrope", {**LONG16, "factor": 0.5}, "scaling_params.factor", id="longrope-factor-below-1"),
        pytest.param("linear", {"factor": "two"}, "scaling_params.factor", id="factor-not-a-number"),
        pytest.param("linear", {"factor": float("nan")}, "scaling_params.factor", id="factor-nan"),
        pytest.param(
            "llama3",
            {**LLAMA31, "high_freq_factor": 1.0},
            "scaling_params.high_freq_factor",
            id="llama3-high-equal-low",
        ),
        pytest.param(
            "llama3",
            {**LLAMA31, "high_freq_factor": 0.5},
            "scaling_params.high_freq_factor",
            id="llama3-high-below-low",
        ),
        pytest.param(
            "longrope",
            {**LONG16, "short_factor": LONG16["short_factor"][:-1]},
            "scaling_params.short_factor",
            id="longrope-short-too-short",
        ),
        pytest.param(
            "longrope",
            {**LONG16, "long_factor": [*LONG16["long_factor"], 2.0]},
            "scaling_params.long_factor",
            id="longrope-long-too-long",
        ),
        pytest.param(
            "longrope", {**LONG16, "long_factor": [0.0] * 16}, "scaling_params.long_factor", id="longrope-zero-entry"
        ),
        pytest.param("yarn", {**YARN, "beta_fast": 0.0}, "scaling_params.beta_fast", id="yarn-beta-zero"),
        # 0.03 x 32 // 2 = 0 pairs: proportional RoPE that rotates nothing (issue 39's bad input)
        pytest.param("proportional", {"partial_rotary_factor": 0.03}, "scaling_params.partial_rotary_factor",
                     id="proportional-no-real-frequency"),
        pytest.param("proportional", {"partial_rotary_factor": 1.5}, "scaling_params.partial_rotary_factor",
                     id="proportional-share-past-1"),
        pytest.param(
            "yarn",
            {**YARN, "original_max_position_embeddings": 1.5},
            "scaling_params.original_max_position_embeddings",
            id="original-not-int",
        ),
    ],
)
def test_invalid_params_name_the_field(scaling: str, params: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        RopeSpec(head_dim=32, num_heads=1, scaling=scaling, scaling_params=params)
    assert field in str(err.value)
    assert err.value.field == field


@pytest.mark.parametrize("scaling", ["ntk", "dynamic"])
def test_ntk_family_needs_rotary_dim_4(scaling: str) -> None:
    # base * factor^(d/(d-2)) divides by zero at d = 2.
    params = {"factor": 2.0, "original_max_position_embeddings": 100} if scaling == "dynamic" else {"factor": 2.0}
    with pytest.raises(SpecError) as err:
        RopeSpec(head_dim=8, rotary_dim=2, num_heads=1, scaling=scaling, scaling_params=params)
    assert "rotary_dim" in str(err.value)
    RopeSpec(head_dim=8, rotary_dim=4, num_heads=1, scaling=scaling, scaling_params=params)  # accepted


def test_resolved_params_fill_defaults() -> None:
    p = RopeSpec(head_dim=32, num_heads=1, scaling="yarn", scaling_params=YARN).scaling_params
    # transformers' defaults for YaRN.
    assert p["beta_fast"] == 32.0 and p["beta_slow"] == 1.0 and p["truncate"] is True
    assert p["mscale"] is None and p["mscale_all_dim"] is None and p["attention_factor"] is None
    assert p["factor"] == 4.0 and p["original_max_position_embeddings"] == 4096
