"""The Triton RoPE kernel against the eager reference, in Triton's interpreter here and natively on a CUDA GPU."""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Callable

import numpy as np
import pytest
import torch

pytest.importorskip("triton", reason="Triton is not installed: the kernel tests need it (pip install triton)")

from ropeexport.dtypes import DTYPES
from ropeexport.errors import RuntimeInputError  # noqa: E402
from ropeexport.families.rope.reference import reference_module, table_regimes  # noqa: E402
from ropeexport.families.rope.spec import RopeSpec  # noqa: E402
from ropeexport.numerics import round_once, ulp_distance  # noqa: E402
from ropeexport.tensors import to_torch  # noqa: E402
from ropeexport.trt.triton_rope import interpreted, launch_config, rope_triton  # noqa: E402
from ropeexport.verification.compare import TOLERANCES  # noqa: E402
from tests.cases import tiered

DEVICE = "cpu" if interpreted() else "cuda"
MAX_POSITIONS = 256
HEAD_DIM = 16

# The case table: layout x dtype x rotation x (query heads, key heads). Shapes stay small: the interpreter runs every
# program in Python.
ROTATIONS = {"full": HEAD_DIM, "partial": 12}  # partial: 12 of 16 channels, r/2 = 6 is not a power of two
HEADS = {"gqa": (4, 2), "mqa": (3, 1)}
CASES = [
    pytest.param(layout, dtype, rotation, heads, id=f"{layout}-{dtype}-{rotation}-{heads}")
    for layout, dtype, rotation, heads in itertools.product(("half", "interleaved"), DTYPES, ROTATIONS, HEADS)
]

# Position calls: per-row offsets (each batch row starts elsewhere), the table's last rows, decode, a shuffle.
POSITION_CALLS = {
    "row-offsets": np.stack([np.arange(0, 5), np.arange(100, 105)]),
    "to-the-end": np.stack([np.arange(MAX_POSITIONS - 5, MAX_POSITIONS), np.arange(7, 12)]),
    "decode": np.array([[MAX_POSITIONS - 1], [3]]),
    "shuffled": np.random.default_rng(1).permutation(MAX_POSITIONS)[:14].reshape(2, 7),
}


def make_spec(layout: str, dtype: str, rotary_dim: int, heads: tuple[int, int]) -> RopeSpec:
    return RopeSpec(
        layout=layout,
        dtype=dtype,
        head_dim=HEAD_DIM,
        rotary_dim=rotary_dim,
        num_heads=heads[0],
        num_kv_heads=heads[1],
        max_positions=MAX_POSITIONS,
    )


