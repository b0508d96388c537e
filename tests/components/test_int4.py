"""The linear component's int4 format (``WeightFormat.int4``): what MatMulNBits holds, read back exactly.

``read64`` is judged by ONNX Runtime itself: one MatMulNBits node, built by ``store`` / ``linear``, run on a few rows
against x @ read64(W) in float64, for each block size, accuracy level, activation dtype and zero-point form in the
table. The packing is ONNX Runtime's own (the bytes equal its MatMulNBits quantizer's), so the test that can fail is
the reading: a reading of the wrong zero point or block size is seen.
"""

from __future__ import annotations

import logging

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from ropeexport.components.linear import BLOCK_SIZES, Packed, WeightFormat, dequantize, gather, gathered64, linear
from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.graph.onnx_io import GraphBuilder, make_model
from ropeexport.numerics import round_once

pytestmark = pytest.mark.fast  # the int4 linear against its float64 twin

RNG = np.random.default_rng(7)

# Max |ORT - x @ read64(W)| over max |x @ read64(W)|, by what the accuracy level lets the kernel compute in. fp32
# (levels 0, 1): the weights are the exact dequantized values, so only fp32 accumulation remains (measured <= 6e-7).
# fp16 activations round the output to fp16 (2^-11 ~ 4.9e-4; measured <= 3.8e-4). Levels 2 and 3 may compute in
# fp16 / bf16 (ONNX Runtime's x86 CPU kernels have no such path and measure as level 1; the bound is what the level
# allows). Level 4 quantizes each block of activations to int8 (a step of max |a| / 127): measured 4e-3 to 9e-3.
BOUND = {("fp32", 0): 2e-6, ("fp32", 1): 2e-6, ("fp32", 2): 2e-3, ("fp32", 3): 1.6e-2, ("fp32", 4): 2e-2,
         ("fp16", 0): 2e-3, ("fp16", 1): 2e-3, ("fp16", 2): 2e-3, ("fp16", 3): 1.6e-2, ("fp16", 4): 2e-2}  # fmt: skip

# (in features K, out features N, block size, accuracy level, dtype, symmetric): every block size and level, both
# dtypes and zero-point forms, and in features that are not a whole number of blocks (48 and 200: ORT's padding).
CASES = [(256, 96, block, 0, "fp32", True) for block in BLOCK_SIZES] + [
    (256, 96, 32, level, dtype, symmetric) for level in range(5) for dtype in ("fp32", "fp16") for symmetric in
    (True, False)
] + [(48, 40, 32, 0, "fp32", True), (48, 40, 32, 4, "fp16", False), (200, 64, 64, 0, "fp32", False),
     (200, 64, 256, 1, "fp16", True), (200, 64, 16, 0, "fp16", True), (200, 64, 128, 4, "fp32", True)]  # fmt: skip


