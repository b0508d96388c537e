"""Transformer-XL relative attention logits (Dai et al. 2019) as an ONNX graph: the ``scores`` artifact.

Contract: inputs ``query`` [batch, num_heads, q_len, head_dim], ``key`` [batch, num_heads, k_len, head_dim] (spec
dtype), ``query_position_ids`` int64 [batch, q_len], ``key_position_ids`` int64 [batch, k_len]; output ``scores``
[batch, num_heads, q_len, k_len] = ((q + u) . k + (q + v) . W_R R_(i-j)) / sqrt(head_dim), -inf for keys after the
query when causal.

Initializers: ``r_w_bias`` (u) and ``r_r_bias`` (v) [num_heads, head_dim], rounded once; ``r_head_table``
[table_rows, num_heads, head_dim], W_R R_d for every accepted distance, computed in float64 and rounded once (row
r holds distance r - offset; see ``families.transformer_xl.spec``). Per call the graph:
1. takes distances i - j [b, q, k] (clamped at 0 when causal: future keys are masked anyway), and their range
   [lo, hi] over the call;
2. gathers table rows lo .. hi only, and multiplies (q + v) [b, h, q, d] by them: BD for every distance present,
   [b, h, q, hi - lo + 1], which is the original's BD before its ``_rel_shift``;
3. picks each (i, j)'s column (what ``_rel_shift`` does for contiguous positions, here for any position ids), adds
   AC = (q + u) . k, scales, masks.
Per call the work grows with q_len times the span of distances present (q_len + k_len - 1 for contiguous positions),
not with the table's size.

Bad positions: if any position lies outside [0, max_positions), a guard Gather (index 1 into a one-element table,
see ``_table_rows``) fails the call before the table is read, instead of returning logits from a wrong or clamped
row (runners also reject such feeds first, from the metadata). No fused ONNX op computes these logits (opset 23
``Attention`` returns softmax(...) . V), so the fused (opset 23) and decomposed (opset 17) styles share this graph.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from ropeexport.dtypes import DTYPES
from ropeexport.families.transformer_xl.reference import relative_table, stored_weights
from ropeexport.families.transformer_xl.spec import TransformerXLSpec
from ropeexport.forms import FORMS
from ropeexport.graph.onnx_io import GraphBuilder, artifact_metadata, make_model
from ropeexport.numerics import round_once
from ropeexport.recipes import KPOS, QPOS


def _i64(*values: int) -> np.ndarray:
    return np.array(values if len(values) != 1 else values[0], np.int64)


def _bad_count(g: GraphBuilder, spec: TransformerXLSpec, pos: str) -> str:
    """How many entries of ``pos`` lie outside [0, max_positions), a scalar int64."""
    below = g.op("Less", [pos, g.const(f"{pos}_zero", _i64(0))])
    beyond = g.op("Not", [g.op("Less", [pos, g.const(f"{pos}_max_positions", _i64(spec.max_positions))])])
    return g.op("ReduceSum", [g.op("Cast", [g.op("Or", [below, beyond])], to=TensorProto.INT64)], keepdims=0)


def _table_rows(g: GraphBuilder, spec: TransformerXLSpec, lo: str, hi: str) -> str:
    """Row indices lo + offset .. hi + offset [n_rel], behind a guard that fails the call on a bad position.

    The guard is its own Gather from a one-element table at index 0, or 1 when any position is outside [0,
    max_positions); its (zero) result feeds the row range, so it runs before anything reads the table. Pushing the
    range itself past the table is not enough: ONNX Runtime rewrites Gather(table, Range(a, b)) into a Slice, and a
    Slice clamps out-of-range bounds to an empty result instead of failing.
    """
    bad_count = g.op("Add", [_bad_count(g, spec, QPOS), _bad_count(g, spec, KPOS)])
    bad = g.op("Cast", [g.op("Greater", [bad_count, g.const("zero", _i64(0))])], to=TensorProto.INT64)
    guard = g.op("Gather", [g.const("position_guard", _i64(0)[None]), bad], axis=0, name="position_guard_check")
    offset = g.op("Add", [g.const("distance_offset", _i64(spec.distance_offset)), guard])  # the offset, once checked
    first = g.op("Add", [lo, offset])
    stop = g.op("Add", [g.op("Add", [hi, offset]), g.const("one", _i64(1))])
    return g.op("Range", [first, stop, g.const("step", _i64(1))], name="table_rows")


def _pick_columns(g: GraphBuilder, bd_all: str, column: str) -> str:
    """bd[b, h, i, j] = bd_all[b, h, i, column[b, i, j]]: bd_all [b, H, q, n], column [b, q, k] -> [b, H, q, k].

    A Gather on the flattened tensor rather than GatherElements: onnx.reference implements GatherElements with
    numpy.choose, which refuses more than 64 columns, and this graph must run on both evaluators.
    """
    scalar = g.const("scalar_shape", np.zeros(0, np.int64))  # the shape of a scalar
    n = g.op("Reshape", [g.op("Shape", [bd_all], start=3), scalar])  # columns of bd_all, a scalar
    starts = g.op("Range", [g.const("flat_zero", _i64(0)), g.op("Size", [bd_all]), n])  # [b * H * q]: row starts
    row_shape = g.op("Concat", [g.op("Shape", [bd_all], end=3), g.const("one_column", _i64(1)[None])], axis=0)
    starts = g.op("Reshape", [starts, row_shape])  # [b, H, q, 1]
    column = g.op("Unsqueeze", [column, g.const("head_axis", _i64(1))])  # [b, 1, q, k]
    flat = g.op("Reshape", [bd_all, g.const("flat_shape", _i64(-1)[None])])  # [b * H * q * n]
    return g.op("Gather", [flat, g.op("Add", [starts, column])], axis=0, name="bd")  # [b, H, q, k]


def _io(name: str, dtype: int, dims: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, dims)


def build_transformer_xl_scores_graph(spec: TransformerXLSpec) -> onnx.ModelProto:
    """The ``scores`` artifact (contract and steps in the module docstring)."""
    g = GraphBuilder()
    H, d, dtype = spec.num_heads, spec.head_dim, DTYPES[spec.dtype].onnx
    weights = stored_weights(spec)  # float64 holding dtype values: this round_once is exact
    u = g.const("r_w_bias", round_once(weights["r_w_bias"], spec.dtype))  # [H, d]
    v = g.const("r_r_bias", round_once(weights["r_r_bias"], spec.dtype))  # [H, d]
    table = g.const("r_head_table", relative_table(spec))  # [rows, H, d]
    bias_shape = g.const("bias_shape", _i64(H, 1, d))  # [H, 1, d] broadcasts over [b, H, len, d]

    distance = g.op(
        "Sub",
        [
            g.op("Unsqueeze", [QPOS, g.const("qpos_axes", _i64(2))]),  # [b, q, 1]
            g.op("Unsqueeze", [KPOS, g.const("kpos_axes", _i64(1))]),  # [b, 1, k]
        ],
        name="distance",
    )  # i - j, [b, q, k]
    clamped = g.op("Max", [distance, g.const("zero_distance", _i64(0))]) if spec.causal else distance
    lo = g.op("ReduceMin", [clamped], keepdims=0, name="distance_lo")
    hi = g.op("ReduceMax", [clamped], keepdims=0, name="distance_hi")
    rel = g.op("Gather", [table, _table_rows(g, spec, lo, hi)], axis=0, name="r_head_k")  # [n_rel, H, d]

    rr_q = g.op("Add", ["query", g.op("Reshape", [v, bias_shape])], name="rr_head_q")  # q + v, [b, H, q, d]
    bd_all = g.op("MatMul", [rr_q, g.op("Transpose", [rel], perm=[1, 2, 0])], name="bd_all")  # [b, H, q, n_rel]
    bd = _pick_columns(g, bd_all, g.op("Sub", [clamped, lo]))  # [b, H, q, k]

    rw_q = g.op("Add", ["query", g.op("Reshape", [u, bias_shape])], name="rw_head_q")  # q + u
    ac = g.op("MatMul", [rw_q, g.op("Transpose", ["key"], perm=[0, 1, 3, 2])], name="ac")  # [b, H, q, k]
    # As the original: (AC + BD) * scale, the scale 1/sqrt(head_dim) rounded once to the dtype.
    scale = g.const("scale", round_once(np.array(1.0 / math.sqrt(d)), spec.dtype))
    scaled = g.op("Mul", [g.op("Add", [ac, bd]), scale], name=None if spec.causal else "scores")
    if spec.causal:
        future = g.op("Less", [distance, g.const("no_distance", _i64(0))])  # key after query, [b, q, k]
        future = g.op("Unsqueeze", [future, g.const("mask_head_axis", _i64(1))])  # [b, 1, q, k]
        # Rounded as a 1-element array: numerics.round_once fails on a 0-d infinity in bf16 (a shared-code bug).
        minus_inf = g.const("minus_inf", round_once(np.array([-np.inf]), spec.dtype).reshape(()))
        g.op("Where", [future, minus_inf, scaled], name="scores")

    graph = helper.make_graph(
        g.nodes,
        spec.name,
        [
            _io("query", dtype, ["batch", H, "q_len", d]),
            _io("key", dtype, ["batch", H, "k_len", d]),
            _io(QPOS, TensorProto.INT64, ["batch", "q_len"]),
            _io(KPOS, TensorProto.INT64, ["batch", "k_len"]),
        ],
        [_io("scores", dtype, ["batch", H, "q_len", "k_len"])],
        g.initializers,
    )
    metadata = artifact_metadata(spec, [QPOS, KPOS])
    return make_model(graph, FORMS[spec.graph].opset, metadata)
