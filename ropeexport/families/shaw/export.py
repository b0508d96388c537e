"""Shaw et al. 2018 relative position representations as ONNX graphs: the ``scores`` and ``attention`` artifacts.

Contract (positions int64, everything else in the spec dtype):
- ``scores``: query [b, heads, q_len, d], key [b, heads, k_len, d], query_position_ids [b, q_len], key_position_ids
  [b, k_len] -> scores [b, heads, q_len, k_len] = q_i . (k_j + a^K_r) / sqrt(d), -inf for j > i when causal;
- ``attention``: the same plus value [b, heads, k_len, d] -> output [b, heads, q_len, d]
  = sum_j softmax_j(e_ij) (v_j + a^V_r).
The metadata props name both position inputs and max_positions: runners reject positions outside [0, max_positions)
before running (the graph has no table indexed by absolute position, so nothing in it would fail by itself).

Nothing of size q_len x k_len x d is ever formed (the paper's section 3.3 makes the same point):
- key side: q . a^K_r for all R = 2k + 1 rows is one MatMul [b, h, q, d] x [d, R]; ``GatherElements`` then picks,
  for each pair, the row of its clipped distance r = clip(j - i, -k, k) (int64 [b, 1, q, n], computed from the ids);
- value side: the softmax weights are summed per clipped distance (``ScatterElements`` with reduction add, float32,
  [b, h, q, R]) and multiplied by a^V [R, d]: sum_r (sum_{j: r(i,j) = r} alpha_ij) a^V_r equals
  sum_j alpha_ij a^V_r(i,j). The sums run in float32 (ONNX Runtime has no fp16 add-scatter, and an fp16 running sum
  near 0.5 would drop weights below 1.2e-4).
Graph styles: ``attention`` fused (opset 23) is one ``Attention`` node with the key-side term as its additive
``attn_mask``; its softmax weights (``qk_matmul_output_mode`` 3) feed the value-side term, which no fused op can
carry. ``scores`` has no fused op that computes logits with a query-dependent relative term, so its fused graph is
the decomposed graph at opset 23. Decomposed (opset 17): MatMul / GatherElements / Softmax / ScatterElements.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from ropeexport.dtypes import DTYPES
from ropeexport.families.bias.export import KPOS, QPOS, pair_shape, unsqueeze
from ropeexport.families.shaw.reference import shaw_weights
from ropeexport.families.shaw.spec import ShawSpec
from ropeexport.forms import FORMS
from ropeexport.graph.onnx_io import GraphBuilder, artifact_metadata, make_model
from ropeexport.numerics import round_once

QK_SOFTMAX = 3  # Attention's qk_matmul_output_mode: its fourth output holds the softmax weights


def _rows(g: GraphBuilder, spec: ShawSpec) -> str:
    """Row of each pair in the R-row tables, clip(j - i, -k, k) + k, int64 expanded to [b, heads, q, n]."""
    distance = g.op("Sub", [unsqueeze(g, KPOS, [1, 2], "kpos_axes"), unsqueeze(g, QPOS, [1, 3], "qpos_axes")])
    k = spec.clip
    # Max/Min rather than Clip: Clip's int64 kernels are not in every runtime.
    clipped = g.op(
        "Min",
        [
            g.op("Max", [distance, g.const("minus_clip", np.array(-k, np.int64))]),
            g.const("clip", np.array(k, np.int64)),
        ],
    )
    rows = g.op("Add", [clipped, g.const("clip_offset", np.array(k, np.int64))])  # [b, 1, q, n]
    # GatherElements and ScatterElements take indices of the output's full shape.
    return g.op("Expand", [rows, pair_shape(g, spec.num_heads)], name="relative_rows")


def _key_term(g: GraphBuilder, spec: ShawSpec, rows: str) -> str:
    """q_i . a^K_r(i,j) for every pair, [b, heads, q, n], in the spec dtype."""
    key_table = round_once(shaw_weights(spec)["relative_key"], spec.dtype)  # [R, d]
    per_row = g.op("MatMul", ["query", g.const("relative_key_t", np.ascontiguousarray(key_table.T))])  # [b, h, q, R]
    return g.op("GatherElements", [per_row, rows], axis=3)


def _mask(g: GraphBuilder, spec: ShawSpec, x: str, name: str | None = None) -> str:
    """x with -inf where key j comes after query i (causal specs only)."""
    if not spec.causal:
        return g.op("Identity", [x], name=name) if name else x
    future = g.op("Greater", [unsqueeze(g, KPOS, [1, 2], "kmask_axes"), unsqueeze(g, QPOS, [1, 3], "qmask_axes")])
    # Shape [1], not a scalar: numerics.round_once fails on a 0-d -inf for bf16.
    minus_inf = g.const("minus_inf", round_once(np.array([-np.inf]), spec.dtype))
    return g.op("Where", [future, minus_inf, x], name=name)


def _scale(g: GraphBuilder, spec: ShawSpec) -> str:
    return g.const("scale", round_once(np.array(1.0 / math.sqrt(spec.head_dim)), spec.dtype))


def _scores(g: GraphBuilder, spec: ShawSpec, rows: str, name: str | None = None) -> str:
    """(q . k + q . a^K_r) / sqrt(d), masked: [b, heads, q, n]."""
    logits = g.op("MatMul", ["query", g.op("Transpose", ["key"], perm=[0, 1, 3, 2])])
    scores = g.op("Mul", [g.op("Add", [logits, _key_term(g, spec, rows)]), _scale(g, spec)])
    return _mask(g, spec, scores, name)


def _value_term(g: GraphBuilder, spec: ShawSpec, weights: str, rows: str) -> str:
    """sum_j alpha_ij a^V_r(i,j) = (weights summed per row r, float32 [b, h, q, R]) x a^V: [b, h, q, d] in dtype."""
    value_table = round_once(shaw_weights(spec)["relative_value"], spec.dtype).astype(np.float32)  # exact widening
    R = value_table.shape[0]
    per_row_shape = g.op(
        "Concat", [g.op("Shape", [rows], end=3), g.const("table_rows", np.array([R], np.int64))], axis=0
    )
    zeros = g.op("ConstantOfShape", [per_row_shape], value=helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0]))
    weights32 = g.op("Cast", [weights], to=TensorProto.FLOAT)
    per_row = g.op("ScatterElements", [zeros, rows, weights32], axis=3, reduction="add")
    term = g.op("MatMul", [per_row, g.const("relative_value", value_table)])
    return g.op("Cast", [term], to=DTYPES[spec.dtype].onnx)


def _io(name: str, dtype: int, dims: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, dims)


def _model(spec: ShawSpec, g: GraphBuilder, names: tuple[str, ...], output: onnx.ValueInfoProto) -> onnx.ModelProto:
    dtype, lengths = DTYPES[spec.dtype].onnx, {"query": "q_len", "key": "k_len", "value": "k_len"}
    inputs = [_io(n, dtype, ["batch", spec.num_heads, lengths[n], spec.head_dim]) for n in names]
    inputs += [_io(QPOS, TensorProto.INT64, ["batch", "q_len"]), _io(KPOS, TensorProto.INT64, ["batch", "k_len"])]
    graph = helper.make_graph(g.nodes, spec.name, inputs, [output], g.initializers)
    metadata = artifact_metadata(spec, [QPOS, KPOS])
    return make_model(graph, FORMS[spec.graph].opset, metadata)


def build_shaw_scores_graph(spec: ShawSpec) -> onnx.ModelProto:
    """The ``scores`` artifact (module docstring); fused and decomposed share this graph."""
    g = GraphBuilder()
    _scores(g, spec, _rows(g, spec), name="scores")
    out = _io("scores", DTYPES[spec.dtype].onnx, ["batch", spec.num_heads, "q_len", "k_len"])
    return _model(spec, g, ("query", "key"), out)


def build_shaw_attention_graph(spec: ShawSpec) -> onnx.ModelProto:
    """The ``attention`` artifact: fused through ONNX ``Attention`` plus the value-side term (module docstring)."""
    g = GraphBuilder()
    rows = _rows(g, spec)
    if spec.graph == "fused":
        # Attention adds attn_mask after its own scale, so the mask carries the key-side term already scaled.
        bias = _mask(g, spec, g.op("Mul", [_key_term(g, spec, rows), _scale(g, spec)]))
        content, _, _, weights = g.op(
            "Attention",
            ["query", "key", "value", bias],
            n_out=4,
            scale=1.0 / math.sqrt(spec.head_dim),
            qk_matmul_output_mode=QK_SOFTMAX,
        )
        g.nodes[-1].output[1] = g.nodes[-1].output[2] = ""  # no KV-cache outputs
    else:
        weights = g.op("Softmax", [_scores(g, spec, rows)], axis=-1)
        content = g.op("MatMul", [weights, "value"])
    g.op("Add", [content, _value_term(g, spec, weights, rows)], name="output")
    out = _io("output", DTYPES[spec.dtype].onnx, ["batch", spec.num_heads, "q_len", spec.head_dim])
    return _model(spec, g, ("query", "key", "value"), out)