def tables(spec: RopeSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """The graphs' half-width tables [P, r/2]: float64, rounded once to the spec dtype."""
    ((cos, sin),) = table_regimes(spec)
    return to_torch(round_once(cos, spec.dtype)).to(DEVICE), to_torch(round_once(sin, spec.dtype)).to(DEVICE)


def inputs(spec: RopeSpec, positions: np.ndarray, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    b, s = positions.shape
    dtype = DTYPES[spec.dtype].torch
    query = torch.randn(b, spec.num_heads, s, spec.head_dim, generator=g).to(dtype)
    key = torch.randn(b, spec.num_kv_heads, s, spec.head_dim, generator=g).to(dtype)
    return query, key, torch.from_numpy(positions.astype(np.int64))


def exact_rotation(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> np.ndarray:
    """float64 rotation of x by table rows cos/sin [b, s, r/2] (independent of the reference module's code)."""
    x64, c, s = (np.asarray(t.double().cpu()) for t in (x, cos, sin))
    r = 2 * c.shape[-1]
    c, s = c[:, None], s[:, None]
    out = x64.copy()
    ia, ib = (np.arange(0, r, 2), np.arange(1, r, 2)) if interleaved else (np.arange(r // 2), np.arange(r // 2, r))
    out[..., ia] = x64[..., ia] * c - x64[..., ib] * s
    out[..., ib] = x64[..., ib] * c + x64[..., ia] * s
    return out


# Fast tier: the fp32 rows; CI runs every dtype.
@pytest.mark.parametrize(("layout", "dtype", "rotation", "heads"), tiered(CASES, lambda c: c[1] == "fp32"))
def test_kernel_matches_reference(
    layout: str, dtype: str, rotation: str, heads: str, record_property: Callable[[str, object], None]
) -> None:
    spec = make_spec(layout, dtype, ROTATIONS[rotation], HEADS[heads])
    reference = reference_module(spec)
    cos, sin = tables(spec)
    tol = TOLERANCES[dtype]
    worst = 0.0
    for name, positions in POSITION_CALLS.items():
        query, key, pos = inputs(spec, positions)
        with torch.no_grad():
            want = reference(query, key, position_ids=pos)
        for x, w in zip((query, key), want, strict=True):  # one launch per tensor: query and key head counts differ
            got = rope_triton(
                x.to(DEVICE), cos, sin, pos.to(DEVICE), interleaved=layout == "interleaved", rotary_dim=spec.rotary_dim
            )
            assert got.dtype == x.dtype and got.shape == x.shape
            g64, w64 = got.cpu().double().numpy(), w.double().numpy()
            err = np.abs(g64 - w64)
            worst = max(worst, float(err.max()))
            assert not ((err > tol.atol) & (err > tol.rtol * np.abs(w64))).any(), f"{name}: max err {err.max():.3g}"
            r = spec.rotary_dim
            assert torch.equal(got.cpu()[..., r:], x[..., r:]), f"{name}: channels past rotary_dim must pass through"
            if dtype != "fp32":
                # fp32 arithmetic, one rounding to the output dtype: within half an ulp (at max(|y|, 1)) of the
                # float64 rotation by the same table rows.
                table_rows = cos.cpu()[pos], sin.cpu()[pos]
                exact = exact_rotation(x, *table_rows, interleaved=layout == "interleaved")
                ulps = ulp_distance(g64, exact, dtype, floor=1.0)
                assert ulps.max() <= 0.51, f"{name}: {ulps.max():.3f} ulp from the exact rotation"
    record_property("max_abs_err", worst)


@pytest.mark.parametrize("bad", [-1, MAX_POSITIONS, MAX_POSITIONS + 1000])
def test_positions_outside_the_table_raise(bad: int) -> None:
    spec = make_spec("half", "fp32", HEAD_DIM, HEADS["gqa"])
    cos, sin = tables(spec)
    positions = np.array([[0, 1, 2], [3, bad, 5]])
    query, _, pos = inputs(spec, positions)
    with pytest.raises(RuntimeInputError, match=rf"value {bad} at index \[1, 1\] is outside the table \[0, 256\)"):
        rope_triton(query.to(DEVICE), cos, sin, pos.to(DEVICE), interleaved=False, rotary_dim=HEAD_DIM)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_unchecked_invalid_positions_are_masked_to_nan(layout: str) -> None:
    """With check=False (the TensorRT plugin) a bad position never reads past the table: its rotated part is NaN."""
    spec = make_spec(layout, "fp32", 12, HEADS["gqa"])
    cos, sin = tables(spec)
    positions = np.array([[0, -7, 2], [3, MAX_POSITIONS, 5]])
    query, _, pos = inputs(spec, positions)
    got = rope_triton(
        query.to(DEVICE), cos, sin, pos.to(DEVICE), interleaved=layout != "half", rotary_dim=12, check=False
    ).cpu()
    bad = torch.from_numpy((positions < 0) | (positions >= MAX_POSITIONS))  # [b, s]
    assert got[..., :12].isnan().all(-1).eq(bad[:, None]).all(), "exactly the bad tokens' rotated channels are NaN"
    assert torch.equal(got[..., 12:], query[..., 12:]), "the tail is copied even for bad tokens"
    good = pos.clamp(0, MAX_POSITIONS - 1)
    want = rope_triton(query.to(DEVICE), cos, sin, good.to(DEVICE), interleaved=layout != "half", rotary_dim=12).cpu()
    keep = ~bad[:, None, :, None].expand_as(got)
    assert torch.equal(got[keep], want[keep]), "good tokens are unaffected by their bad neighbours"


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_several_token_blocks_and_strided_input(layout: str) -> None:
    """37 tokens in blocks of 8 (a partial last block); x a transposed view of [b, s, h, d] as attention makes it."""
    spec = make_spec(layout, "fp16", 12, HEADS["gqa"])
    cos, sin = tables(spec)
    positions = np.stack([np.arange(37), np.arange(200, 237)])
    query, key, pos = inputs(spec, positions)
    strided = query.transpose(1, 2).contiguous().transpose(1, 2)  # [b, h, s, d] with head stride d
    assert not strided.is_contiguous()
    want = reference_module(spec)(query, key, position_ids=pos)[0].double()
    interleaved = layout != "half"
    got = rope_triton(strided.to(DEVICE), cos, sin, pos.to(DEVICE), interleaved=interleaved, rotary_dim=12, block_s=8)
    got = got.cpu()
    tol = TOLERANCES["fp16"]
    assert torch.allclose(got.double(), want, atol=tol.atol, rtol=tol.rtol)
    out = torch.empty_like(query, device=DEVICE)
    assert (
        rope_triton(query.to(DEVICE), cos, sin, pos.to(DEVICE), interleaved=interleaved, rotary_dim=12, out=out) is out
    )
    assert torch.equal(out.cpu(), got), "block size and strides change nothing"


def test_launch_config_fills_a_tile() -> None:
    assert launch_config(2048, 128, 128) == {"BLOCK_S": 8, "BLOCK_HALF": 64, "BLOCK_TAIL": 1}
    assert launch_config(2048, 128, 64)["BLOCK_S"] == 8  # 64 rotated + 64 copied channels per token
    assert launch_config(2048, 64, 64)["BLOCK_S"] == 16  # a smaller head: more tokens to the same tile
    assert launch_config(1, 128, 128)["BLOCK_S"] == 1  # decode: one token per program
    assert launch_config(5, 16, 12) == {"BLOCK_S": 8, "BLOCK_HALF": 8, "BLOCK_TAIL": 4}
    # a tile width that is no power of two (8 + 8 rotated + 4 copied): the tokens per program still are one
    assert launch_config(2048, 16, 12)["BLOCK_S"] == 32


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rotary_dim": 10}, r"cos_table: expected \[positions, rotary_dim / 2 = 5\]"),
        ({"rotary_dim": 7}, "rotary_dim: must be an even integer"),
        ({"rotary_dim": 18}, "rotary_dim: must be an even integer in \\[2, head_dim=16\\]"),
        ({"position_ids": "int32"}, "position_ids: expected int64"),
        ({"x": "3d"}, r"x: expected \[batch, heads, seq, head_dim\]"),
        ({"x": "float64"}, "x: dtype must be float32, float16 or bfloat16"),
    ],
)
def test_bad_inputs_say_what_is_wrong(change: dict[str, object], message: str) -> None:
    spec = make_spec("half", "fp32", 12, HEADS["gqa"])
    cos, sin = tables(spec)
    query, _, pos = inputs(spec, np.arange(4)[None])
    x, rotary_dim = query.to(DEVICE), change.get("rotary_dim", 12)
    if change.get("position_ids") == "int32":
        pos = pos.int()
    if change.get("x") == "3d":
        x = x[0]
    if change.get("x") == "float64":
        x = x.double()
    with pytest.raises(RuntimeInputError, match=message):
        rope_triton(x, cos, sin, pos.to(DEVICE), interleaved=False, rotary_dim=rotary_dim)  # type: ignore[arg-type]


def _cuda() -> bool:
    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason=f"no CUDA device (torch {torch.__version__}): the native kernel run needs one")
@pytest.mark.skipif(not interpreted(), reason="this run is already native on CUDA")
def test_kernel_natively_on_cuda(run_natively: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    """The whole file again, compiled for the GPU: a subprocess, since Triton chooses interpreter or not at import."""
    run = run_natively(__file__)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout
