"""The identities the seed articles derive for RoPE (Su et al. 2021, RoFormer eq. 13-16 and 34), each checked on the
eager reference modules in ropeexport.families.rope.reference.

The oracle is built here from the formulas, in float64: theta_i = theta^(-2i/r), the block-diagonal rotation matrix
R_m with 2x2 blocks [[cos m theta_i, -sin m theta_i], [sin m theta_i, cos m theta_i]] on each channel pair, and the
complex form q_c * e^{i m theta_i}. The modules compute in float32 (or fp16 / bf16), so comparisons with the float64
oracle carry float32 tolerances, and comparisons between two float32 computations that do the same operations are
bit-exact.

Notation: b batch, h heads, s sequence, d head_dim, r rotary_dim.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ropeexport.errors import RuntimeInputError
from ropeexport.families.rope.reference import ComplexRotaryEmbedding, RotaryEmbedding, reference_module
from ropeexport.families.rope.spec import RopeSpec

pytestmark = pytest.mark.fast  # RoPE's identities on the eager module, small tables

TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
NUMPY = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}

# ---------------------------------------------------------------------------------------------------------------------
# The float64 oracle, from the formulas.


def thetas(r: int, theta: float) -> np.ndarray:
    """theta_i = theta^(-2i/r), i < r/2 (RoFormer eq. 15), float64."""
    return np.array([theta ** (-2.0 * i / r) for i in range(r // 2)])


def channel_pairs(layout: str, r: int) -> list[tuple[int, int]]:
    """The channels rotated together: (2i, 2i+1) for interleaved / complex, (i, i + r/2) for half."""
    if layout == "half":
        return [(i, i + r // 2) for i in range(r // 2)]
    return [(2 * i, 2 * i + 1) for i in range(r // 2)]


def rotation_matrix(
    m: float, freqs: np.ndarray, d: int, pairs: Sequence[tuple[int, int]], scale: float = 1.0
) -> np.ndarray:
    """R_m [d, d] float64: 2x2 rotation blocks on each pair, identity on the channels past r."""
    R = np.eye(d)
    for (a, b), t in zip(pairs, freqs, strict=True):
        c, s = scale * np.cos(m * t), scale * np.sin(m * t)
        R[a, a], R[a, b] = c, -s
        R[b, a], R[b, b] = s, c
    return R


def rotate_by_matrix(
    x: np.ndarray, positions: np.ndarray, freqs: np.ndarray, pairs: Sequence[tuple[int, int]], scale: float = 1.0
) -> np.ndarray:
    """R_{position} @ x for each (batch, seq); x [b, h, s, d] float64, positions [b, s]."""
    out = np.empty_like(x)
    d = x.shape[-1]
    for bi in range(x.shape[0]):
        for si in range(x.shape[2]):
            R = rotation_matrix(float(positions[bi, si]), freqs, d, pairs, scale)
            out[bi, :, si] = x[bi, :, si] @ R.T
    return out


def rotate_elementwise(x: np.ndarray, positions: np.ndarray, freqs: np.ndarray, r: int) -> np.ndarray:
    """The seeds' eq. (4), interleaved pairing: x * [cos, cos, ...] + [-x1, x0, -x3, x2, ...] * [sin, sin, ...]."""
    angles = positions[:, None, :, None] * freqs  # [b, 1, s, r/2]
    cos, sin = np.repeat(np.cos(angles), 2, axis=-1), np.repeat(np.sin(angles), 2, axis=-1)
    rot = x[..., :r]
    swapped = np.stack((-rot[..., 1::2], rot[..., 0::2]), axis=-1).reshape(rot.shape)
    return np.concatenate((rot * cos + swapped * sin, x[..., r:]), axis=-1)


def rotate_complex(x: np.ndarray, positions: np.ndarray, freqs: np.ndarray, r: int) -> np.ndarray:
    """q_c * e^{i m theta_i} with q_c = x[2i] + i x[2i+1] (seed 004), float64 / complex128."""
    q = x[..., 0:r:2] + 1j * x[..., 1:r:2]
    rotated = q * np.exp(1j * positions[:, None, :, None] * freqs)
    out = np.stack((rotated.real, rotated.imag), axis=-1).reshape(*x.shape[:-1], r)
    return np.concatenate((out, x[..., r:]), axis=-1)


# ---------------------------------------------------------------------------------------------------------------------
# Helpers around the modules.


