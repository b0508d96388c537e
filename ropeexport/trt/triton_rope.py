"""RoPE as a Triton kernel, reading the same half-width tables as the ONNX graphs (Su et al. 2021, RoFormer, eq. 34).

Each pair of channels (x_a, x_b) of a token at position m is rotated by the angle m * theta_i:
    x_a' = x_a cos(m theta_i) - x_b sin(m theta_i)
    x_b' = x_b cos(m theta_i) + x_a sin(m theta_i)
``interleaved=False`` pairs channel i with i + r/2 (GPT-NeoX, Hugging Face ``rotate_half``); ``interleaved=True``
pairs 2i with 2i+1 (GPT-J, Meta Llama). Channels at and past ``rotary_dim`` are copied through.

The tables are ``cos_table`` / ``sin_table`` [P, r/2], computed in float64 and rounded once (``table_regimes`` +
``round_once``), attention factor included; row p holds position p. ``position_ids`` [b, s] picks one row per token, so
every batch row may carry its own offset. Grouped-query attention needs nothing special: query and key are two
launches with their own head counts.

Precision: the kernel loads x and the tables in their dtype, computes in float32 and rounds once to x's dtype on
store, to nearest with ties to even (bfloat16 by hand, ``_round_to``). Eager fp16 rounds after every multiply and add
(~2 ulp); this stays within 0.5 ulp of the float64 rotation by the same (once-rounded) table entries.

Grid and blocks (for the GPU; the interpreter runs the same code): one program per (batch, head, block of
``BLOCK_S`` tokens). x is [b, h, s, d] with unit channel stride, so a program's tile of BLOCK_S tokens x d channels
is one contiguous run of memory (for a contiguous x): every load and store is coalesced and a warp touches whole
128-byte lines. ``BLOCK_S`` is sized so that a tile holds about ``TILE_ELEMENTS`` elements (8 tokens at d = 128),
one warp a program: many small programs keep enough bytes in flight on every SM (the prefill shape, s = 2048,
launches thousands), and they were the fastest launch on an H200 (``TILE_ELEMENTS``). The grid is flattened into
axis 0, token blocks fastest, so consecutive programs stream consecutive memory of one head, and neither the 65535
limit of grid axes 1-2 nor a long sequence can overflow it. The half layout loads the two halves as two
[BLOCK_S, r/2] tiles; the interleaved layout loads one [BLOCK_S, r] tile and splits it into even and odd channels in
registers (``tl.reshape`` + ``tl.split``), so no load is strided. The tables (r values per token against 2 h d of x
traffic) are gathered per token; every head reads the same rows, which stay in L2 (the prefill tables are 1-2 MiB).

Positions outside [0, P): ``rope_triton`` raises before launching (``check=True``, one device sync). The kernel
itself never reads past the table: an invalid position reads row 0 under a mask and its rotated channels are written
as NaN, so a caller that skips the check (the TensorRT plugin, whose runners reject bad positions beforehand) gets a
visible failure, never another row's values.

Notation: b batch, h heads (num_heads for query, num_kv_heads for key), s sequence, d head_dim, r rotary_dim,
P table rows.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ropeexport.dtypes import DTYPES
from ropeexport.errors import RuntimeInputError, RuntimeUnavailable
from ropeexport.tensors import check_positions

TORCH_TYPES = tuple(d.torch for d in DTYPES.values())  # fp32, fp16, bf16
# Elements per program tile: 8 tokens x 128 channels (4 KiB of fp32 in, 4 KiB out), one warp. Measured on an H200
# (tools/gpu_check.py --block-s 8,16,32,64 --num-warps 1,2,4,8, tools/figures/gpu-check-h200-sweep.json): over the
# prefill shape's 8 cases (half / interleaved, fp32 / fp16, query / key) this launch's worst case was 89% of a device
# copy's bandwidth, the best worst case of the 16 swept; the earlier 32 tokens x 4 warps fell to 75% on interleaved
# keys.
TILE_ELEMENTS = 1024
NUM_WARPS = 1


@triton.jit
def _round_to(y, dtype: tl.constexpr):
    """float32 y rounded to dtype, to nearest with ties to even.

    bfloat16 is rounded on the bits: Triton's interpreter truncates a float32 -> bfloat16 cast whatever rounding mode
    is asked (the compiled kernel rounds to nearest), so doing it here makes both give the same bits.
    """
    if dtype == tl.bfloat16:
        bits = y.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)  # quiet NaN (0x7FC00000) stays NaN
        return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    return y.to(dtype)


@triton.jit
def _rope_kernel(
    x_ptr,
    out_ptr,
    cos_ptr,
    sin_ptr,
    pos_ptr,
    n_heads,
    seq_len,
    n_positions,
    stride_xb,
    stride_xh,
    stride_xs,
    stride_ob,
    stride_oh,
    stride_os,
    stride_pb,
    stride_ps,
    stride_t,
    HALF: tl.constexpr,  # r / 2
    TAIL: tl.constexpr,  # d - r, channels copied through
    BLOCK_S: tl.constexpr,
    BLOCK_HALF: tl.constexpr,  # next power of two >= HALF
    BLOCK_TAIL: tl.constexpr,  # next power of two >= TAIL (1 when TAIL == 0)
    INTERLEAVED: tl.constexpr,
):
    pid = tl.program_id(0)
    n_blocks = tl.cdiv(seq_len, BLOCK_S)
    bh = pid // n_blocks
    s_block = pid % n_blocks
    b = (bh // n_heads).to(tl.int64)  # int64 offsets: b * h * s * d passes 2**31 at long contexts
    h = (bh % n_heads).to(tl.int64)

    s = s_block * BLOCK_S + tl.arange(0, BLOCK_S)  # [BLOCK_S]
    s_mask = s < seq_len
    pos = tl.load(pos_ptr + b * stride_pb + s.to(tl.int64) * stride_ps, mask=s_mask, other=0)
    valid = (pos >= 0) & (pos < n_positions)
    row = tl.where(valid, pos, 0)  # never read past the table

    i = tl.arange(0, BLOCK_HALF)  # frequency index
    pair_mask = s_mask[:, None] & (i < HALF)[None, :]  # [BLOCK_S, BLOCK_HALF]
    table = row[:, None] * stride_t + i[None, :]
    cos = tl.load(cos_ptr + table, mask=pair_mask, other=0.0).to(tl.float32)
    sin = tl.load(sin_ptr + table, mask=pair_mask, other=0.0).to(tl.float32)

    x_rows = x_ptr + b * stride_xb + h * stride_xh + s.to(tl.int64)[:, None] * stride_xs  # [BLOCK_S, 1]
    o_rows = out_ptr + b * stride_ob + h * stride_oh + s.to(tl.int64)[:, None] * stride_os
    poison = valid[:, None]  # rotated channels of an invalid position become NaN
    if INTERLEAVED:
        c = tl.arange(0, 2 * BLOCK_HALF)  # channels 0 .. r-1, contiguous
        c_mask = s_mask[:, None] & (c < 2 * HALF)[None, :]
        x = tl.load(x_rows + c[None, :], mask=c_mask, other=0.0).to(tl.float32)
        xa, xb = tl.split(tl.reshape(x, (BLOCK_S, BLOCK_HALF, 2)))  # even, odd channels: [BLOCK_S, BLOCK_HALF]
        ya = tl.where(poison, xa * cos - xb * sin, float("nan"))
        yb = tl.where(poison, xb * cos + xa * sin, float("nan"))
        y = tl.reshape(tl.join(ya, yb), (BLOCK_S, 2 * BLOCK_HALF))
        tl.store(o_rows + c[None, :], _round_to(y, out_ptr.dtype.element_ty), mask=c_mask)
    else:
        xa = tl.load(x_rows + i[None, :], mask=pair_mask, other=0.0).to(tl.float32)
        xb = tl.load(x_rows + HALF + i[None, :], mask=pair_mask, other=0.0).to(tl.float32)
        ya = tl.where(poison, xa * cos - xb * sin, float("nan"))
        yb = tl.where(poison, xb * cos + xa * sin, float("nan"))
        tl.store(o_rows + i[None, :], _round_to(ya, out_ptr.dtype.element_ty), mask=pair_mask)
        tl.store(o_rows + HALF + i[None, :], _round_to(yb, out_ptr.dtype.element_ty), mask=pair_mask)
    if TAIL > 0:
        j = tl.arange(0, BLOCK_TAIL)
        tail_mask = s_mask[:, None] & (j < TAIL)[None, :]
        tail = tl.load(x_rows + 2 * HALF + j[None, :], mask=tail_mask, other=0.0)
        tl.store(o_rows + 2 * HALF + j[None, :], tail.to(out_ptr.dtype.element_ty), mask=tail_mask)


def interpreted() -> bool:
    """Whether the kernel was compiled for Triton's interpreter (TRITON_INTERPRET=1 before this module's import)."""
    return type(_rope_kernel).__name__ == "InterpretedFunction"


def launch_config(seq_len: int, head_dim: int, rotary_dim: int) -> dict[str, int]:
    """Block sizes for a shape: BLOCK_S tokens per program so that a tile holds about TILE_ELEMENTS elements."""
    half, tail = rotary_dim // 2, head_dim - rotary_dim
    block_half = triton.next_power_of_2(half)
    block_tail = triton.next_power_of_2(tail) if tail else 1
    width = 2 * block_half + (block_tail if tail else 0)
    fits = max(1, TILE_ELEMENTS // width)
    # a power of two (tl.arange's rule): rounded down, else a partial rotation's width (20 at d = 16, r = 12) would
    # ask for 51 tokens once the sequence is longer than that
    block_s = min(triton.next_power_of_2(max(seq_len, 1)), 1 << (fits.bit_length() - 1))
    return {"BLOCK_S": block_s, "BLOCK_HALF": block_half, "BLOCK_TAIL": block_tail}


def _check_inputs(
    x: torch.Tensor, cos_table: torch.Tensor, sin_table: torch.Tensor, position_ids: torch.Tensor, rotary_dim: int
) -> None:
    if x.dim() != 4:
        raise RuntimeInputError(f"x: expected [batch, heads, seq, head_dim], got shape {list(x.shape)}")
    if x.dtype not in TORCH_TYPES:
        raise RuntimeInputError(f"x: dtype must be float32, float16 or bfloat16, got {x.dtype}")
    d = x.shape[-1]
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int) or rotary_dim % 2 or not 2 <= rotary_dim <= d:
        raise RuntimeInputError(f"rotary_dim: must be an even integer in [2, head_dim={d}], got {rotary_dim!r}")
    for name, t in (("cos_table", cos_table), ("sin_table", sin_table)):
        if t.dim() != 2 or t.shape[1] != rotary_dim // 2 or t.shape[0] < 1:
            raise RuntimeInputError(
                f"{name}: expected [positions, rotary_dim / 2 = {rotary_dim // 2}], got shape {list(t.shape)}"
            )
        if t.dtype not in TORCH_TYPES:
            raise RuntimeInputError(f"{name}: dtype must be float32, float16 or bfloat16, got {t.dtype}")
    if cos_table.shape != sin_table.shape:
        raise RuntimeInputError(f"sin_table: shape {list(sin_table.shape)} differs from cos_table's")
    if position_ids.dtype != torch.int64 or list(position_ids.shape) != [x.shape[0], x.shape[2]]:
        raise RuntimeInputError(
            f"position_ids: expected int64 [batch, seq] = {[x.shape[0], x.shape[2]]}, "
            f"got {position_ids.dtype} {list(position_ids.shape)}"
        )
    devices = {t.device for t in (x, cos_table, sin_table, position_ids)}
    if len(devices) != 1:
        raise RuntimeInputError(f"x, tables and position_ids must be on one device, got {sorted(map(str, devices))}")
    if x.device.type == "cpu" and not interpreted():
        raise RuntimeUnavailable(
            "CPU tensors run only in Triton's interpreter: set TRITON_INTERPRET=1 before plugins.triton_rope is "
            "imported, or pass CUDA tensors"
        )
    if x.device.type not in ("cpu", "cuda"):
        raise RuntimeUnavailable(f"the Triton kernel runs on CUDA (or the CPU interpreter), not on {x.device}")


def _check_positions(position_ids: torch.Tensor, n_positions: int) -> None:
    bad = (position_ids < 0) | (position_ids >= n_positions)
    if bool(bad.any()):  # one device sync; the error names the first offender
        check_positions(position_ids.cpu().numpy(), n_positions)


def rope_triton(
    x: torch.Tensor,
    cos_table: torch.Tensor,
    sin_table: torch.Tensor,
    position_ids: torch.Tensor,
    *,
    interleaved: bool,
    rotary_dim: int,
    out: torch.Tensor | None = None,
    check: bool = True,
    block_s: int | None = None,
    num_warps: int = NUM_WARPS,
) -> torch.Tensor:
    """x [b, h, s, d] rotated by the table rows ``position_ids`` [b, s] picks: [b, h, s, d] in x's dtype.

    ``cos_table`` / ``sin_table`` [P, rotary_dim / 2] (fp32, fp16 or bf16, any of them). ``out`` (optional, x's
    shape and dtype, any strides with a contiguous channel axis) receives the result in place of a new tensor.
    ``check=False`` skips the position check (and its device sync): invalid positions then come out as NaN.
    ``block_s`` / ``num_warps`` override the launch configuration (tuning only).
    Raises RuntimeInputError for a bad input, RuntimeUnavailable for a device Triton cannot run on here.
    """
    _check_inputs(x, cos_table, sin_table, position_ids, rotary_dim)
    if check:
        _check_positions(position_ids, cos_table.shape[0])
    if x.stride(-1) != 1:
        x = x.contiguous()
    cos_table, sin_table = cos_table.contiguous(), sin_table.contiguous()  # one row stride for both (no-op usually)
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    elif out.shape != x.shape or out.dtype != x.dtype or out.device != x.device or out.stride(-1) != 1:
        raise RuntimeInputError(
            f"out: expected {x.dtype} {list(x.shape)} on {x.device} with a contiguous channel axis, got "
            f"{out.dtype} {list(out.shape)} on {out.device} with strides {out.stride()}"
        )
    b, h, s, d = x.shape
    if x.numel() == 0:
        return out
    config = launch_config(s, d, rotary_dim)
    if block_s is not None:
        config["BLOCK_S"] = block_s
    grid = (b * h * triton.cdiv(s, config["BLOCK_S"]),)
    _rope_kernel[grid](
        x,
        out,
        cos_table,
        sin_table,
        position_ids,
        h,
        s,
        cos_table.shape[0],
        *x.stride()[:3],
        *out.stride()[:3],
        *position_ids.stride(),
        cos_table.stride(0),
        HALF=rotary_dim // 2,
        TAIL=d - rotary_dim,
        INTERLEAVED=bool(interleaved),
        num_warps=num_warps,
        **config,
    )
    return out
