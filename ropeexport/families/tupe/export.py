"""TUPE (Ke et al. 2021) as an ONNX graph: the ``scores`` artifact.

Contract: query [b, heads, q_len, d], key [b, heads, k_len, d] (spec dtype), query_position_ids [b, q_len],
key_position_ids [b, k_len] (int64) -> scores [b, heads, q_len, k_len]
= q . k / sqrt(2d) + (p_i U^Q_h) . (p_j U^K_h) / sqrt(2d) + b_h(bucket(j - i)), -inf for j > i when causal.

Stored: ``pos_query_table`` and ``pos_key_table`` [max_positions, heads * d] (p U^Q and p U^K, float64 products
rounded once to the dtype), ``relative_bias`` [num_buckets, heads] (the learned bias, rounded once), and
``bucket_map`` int64 [2S + 1] (the T5 bucket of each relative position clipped to [-S, S], S = min(max_distance,
max_positions - 1): past max_distance the bucket no longer changes, so the map is exact and small).

Graph:
- rows: position ids outside [0, max_positions) are replaced by max_positions, one past the table, so the ``Gather``
  fails at run time (ONNX ``Gather`` would otherwise wrap -1 to the last row); runners also reject them beforehand
  from the metadata props;
- untied term: Gather rows [b, q, heads * d] -> [b, heads, q, d] (and [b, heads, d, k] for keys), one MatMul in
  float32, times 1/sqrt(2d);
- relative bias: j - i clipped to [-S, S] -> bucket (Gather in ``bucket_map``) -> b (Gather in ``relative_bias``);
- the positional part is summed in float32, clamped to the dtype's finite range, rounded once, and added to the
  content term q . k times 1/sqrt(2d) (TUPE's own scale: the paper's eq. 7).
No fused ONNX op computes these logits: the fused graph (opset 23) is the decomposed graph (opset 17) at opset 23.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from ropeexport.dtypes import DTYPES
from ropeexport.families.bias.export import KPOS, QPOS, unsqueeze
from ropeexport.families.tupe.reference import bucket_map, bucket_span, tupe_tables, tupe_weights
from ropeexport.families.tupe.spec import TupeSpec
from ropeexport.forms import FORMS
from ropeexport.graph.onnx_io import GraphBuilder, artifact_metadata, make_model
from ropeexport.numerics import round_once

I64 = np.int64


def _rows(g: GraphBuilder, spec: TupeSpec, pos: str) -> str:
    """Table rows for ``pos`` [b, s]: the position itself, or max_positions (past the table) when out of range."""
    P = spec.max_positions
    below = g.op("Less", [pos, g.const(f"{pos}_zero", np.array(0, I64))])
    beyond = g.op("Not", [g.op("Less", [pos, g.const(f"{pos}_max_positions", np.array(P, I64))])])
    bad = g.op("Or", [below, beyond])
    return g.op("Where", [bad, g.const(f"{pos}_past_table", np.array(P, I64)), pos], name=f"{pos}_rows")


def _projected(g: GraphBuilder, spec: TupeSpec, table: str, pos: str, perm: list[int]) -> str:
    """p U of each position, float32, [b, s, heads * d] -> [b, s, heads, d] transposed by ``perm``."""
    rows = g.op("Gather", [table, _rows(g, spec, pos)], axis=0)  # [b, s, heads * d]
    rows = g.op("Cast", [rows], to=TensorProto.FLOAT)
    heads = g.op("Reshape", [rows, g.const(f"{pos}_heads_shape", np.array([0, 0, spec.num_heads, spec.head_dim], I64))])
    return g.op("Transpose", [heads], perm=perm)


def _positional(g: GraphBuilder, spec: TupeSpec) -> str:
    """float32 (p_i U^Q_h) . (p_j U^K_h) / sqrt(2d) + b_h(bucket(j - i)), [b, heads, q, k]."""
    q_table, k_table = (round_once(t, spec.dtype) for t in tupe_tables(spec))
    pq = _projected(g, spec, g.const("pos_query_table", q_table), QPOS, [0, 2, 1, 3])  # [b, h, q, d]
    pk = _projected(g, spec, g.const("pos_key_table", k_table), KPOS, [0, 2, 3, 1])  # [b, h, d, k]
    scale = g.const("untied_scale", np.array(1.0 / math.sqrt(2 * spec.head_dim), np.float32))
    untied = g.op("Mul", [g.op("MatMul", [pq, pk]), scale])

    S = bucket_span(spec)
    distance = g.op("Sub", [unsqueeze(g, KPOS, [1], "kpos_axes"), unsqueeze(g, QPOS, [2], "qpos_axes")])  # [b, q, k]
    clipped = g.op(
        "Min", [g.op("Max", [distance, g.const("minus_span", np.array(-S, I64))]), g.const("span", np.array(S, I64))]
    )
    index = g.op("Add", [clipped, g.const("span_offset", np.array(S, I64))])
    buckets = g.op("Gather", [g.const("bucket_map", bucket_map(spec)), index], axis=0)  # [b, q, k]
    bias_table = g.const("relative_bias", round_once(tupe_weights(spec)["relative_bias"], spec.dtype))
    relative = g.op("Gather", [g.op("Cast", [bias_table], to=TensorProto.FLOAT), buckets], axis=0)  # [b, q, k, h]
    return g.op("Add", [untied, g.op("Transpose", [relative], perm=[0, 3, 1, 2])])


def _io(name: str, dtype: int, dims: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, dims)


def build_tupe_scores_graph(spec: TupeSpec) -> onnx.ModelProto:
    """The ``scores`` artifact (module docstring)."""
    g = GraphBuilder()
    dtype = DTYPES[spec.dtype].onnx
    logits = g.op("MatMul", ["query", g.op("Transpose", ["key"], perm=[0, 1, 3, 2])])
    scale = g.const("scale", round_once(np.array(1.0 / math.sqrt(2 * spec.head_dim)), spec.dtype))
    clamped = g.op(
        "Max", [_positional(g, spec), g.const("finite_min", np.array(DTYPES[spec.dtype].finite_min, np.float32))]
    )
    scores = g.op("Add", [g.op("Mul", [logits, scale]), g.op("Cast", [clamped], to=dtype)])
    if spec.causal:
        future = g.op("Greater", [unsqueeze(g, KPOS, [1, 2], "kmask_axes"), unsqueeze(g, QPOS, [1, 3], "qmask_axes")])
        # Shape [1], not a scalar: numerics.round_once fails on a 0-d -inf for bf16.
        minus_inf = g.const("minus_inf", round_once(np.array([-np.inf]), spec.dtype))
        g.op("Where", [future, minus_inf, scores], name="scores")
    else:
        g.op("Identity", [scores], name="scores")
    H, d = spec.num_heads, spec.head_dim
    inputs = [
        _io("query", dtype, ["batch", H, "q_len", d]),
        _io("key", dtype, ["batch", H, "k_len", d]),
        _io(QPOS, TensorProto.INT64, ["batch", "q_len"]),
        _io(KPOS, TensorProto.INT64, ["batch", "k_len"]),
    ]
    graph = helper.make_graph(
        g.nodes, spec.name, inputs, [_io("scores", dtype, ["batch", H, "q_len", "k_len"])], g.initializers
    )
    metadata = artifact_metadata(spec, [QPOS, KPOS])
    return make_model(graph, FORMS[spec.graph].opset, metadata)