def make_spec(**fields: Any) -> RopeSpec:
    base: dict[str, Any] = {"head_dim": 16, "num_heads": 2, "max_positions": 4096}
    return RopeSpec(**(base | fields))


def inputs(
    spec: RopeSpec,
    batch: int,
    seq: int,
    seed: int,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """query, key uniform in [-1, 1] (so float32 rounding stays below 1e-6 absolute)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.rand(batch, spec.num_heads, seq, spec.head_dim, generator=g, dtype=torch.float64) * 2 - 1
    k = torch.rand(batch, spec.num_kv_heads, seq, spec.head_dim, generator=g, dtype=torch.float64) * 2 - 1
    return q.to(dtype), k.to(dtype)


def random_positions(batch: int, seq: int, max_positions: int, seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, max_positions, (batch, seq))
    ids[0, 0] = max_positions - 1  # always exercise the largest angle
    return torch.from_numpy(ids.astype(np.int64))


def f64(t: torch.Tensor) -> np.ndarray:
    return t.to(torch.float64).numpy()


def assert_same_rotation(got: torch.Tensor, want: torch.Tensor, layout: str) -> None:
    """Bit-exact for the real layouts (the same float ops on the same values). The complex layout multiplies in
    complex64, and torch's CPU complex product differs by an ulp between its vectorized and scalar paths, which
    depend on the input's memory layout, so there it is compared to within float32 rounding of unit values."""
    if layout == "complex":
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    else:
        assert torch.equal(got, want)


# ---------------------------------------------------------------------------------------------------------------------
# 1. Matrix form == elementwise module == complex form.

MATRIX_CASES = [
    pytest.param({"layout": "interleaved", "head_dim": 8}, id="interleaved-d8"),
    pytest.param({"layout": "interleaved", "head_dim": 64, "theta": 500000.0}, id="interleaved-d64-theta500k"),
    pytest.param({"layout": "interleaved", "head_dim": 32, "rotary_dim": 16}, id="interleaved-d32-r16"),
    pytest.param({"layout": "half", "head_dim": 8}, id="half-d8"),
    pytest.param({"layout": "half", "head_dim": 64, "num_heads": 4, "num_kv_heads": 2}, id="half-d64-gqa"),
    pytest.param({"layout": "half", "head_dim": 48, "rotary_dim": 24, "theta": 1e6}, id="half-d48-r24"),
    pytest.param({"layout": "complex", "head_dim": 16}, id="complex-d16"),
    pytest.param({"layout": "complex", "head_dim": 40, "rotary_dim": 8}, id="complex-d40-r8"),
]


@pytest.mark.parametrize("fields", MATRIX_CASES)
def test_module_equals_block_diagonal_rotation(fields: dict[str, Any]) -> None:
    spec = make_spec(**fields)
    module = reference_module(spec)
    assert isinstance(module, ComplexRotaryEmbedding) == (spec.layout == "complex")
    q, k = inputs(spec, batch=2, seq=5, seed=1)
    pos = random_positions(2, 5, spec.max_positions, seed=2)
    q_out, k_out = module(q, k, position_ids=pos)
    assert q_out.dtype == torch.float32 and q_out.shape == q.shape and k_out.shape == k.shape
    freqs, pairs = thetas(spec.rotary_dim, spec.theta), channel_pairs(spec.layout, spec.rotary_dim)
    for x, out in ((q, q_out), (k, k_out)):
        expected = rotate_by_matrix(f64(x), pos.numpy(), freqs, pairs)
        # cos/sin rounded to float32 (2^-24 relative) and two products and a sum in float32, on |x| <= 1.
        np.testing.assert_allclose(f64(out), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize(("d", "r", "theta"), [(8, 8, 10000.0), (64, 64, 500000.0), (40, 24, 10000.0)])
def test_matrix_elementwise_complex_forms_agree_float64(d: int, r: int, theta: float) -> None:
    """The three forms of the seeds are one rotation: exact up to float64 rounding, for interleaved pairing."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4, d))
    pos = rng.integers(0, 100000, (2, 4)).astype(np.float64)
    freqs = thetas(r, theta)
    by_matrix = rotate_by_matrix(x, pos, freqs, channel_pairs("interleaved", r))
    np.testing.assert_allclose(rotate_elementwise(x, pos, freqs, r), by_matrix, rtol=0, atol=1e-13)
    np.testing.assert_allclose(rotate_complex(x, pos, freqs, r), by_matrix, rtol=0, atol=1e-13)
    # R_m is orthogonal and R_m^T R_n = R_{n-m}: the algebra behind the relative-position identity.
    Rm = rotation_matrix(17.0, freqs, d, channel_pairs("interleaved", r))
    Rn = rotation_matrix(5.0, freqs, d, channel_pairs("interleaved", r))
    np.testing.assert_allclose(Rm.T @ Rm, np.eye(d), atol=1e-15)
    np.testing.assert_allclose(Rm.T @ Rn, rotation_matrix(-12.0, freqs, d, channel_pairs("interleaved", r)), atol=1e-14)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("theta", [10000.0, 500000.0])
def test_tables_are_cos_sin_rounded_once(dtype: str, theta: float) -> None:
    """cos/sin tables equal cos(m theta_i) and sin(m theta_i), correctly rounded from float64 to the table dtype."""
    spec = make_spec(head_dim=32, theta=theta, dtype=dtype, max_positions=65536)
    pos = torch.arange(0, 65536, 61, dtype=torch.int64)[None, :]
    cos, sin = RotaryEmbedding(spec).cos_sin(pos)
    assert cos.dtype == TORCH[dtype] and cos.shape == (1, pos.shape[1], 16)
    angles = pos.numpy()[..., None].astype(np.float64) * thetas(32, theta)
    for got, exact in ((cos, np.cos(angles)), (sin, np.sin(angles))):
        got64 = f64(got)
        # 1e-12: float64 noise in the angle (position ~ 6.5e4 times a theta_i that may differ by one float64 ulp).
        assert np.all(np.abs(got64 - exact) <= half_spacing(got64, dtype) + 1e-12)
        # Not merely close: rounding to the table dtype is visible (fp32 tables are not float64 values).
        assert not np.array_equal(got64, exact)


def half_spacing(values: np.ndarray, dtype: str) -> np.ndarray:
    """Half the table dtype's spacing above |values| (values representable in that dtype)."""
    b = np.abs(values).astype(NUMPY[dtype])
    return (np.nextafter(b, np.full_like(b, np.inf)).astype(np.float64) - np.abs(values)) / 2


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_module_is_elementwise_formula_bit_exact(layout: str) -> None:
    """Given the module's own float32 cos/sin, the output is x_a c - x_b s, x_b c + x_a s in float32, bit for bit."""
    spec = make_spec(layout=layout, head_dim=24, rotary_dim=16)
    module = RotaryEmbedding(spec)
    q, k = inputs(spec, batch=2, seq=7, seed=4)
    pos = random_positions(2, 7, spec.max_positions, seed=5)
    q_out, _ = module(q, k, position_ids=pos)
    cos, sin = (t.numpy()[:, None] for t in module.cos_sin(pos))  # [b, 1, s, r/2] float32
    x = q.numpy()
    a_idx, b_idx = (np.array(i) for i in zip(*channel_pairs(layout, 16), strict=True))
    xa, xb = x[..., a_idx], x[..., b_idx]
    expected = x.copy()
    expected[..., a_idx] = xa * cos - xb * sin
    expected[..., b_idx] = xb * cos + xa * sin
    assert expected.dtype == np.float32
    assert np.array_equal(q_out.numpy(), expected)


# ---------------------------------------------------------------------------------------------------------------------
# 2. half and interleaved are one rotation under a channel permutation.


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize(("d", "r"), [(8, 8), (64, 64), (32, 16), (20, 12)])
def test_half_is_interleaved_under_permutation(d: int, r: int, dtype: str) -> None:
    # Interleaved channel 2i (the pair's first) goes to half channel i, 2i+1 to i + r/2; the tail stays.
    to_half = [*range(0, r, 2), *range(1, r, 2), *range(r, d)]
    to_interleaved = list(np.argsort(to_half))
    inter = make_spec(layout="interleaved", head_dim=d, rotary_dim=r, dtype=dtype, num_heads=4, num_kv_heads=2)
    half = inter.replace(layout="half")
    q, k = inputs(inter, batch=2, seq=6, seed=6, dtype=TORCH[dtype])
    pos = random_positions(2, 6, inter.max_positions, seed=7)
    want_q, want_k = RotaryEmbedding(inter)(q, k, position_ids=pos)
    got_q, got_k = RotaryEmbedding(half)(q[..., to_half], k[..., to_half], position_ids=pos)
    assert torch.equal(got_q[..., to_interleaved], want_q)
    assert torch.equal(got_k[..., to_interleaved], want_k)
    # And without the permutation they really differ (the test would be vacuous otherwise).
    assert not torch.equal(RotaryEmbedding(half)(q, k, position_ids=pos)[0], want_q)


# ---------------------------------------------------------------------------------------------------------------------
# 3. <f(q, m), f(k, n)> = g(q, k, m - n).

MAX_P = 4096
_RELATIVE_MODULES = {
    layout: reference_module(make_spec(layout=layout, head_dim=32, rotary_dim=32, num_heads=1, max_positions=MAX_P))
    for layout in ("half", "interleaved", "complex")
}


@st.composite
def shifted_pairs(draw: st.DrawFn) -> tuple[int, int, int]:
    m = draw(st.integers(0, MAX_P - 1))
    n = draw(st.integers(0, MAX_P - 1))
    shift = draw(st.integers(-min(m, n), MAX_P - 1 - max(m, n)))
    return m, n, shift


def _rotated_dot(module: RotaryEmbedding, q: torch.Tensor, k: torch.Tensor, m: int, n: int) -> float:
    # One call with positions [m, n]: the query at slot 0 (position m), the key at slot 1 (position n).
    qs, ks = q.expand(1, 1, 2, -1), k.expand(1, 1, 2, -1)
    q_out, k_out = module(qs, ks, position_ids=torch.tensor([[m, n]]))
    return float(np.dot(f64(q_out[0, 0, 0]), f64(k_out[0, 0, 1])))


@pytest.mark.parametrize("layout", list(_RELATIVE_MODULES))
@settings(max_examples=120, deadline=None, derandomize=True)
@given(mns=shifted_pairs(), seed=st.integers(0, 2**31 - 1))
def test_dot_product_depends_only_on_relative_position(layout: str, mns: tuple[int, int, int], seed: int) -> None:
    m, n, shift = mns
    module = _RELATIVE_MODULES[layout]
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(1, 1, 1, 32, generator=g), torch.randn(1, 1, 1, 32, generator=g)
    scale = float(torch.linalg.vector_norm(q) * torch.linalg.vector_norm(k))
    before = _rotated_dot(module, q, k, m, n)
    after = _rotated_dot(module, q, k, m + shift, n + shift)
    # float32 outputs: each rotated component is off by a few 2^-24 relative, so the dot by ~1e-6 of |q||k|.
    assert abs(before - after) <= 4e-6 * scale
    # And both equal g(q, k, m - n) = Re sum_i q_c conj(k_c) e^{i (m - n) theta_i}, from the formula in float64.
    a, b = (np.array(i) for i in zip(*channel_pairs(layout, 32), strict=True))
    qv, kv = f64(q).reshape(32), f64(k).reshape(32)
    qc, kc = qv[a] + 1j * qv[b], kv[a] + 1j * kv[b]
    g_mn = float(np.real(np.sum(qc * np.conj(kc) * np.exp(1j * (m - n) * thetas(32, 10000.0)))))
    assert abs(before - g_mn) <= 4e-6 * scale


# ---------------------------------------------------------------------------------------------------------------------
# 4. Norms are preserved (times the attention factor when a schedule has one).

NORM_CASES = [
    pytest.param({"layout": "half", "head_dim": 64}, 1.0, "fp32", 2e-6, id="half-fp32"),
    pytest.param({"layout": "interleaved", "head_dim": 8}, 1.0, "fp32", 2e-6, id="interleaved-fp32"),
    pytest.param({"layout": "complex", "head_dim": 32}, 1.0, "fp32", 2e-6, id="complex-fp32"),
    pytest.param({"layout": "half", "head_dim": 32, "rotary_dim": 16}, 1.0, "fp32", 2e-6, id="half-partial"),
    pytest.param({"layout": "half", "head_dim": 64}, 1.0, "fp16", 3e-3, id="half-fp16"),
    pytest.param({"layout": "interleaved", "head_dim": 64}, 1.0, "bf16", 2e-2, id="interleaved-bf16"),
    pytest.param(
        {
            "layout": "half",
            "head_dim": 32,
            "scaling": "yarn",
            "scaling_params": {"factor": 4.0, "original_max_position_embeddings": 1024},
        },
        0.1 * np.log(4.0) + 1.0,
        "fp32",
        2e-6,
        id="yarn-attention-factor",
    ),
    pytest.param(
        {
            "layout": "complex",
            "head_dim": 32,
            "rotary_dim": 16,
            "scaling": "yarn",
            "scaling_params": {"factor": 16.0, "original_max_position_embeddings": 1024},
        },
        0.1 * np.log(16.0) + 1.0,
        "fp32",
        2e-6,
        id="yarn-complex-partial",
    ),
]


@pytest.mark.parametrize(("fields", "gain", "dtype", "rtol"), NORM_CASES)
def test_norm_preserved(fields: dict[str, Any], gain: float, dtype: str, rtol: float) -> None:
    spec = make_spec(dtype=dtype, **fields)
    r = spec.rotary_dim
    q, k = inputs(spec, batch=2, seq=9, seed=8, dtype=TORCH[dtype])
    pos = random_positions(2, 9, spec.max_positions, seed=9)
    for x, out in zip((q, k), reference_module(spec)(q, k, position_ids=pos), strict=True):
        x64, out64 = f64(x), f64(out)
        np.testing.assert_allclose(
            np.linalg.norm(out64[..., :r], axis=-1), gain * np.linalg.norm(x64[..., :r], axis=-1), rtol=rtol
        )
        assert np.array_equal(out64[..., r:], x64[..., r:])
        # The rotation is not the identity (else the norm check proves nothing).
        assert not np.allclose(out64[..., :r], gain * x64[..., :r], atol=1e-2)


# ---------------------------------------------------------------------------------------------------------------------
# 5. Partial rotation: channels past rotary_dim pass through untouched.


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("layout", ["half", "interleaved", "complex"])
@pytest.mark.parametrize(("d", "r"), [(16, 8), (64, 16), (10, 2)])
def test_partial_rotation_tail_is_bit_identical(d: int, r: int, layout: str, dtype: str) -> None:
    spec = make_spec(layout=layout, head_dim=d, rotary_dim=r, dtype=dtype, num_heads=2, num_kv_heads=1)
    q, k = inputs(spec, batch=2, seq=5, seed=10, dtype=TORCH[dtype])
    pos = random_positions(2, 5, spec.max_positions, seed=11)
    q_out, k_out = reference_module(spec)(q, k, position_ids=pos)
    assert q_out.dtype == q.dtype and k_out.dtype == k.dtype
    assert torch.equal(q_out[..., r:], q[..., r:]) and torch.equal(k_out[..., r:], k[..., r:])
    # The rotated part is the full rotation of a head_dim = r head.
    narrow = spec.replace(head_dim=r, rotary_dim=None)
    nq, nk = reference_module(narrow)(q[..., :r].contiguous(), k[..., :r].contiguous(), position_ids=pos)
    assert_same_rotation(q_out[..., :r], nq, layout)
    assert_same_rotation(k_out[..., :r], nk, layout)


# ---------------------------------------------------------------------------------------------------------------------
# 6. Grouped-query attention: fewer key heads, each rotated as if alone.


@pytest.mark.parametrize("layout", ["half", "interleaved", "complex"])
@pytest.mark.parametrize(("heads", "kv_heads"), [(8, 2), (4, 1), (6, 3)])
def test_gqa_key_heads_rotate_independently(layout: str, heads: int, kv_heads: int) -> None:
    spec = make_spec(layout=layout, head_dim=16, num_heads=heads, num_kv_heads=kv_heads)
    q, k = inputs(spec, batch=2, seq=4, seed=12)
    pos = random_positions(2, 4, spec.max_positions, seed=13)
    q_out, k_out = reference_module(spec)(q, k, position_ids=pos)
    assert q_out.shape == (2, heads, 4, 16) and k_out.shape == (2, kv_heads, 4, 16)
    single = reference_module(spec.replace(num_heads=1, num_kv_heads=1))
    for j in range(kv_heads):
        alone_q, alone_k = single(q[:, j : j + 1], k[:, j : j + 1], position_ids=pos)
        assert_same_rotation(k_out[:, j : j + 1], alone_k, layout)
        assert_same_rotation(q_out[:, j : j + 1], alone_q, layout)
    with pytest.raises(RuntimeInputError, match="key"):
        reference_module(spec)(q, q, position_ids=pos)  # num_heads key heads where num_kv_heads are expected


# ---------------------------------------------------------------------------------------------------------------------
# 7. Position ids per batch row.

ROW_CASES = [
    pytest.param({"layout": "half"}, id="half"),
    pytest.param({"layout": "interleaved", "dtype": "fp16"}, id="interleaved-fp16"),
    pytest.param({"layout": "complex"}, id="complex"),
    pytest.param(
        {
            "layout": "half",
            "head_dim": 32,
            "theta": 500000.0,
            "scaling": "llama3",
            "max_positions": 16384,
            "scaling_params": {
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 2048,
            },
        },
        id="llama3",
    ),
]


@pytest.mark.parametrize("fields", ROW_CASES)
def test_rows_with_offsets_equal_rows_alone(fields: dict[str, Any]) -> None:
    spec = make_spec(**fields)
    module = reference_module(spec)
    q, k = inputs(spec, batch=4, seq=6, seed=14, dtype=TORCH[spec.dtype])
    offsets = torch.tensor([0, 7, 300, spec.max_positions - 6])
    pos = offsets[:, None] + torch.arange(6)
    pos[2] = pos[2].flip(0)  # a row need not be increasing
    q_out, k_out = module(q, k, position_ids=pos)
    for row in range(4):
        rq, rk = module(q[row : row + 1], k[row : row + 1], position_ids=pos[row : row + 1])
        assert_same_rotation(q_out[row : row + 1], rq, spec.layout)
        assert_same_rotation(k_out[row : row + 1], rk, spec.layout)
    # Row offsets matter: the same inputs at row 0's positions give another answer.
    shifted, _ = module(q[1:2], k[1:2], position_ids=pos[0:1])
    assert not torch.equal(shifted, q_out[1:2])


# ---------------------------------------------------------------------------------------------------------------------
# 8. Positions outside [0, max_positions) are refused.


@pytest.mark.parametrize("layout", ["half", "interleaved", "complex"])
@pytest.mark.parametrize(
    ("bad", "where"),
    [(-1, (0, 0)), (64, (1, 2)), (65, (0, 3)), (10**9, (1, 0)), (-(2**40), (1, 3))],
)
def test_out_of_range_positions_raise(layout: str, bad: int, where: tuple[int, int]) -> None:
    spec = make_spec(layout=layout, max_positions=64)
    module = reference_module(spec)
    q, k = inputs(spec, batch=2, seq=4, seed=15)
    pos = torch.tensor([[0, 1, 2, 63], [5, 6, 7, 8]])
    module(q, k, position_ids=pos)  # the whole valid range, last position included, is accepted
    pos[where] = bad
    with pytest.raises(RuntimeInputError, match=str(bad)):
        module(q, k, position_ids=pos)


# ---------------------------------------------------------------------------------------------------------------------
# 9. The complex module equals the real interleaved one in float32.

COMPLEX_CASES = [
    pytest.param({"head_dim": 8}, id="d8"),
    pytest.param({"head_dim": 64, "num_heads": 4, "num_kv_heads": 2, "theta": 500000.0}, id="d64-gqa"),
    pytest.param({"head_dim": 48, "rotary_dim": 16}, id="d48-r16"),
    pytest.param(
        {"head_dim": 32, "scaling": "yarn", "scaling_params": {"factor": 8.0, "original_max_position_embeddings": 512}},
        id="yarn",
    ),
    pytest.param(
        {
            "head_dim": 16,
            "scaling": "longrope",
            "max_positions": 8192,
            "scaling_params": {
                "original_max_position_embeddings": 1024,
                "short_factor": [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7],
                "long_factor": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
            },
        },
        id="longrope",
    ),
    pytest.param(
        {
            "head_dim": 16,
            "scaling": "dynamic",
            "scaling_params": {"factor": 4.0, "original_max_position_embeddings": 512},
        },
        id="dynamic",
    ),
]


@pytest.mark.parametrize("fields", COMPLEX_CASES)
def test_complex_matches_real_interleaved(fields: dict[str, Any]) -> None:
    spec = make_spec(layout="complex", **fields)
    q, k = inputs(spec, batch=3, seq=8, seed=16)
    pos = random_positions(3, 8, spec.max_positions, seed=17)
    got = reference_module(spec)(q, k, position_ids=pos)
    want = RotaryEmbedding(spec.replace(layout="interleaved"))(q, k, position_ids=pos)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype == torch.float32
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=0, atol=2e-6)