def _run(fmt: WeightFormat, weight: np.ndarray, x: np.ndarray) -> np.ndarray:
    """x [rows, K] @ weight through one MatMulNBits node (``store`` + ``linear``), in ONNX Runtime, as float64."""
    g = GraphBuilder()
    out = linear(g, "x", fmt.store(g, "w_proj", weight), name="y")
    assert [n.op_type for n in g.nodes] == ["MatMulNBits"]
    elem = DTYPES[fmt.dtype].onnx
    graph = helper.make_graph(g.nodes, "t", [helper.make_tensor_value_info("x", elem, list(x.shape))],
                              [helper.make_tensor_value_info(out, elem, None)], g.initializers)  # fmt: skip
    model = make_model(graph, 17, {}, {"com.microsoft": 1})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": round_once(x, fmt.dtype)})[0].astype(np.float64)


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize(("K", "N", "block", "level", "dtype", "symmetric"), CASES)
def test_read64_is_what_matmulnbits_multiplies_by(K: int, N: int, block: int, level: int, dtype: str,
                                                  symmetric: bool) -> None:  # fmt: skip
    fmt = WeightFormat.int4(dtype, block, level, symmetric)
    weight, x = RNG.standard_normal((K, N)) / np.sqrt(K), RNG.standard_normal((5, K))
    held = fmt.read64(weight)
    assert held.shape == (K, N) and held.dtype == np.float64
    got = _run(fmt, weight, x)
    want = round_once(x, dtype).astype(np.float64) @ held
    assert _rel(got, want) <= BOUND[(dtype, level)]
    if level == 4:  # the int8 activations are really in effect: worse than the fp32 bound
        assert _rel(got, want) > BOUND[("fp32", 0)]
    # another reading of the same bytes is seen: the zero point one off, or the blocks read at another size
    packed = fmt.pack(weight)
    shifted = Packed(packed.weight, packed.scales, np.full_like(packed.scales, 0x77, np.uint8) if symmetric
                     else packed.zero_points ^ 0x11, K, block)  # fmt: skip
    assert _rel(got, round_once(x, dtype).astype(np.float64) @ dequantize(shifted)) > 10 * BOUND[(dtype, level)]
    # the quantization is not the identity: int4 rounding is far above any arithmetic bound here
    assert _rel(want, round_once(x, dtype).astype(np.float64) @ round_once(weight, dtype).astype(np.float64)) > 2e-2


@pytest.mark.parametrize(("block", "symmetric", "dtype"), [(32, True, "fp32"), (128, False, "fp32"),
                                                           (16, False, "fp16"), (64, True, "fp16")])  # fmt: skip
def test_the_packing_is_onnxruntimes_quantizer(block: int, symmetric: bool, dtype: str) -> None:
    """The bytes equal what onnxruntime.quantization's MatMulNBits quantizer writes for the same weight."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:  # its module calls logging.basicConfig on import: the root logger is put back as it was
        from onnxruntime.quantization.matmul_nbits_quantizer import (
            DefaultWeightOnlyQuantConfig,
            DefaultWeightOnlyQuantizer,
        )
    finally:
        root.handlers[:], root.level = handlers, level
    weight = RNG.standard_normal((200, 48))
    fmt = WeightFormat.int4(dtype, block, 0, symmetric)
    theirs = DefaultWeightOnlyQuantizer(DefaultWeightOnlyQuantConfig(block, symmetric)).qbits_block_quant(
        round_once(weight, dtype)
    )
    ours = fmt.pack(weight)
    assert np.array_equal(ours.weight, theirs[0]) and np.array_equal(ours.scales, theirs[1])
    assert ours.scales.dtype == DTYPES[dtype].np_dtype  # the scales in the activation dtype
    assert (ours.zero_points is None) == symmetric
    if not symmetric:
        assert np.array_equal(ours.zero_points, theirs[2])


def test_columns_are_quantized_apart() -> None:
    """q | k | v (and gate | up) are stored as one weight: each part's values are those it would hold alone."""
    fmt = WeightFormat.int4("fp32", 32, 0, False)
    parts = [RNG.standard_normal((96, n)) for n in (64, 32, 32)]
    joined = fmt.read64(np.concatenate(parts, axis=1))
    assert np.array_equal(joined, np.concatenate([fmt.read64(p) for p in parts], axis=1))


# (in features K, out features N, block size, dtype, symmetric): a tied embedding's table [N, K] gathered from the
# head's MatMulNBits bytes. Zero points packed two a byte per row with an odd block count (96 / 32: 3 blocks, the
# last byte half used), a last block short of K (80 / 32, 48 / 128: sliced off), fp16 scales.
GATHERED = [(64, 24, 32, "fp32", True), (96, 24, 32, "fp32", False), (80, 24, 32, "fp32", False),
            (48, 24, 128, "fp16", False), (256, 24, 16, "fp16", True)]  # fmt: skip


