"""Hand-built models of GPT-J's rotary form as optimum's TorchScript export writes it (no optimum needed): one sin|cos
table [P, r] expanded to the batch, ``GatherElements`` on axis 1 by position_ids repeated to its width, split in two
halves (``Split``, or two ``Slice``), each widened by repeat_interleave (Unsqueeze, Unsqueeze, Tile, Reshape) and
multiplied into the query and the key of one layer, whose heads are split off a projection's output by a Reshape of
computed shape (rotate_every_two, the rest of each head concatenated back).

Shapes: hidden [1, s, H * D]; q, k [1, s, H, D]; the table [P, R] (R = rotary_dim, sin then cos, R / 2 each).
"""  # noqa: D205

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

P, H, D, R = 2048, 4, 16, 8
CONFIG = {"model_type": "gptj", "vocab_size": 64, "n_embd": H * D, "n_head": H, "n_layer": 1, "rotary_dim": R,
          "n_positions": P}  # fmt: skip


def write_config(folder: Path) -> Path:
    path = folder / "gptj.json"
    path.write_text(json.dumps(CONFIG))
    return path


def sincos(f32: bool = False, offset: int = 0) -> np.ndarray:
    """transformers' ``create_sinusoidal_positions``: sin | cos of positions x inv_freq, [P, R] float32; the angles
    in float32 as transformers computes them (``f32``), else in float64 rounded once; positions moved by ``offset``.
    """  # noqa: D205
    inv = 1.0 / (10000.0 ** (np.arange(0, R, 2, dtype=np.float64) / R))
    positions = np.arange(P, dtype=np.float64) + offset
    if f32:
        angles = np.outer(positions.astype(np.float32), inv.astype(np.float32)).astype(np.float64)
    else:
        angles = np.outer(positions, inv)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(np.float32)


def _c(name: str, *values: int) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(values, np.int64), name))


def _rotate(tag: str, x: str, halves: tuple[str, str]) -> list[onnx.NodeProto]:
    """x [1, s, H, D] rotated in its first R channels, interleaved (GPT-J's apply_rotary_pos_emb)."""
    sin, cos = halves
    return [
        helper.make_node("Slice", [x, "zero", "r", "three"], [f"{tag}_rot"]),
        helper.make_node("Slice", [x, "r", "d", "three"], [f"{tag}_pass"]),
        helper.make_node("Slice", [f"{tag}_rot", "zero", "r", "three", "two"], [f"{tag}_x1"]),  # x[..., ::2]
        helper.make_node("Slice", [f"{tag}_rot", "one", "r", "three", "two"], [f"{tag}_x2"]),  # x[..., 1::2]
        helper.make_node("Neg", [f"{tag}_x2"], [f"{tag}_minus_x2"]),
        helper.make_node("Unsqueeze", [f"{tag}_minus_x2", "last"], [f"{tag}_a"]),
        helper.make_node("Unsqueeze", [f"{tag}_x1", "last"], [f"{tag}_b"]),
        helper.make_node("Concat", [f"{tag}_a", f"{tag}_b"], [f"{tag}_stacked"], axis=-1),
        helper.make_node("Shape", [f"{tag}_rot"], [f"{tag}_rot_shape"]),
        helper.make_node("Reshape", [f"{tag}_stacked", f"{tag}_rot_shape"], [f"{tag}_every_two"]),
        helper.make_node("Mul", [f"{tag}_rot", cos], [f"{tag}_cos"]),
        helper.make_node("Mul", [f"{tag}_every_two", sin], [f"{tag}_sin"]),
        helper.make_node("Add", [f"{tag}_cos", f"{tag}_sin"], [f"{tag}_turned"]),
        helper.make_node("Concat", [f"{tag}_turned", f"{tag}_pass"], [f"{tag}_rotated"], axis=-1),
    ]


