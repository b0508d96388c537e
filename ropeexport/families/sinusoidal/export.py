"""Sinusoidal position encoding (Vaswani et al. 2017) as ONNX graphs: the ``apply`` and ``scores`` artifacts.

Contracts (positions int64; everything else in the spec dtype):
- ``apply``: x [batch, seq, d_model], position_ids [batch, seq] -> y [batch, seq, d_model],
  y = x (* sqrt(d_model) with scale_input) + PE[position_ids];
- ``scores``: query [batch, num_heads, q_len, head_dim], key [batch, num_heads, k_len, head_dim],
  query_position_ids [batch, q_len], key_position_ids [batch, k_len] -> scores [batch, num_heads, q_len, k_len],
  scores = (q + PE[query_position_ids]) . (k + PE[key_position_ids]) / sqrt(head_dim).

The table is one initializer ``pe_table`` [max_positions, width], computed in float64 and rounded once
(``families.sinusoidal.reference.stored_table``). No fused ONNX op computes an absolute additive encoding, so the fused
(opset 23) and decomposed (opset 17) styles are the same Gather / Mul / Add / MatMul graph under their two opsets.
Positions outside [0, max_positions) are mapped to row max_positions, past the table, so the Gather itself fails at
run time: ONNX ``Gather`` would otherwise wrap a negative index to the end of the table.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from ropeexport.dtypes import DTYPES
from ropeexport.families.sinusoidal.reference import input_scale, stored_table
from ropeexport.families.sinusoidal.spec import SinusoidalSpec
from ropeexport.forms import FORMS
from ropeexport.graph.onnx_io import GraphBuilder, artifact_metadata, make_model
from ropeexport.numerics import round_once
from ropeexport.recipes import KPOS, QPOS


def _rows(g: GraphBuilder, spec: SinusoidalSpec, pos: str) -> str:
    """Table rows for ``pos``: the position itself, or max_positions (past the table) where it is invalid."""
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    below = g.op("Less", [pos, g.const(f"{pos}_zero", i64(0))])
    beyond = g.op("Not", [g.op("Less", [pos, g.const(f"{pos}_max_positions", i64(spec.max_positions))])])
    bad = g.op("Or", [below, beyond])
    return g.op("Where", [bad, g.const(f"{pos}_past_table", i64(spec.max_positions)), pos], name=f"{pos}_rows")


def _io(name: str, dtype: int, dims: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, dims)


def _model(
    spec: SinusoidalSpec,
    g: GraphBuilder,
    inputs: list[onnx.ValueInfoProto],
    output: onnx.ValueInfoProto,
    positions: list[str],
) -> onnx.ModelProto:
    graph = helper.make_graph(g.nodes, spec.name, inputs, [output], g.initializers)
    metadata = artifact_metadata(spec, positions)
    return make_model(graph, FORMS[spec.graph].opset, metadata)


def build_apply_graph(spec: SinusoidalSpec) -> onnx.ModelProto:
    """The ``apply`` artifact: y = x (* sqrt(d_model)) + PE[position_ids] (contract in the module docstring)."""
    g = GraphBuilder()
    table = g.const("pe_table", stored_table(spec))  # [P, d_model]
    pe = g.op("Gather", [table, _rows(g, spec, "position_ids")], name="pe")  # [b, s, d_model]
    x = "x"
    if spec.scale_input:
        # sqrt(d_model) rounded once to the dtype; x * scale rounds once in the dtype, as in the eager module.
        x = g.op("Mul", [x, g.const("input_scale", input_scale(spec))], name="x_scaled")
    g.op("Add", [x, pe], name="y")
    dtype, d = DTYPES[spec.dtype].onnx, spec.d_model
    inputs = [_io("x", dtype, ["batch", "seq", d]), _io("position_ids", TensorProto.INT64, ["batch", "seq"])]
    return _model(spec, g, inputs, _io("y", dtype, ["batch", "seq", d]), ["position_ids"])


def build_scores_graph(spec: SinusoidalSpec) -> onnx.ModelProto:
    """The ``scores`` artifact: (q + PE_i) . (k + PE_j) / sqrt(head_dim) for every query i and key j."""
    g = GraphBuilder()
    table = g.const("pe_table", stored_table(spec))  # [P, head_dim]
    head_axis = g.const("head_axis", np.array([1], np.int64))
    shifted = {}
    for x, pos in (("query", QPOS), ("key", KPOS)):
        pe = g.op("Gather", [table, _rows(g, spec, pos)], name=f"{x}_pe")  # [b, len, head_dim]
        # The same head_dim-wide row is added to every head: [b, 1, len, head_dim] broadcasts over heads.
        shifted[x] = g.op("Add", [x, g.op("Unsqueeze", [pe, head_axis])], name=f"{x}_encoded")
    logits = g.op("MatMul", [shifted["query"], g.op("Transpose", [shifted["key"]], perm=[0, 1, 3, 2])])
    scale = g.const("scale", round_once(np.array(1.0 / math.sqrt(spec.head_dim)), spec.dtype))
    g.op("Mul", [logits, scale], name="scores")
    dtype, H, d = DTYPES[spec.dtype].onnx, spec.num_heads, spec.head_dim
    inputs = [
        _io("query", dtype, ["batch", H, "q_len", d]),
        _io("key", dtype, ["batch", H, "k_len", d]),
        _io(QPOS, TensorProto.INT64, ["batch", "q_len"]),
        _io(KPOS, TensorProto.INT64, ["batch", "k_len"]),
    ]
    return _model(spec, g, inputs, _io("scores", dtype, ["batch", H, "q_len", "k_len"]), [QPOS, KPOS])