@pytest.mark.parametrize(("K", "N", "block", "dtype", "symmetric"), GATHERED)
def test_gather_reads_the_matmulnbits_bytes_as_rows64_says(K: int, N: int, block: int, dtype: str,
                                                           symmetric: bool) -> None:  # fmt: skip
    """GatherBlockQuantized of the head's own bytes (``gather``) gives ``rows64``, bit for bit, in ONNX Runtime: its
    layout (zero points included) is MatMulNBits'. The same bytes feed the head's MatMulNBits: one copy stored.
    """  # noqa: D205
    fmt = WeightFormat.int4(dtype, block, 0, symmetric)
    weight = RNG.standard_normal((K, N)) / np.sqrt(K)  # the head [K, N]: its transpose the table
    g = GraphBuilder()
    head = fmt.store(g, "lm_head", weight)
    rows, logits = gather(g, head, "ids"), linear(g, "x", head)
    assert sum(n.op_type == "GatherBlockQuantized" and n.input[2] == "lm_head_scales" for n in g.nodes) == 1
    elem = DTYPES[dtype].onnx
    ids = np.array([[3, 0, N - 1, 3, 7]])
    graph = helper.make_graph(g.nodes, "t", [helper.make_tensor_value_info("ids", 7, [1, 5]),
                                             helper.make_tensor_value_info("x", elem, [1, K])],
                              [helper.make_tensor_value_info(rows, elem, None),
                               helper.make_tensor_value_info(logits, elem, None)], g.initializers)  # fmt: skip
    session = ort.InferenceSession(make_model(graph, 17, {}, {"com.microsoft": 1}).SerializeToString(),
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    got = session.run([rows], {"ids": ids, "x": np.zeros((1, K), DTYPES[dtype].np_dtype)})[0].astype(np.float64)
    want = fmt.rows64(weight)
    assert want.shape == (N, K) and np.array_equal(got, want[ids])
    assert np.array_equal(want, gathered64(fmt.pack(weight)))
    assert np.array_equal(want, round_once(fmt.read64(weight).T, dtype))  # the head's values, rounded to the dtype
    packed = fmt.pack(weight)  # another reading of the same bytes is seen: the zero points one off
    shifted = Packed(packed.weight, packed.scales, np.full_like(packed.scales, 0x77, np.uint8) if symmetric
                     else packed.zero_points ^ 0x11, K, block)  # fmt: skip
    assert not np.array_equal(got, gathered64(shifted)[ids])


# (fields, the field the SpecError names)
REFUSED = [
    ({"kind": "int8"}, "weight_format"),
    ({"kind": "int4", "dtype": "fp32", "block_size": 48}, "block_size"),
    ({"kind": "int4", "dtype": "fp32", "block_size": 8}, "block_size"),
    ({"kind": "int4", "dtype": "fp32", "block_size": 512}, "block_size"),
    ({"kind": "int4", "dtype": "fp32", "accuracy_level": 5}, "accuracy_level"),
    ({"kind": "int4", "dtype": "fp32", "accuracy_level": -1}, "accuracy_level"),
    ({"kind": "int4", "dtype": "fp32", "symmetric": "yes"}, "symmetric"),
    ({"kind": "int4", "dtype": "bf16"}, "dtype"),
    ({"kind": "fp32", "block_size": 32}, "block_size"),
    ({"kind": "fp16", "accuracy_level": 4}, "accuracy_level"),
    ({"kind": "fp32", "symmetric": False}, "symmetric"),
    ({"kind": "fp32", "dtype": "fp16"}, "weight_format"),
]


@pytest.mark.parametrize(("fields", "field"), REFUSED)
def test_bad_formats_name_the_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        WeightFormat(**fields)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_float_formats_are_as_before_and_int4_defaults_to_the_builders() -> None:
    assert WeightFormat("fp16") == WeightFormat("fp16", "fp16") and not WeightFormat("fp16").quantized
    made = WeightFormat.int4()
    assert (made.block_size, made.accuracy_level, made.symmetric, made.dtype) == (32, 0, True, "fp32")
    assert WeightFormat("int4", "fp16").block_size == 32  # 0: the default block size
    with pytest.raises(ValueError, match="pack"):
        made.stored(np.zeros((32, 4)))