def split_table_model(path: Path, table: np.ndarray, slices: bool = False) -> Path:
    """The form (module doc) with ``table`` [P, R] stored; ``slices``: two Slice on the last axis instead of Split.
    The graph reads its first half as sin and its second as cos, as GPT-J does, whatever ``table`` holds.
    """  # noqa: D205
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal((H * D, H * D)) / 8).astype(np.float32), name)
               for name in ("wq", "wk")]  # fmt: skip
    consts = [_c("zero", 0), _c("one", 1), _c("r", R), _c("d", D), _c("three", 3), _c("two", 2), _c("last", -1),
              _c("batch_axis", 0), _c("heads", H, D), _c("row_repeat", 1, 1), _c("width_repeat", 1, 1, R),
              _c("pair_repeat", 1, 1, 1, 1, 2), _c("pair_shape", 1, -1, 1, R), _c("halves", R // 2, R // 2),
              _c("half", R // 2), _c("full", R), _c("axis2", 2)]  # fmt: skip
    table_node = helper.make_node("Constant", [], ["embed_positions"],
                                  value=numpy_helper.from_array(table.astype(np.float32), "embed_positions"))
    if slices:
        split = [helper.make_node("Slice", ["sincos", "zero", "half", "last"], ["sin_half"]),
                 helper.make_node("Slice", ["sincos", "half", "full", "last"], ["cos_half"])]  # fmt: skip
    else:
        split = [helper.make_node("Split", ["sincos", "halves"], ["sin_half", "cos_half"], axis=-1)]
    widen = []
    for name in ("sin", "cos"):  # repeat_interleave(x[:, :, None, :], 2, 3)
        widen += [helper.make_node("Unsqueeze", [f"{name}_half", "axis2"], [f"{name}_heads"]),
                  helper.make_node("Unsqueeze", [f"{name}_heads", "last"], [f"{name}_pairs"]),
                  helper.make_node("Tile", [f"{name}_pairs", "pair_repeat"], [f"{name}_tiled"]),
                  helper.make_node("Reshape", [f"{name}_tiled", "pair_shape"], [name])]  # fmt: skip
    heads = []
    for who in ("q", "k"):  # _split_heads: the projection's own size()[:-1] + (H, D)
        heads += [helper.make_node("MatMul", ["hidden", f"w{who}"], [f"{who}_flat"]),
                  helper.make_node("Shape", [f"{who}_flat"], [f"{who}_flat_shape"]),
                  helper.make_node("Slice", [f"{who}_flat_shape", "zero", "two"], [f"{who}_batch_seq"]),
                  helper.make_node("Concat", [f"{who}_batch_seq", "heads"], [f"{who}_shape"], axis=0),
                  helper.make_node("Reshape", [f"{who}_flat", f"{who}_shape"], [who])]  # fmt: skip
    nodes = [
        *consts,
        table_node,
        helper.make_node("Unsqueeze", ["embed_positions", "batch_axis"], ["table_1"]),  # [1, P, R]
        helper.make_node("Shape", ["position_ids"], ["ids_shape"]),
        helper.make_node("Slice", ["ids_shape", "zero", "one"], ["b"]),
        helper.make_node("Concat", ["b", "row_repeat"], ["table_repeat"], axis=0),
        helper.make_node("Tile", ["table_1", "table_repeat"], ["table_b"]),  # [b, P, R]
        helper.make_node("Unsqueeze", ["position_ids", "last"], ["ids_1"]),  # [b, s, 1]
        helper.make_node("Tile", ["ids_1", "width_repeat"], ["ids_r"]),  # [b, s, R]
        helper.make_node("GatherElements", ["table_b", "ids_r"], ["gathered"], axis=1),
        helper.make_node("Cast", ["gathered"], ["sincos"], to=TensorProto.FLOAT),
        *split,
        *widen,
        *heads,
        *_rotate("q", "q", ("sin", "cos")),
        *_rotate("k", "k", ("sin", "cos")),
        helper.make_node("Transpose", ["q_rotated"], ["q_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k_rotated"], ["k_t"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["q_t", "k_t"], ["scores"]),  # [1, H, s, s]: q on the left, k on the right
    ]
    inputs = [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, "s", H * D]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, "s"])]  # fmt: skip
    outputs = [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, H, "s", "s"])]
    graph = helper.make_graph(nodes, "gptj_split_table", inputs, outputs, weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@dataclass(frozen=True)
class SplitCase:
    """One hand-built model: its name, how it is built, the finding expected (None: exact)."""

    name: str
    build: Callable[[Path], Path]
    expected: str | None


CASES = [
    SplitCase("exact, Split", lambda p: split_table_model(p, sincos()), None),
    SplitCase("exact, two Slice", lambda p: split_table_model(p, sincos(), slices=True), None),
    SplitCase("float32 angles (transformers' own table)", lambda p: split_table_model(p, sincos(f32=True)),
              "float32 angles"),
    # the planted bug: the table stored cos | sin, read sin | cos as GPT-J's graph does
    SplitCase("sin|cos halves swapped", lambda p: split_table_model(p, np.roll(sincos(), R // 2, axis=1)),
              "cos and sin exchanged"),
    SplitCase("halves swapped, two Slice",
              lambda p: split_table_model(p, np.roll(sincos(), R // 2, axis=1), slices=True), "cos and sin exchanged"),
]
