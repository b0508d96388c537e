"""Graphs for additive-bias methods: the ``bias``, ``scores`` and ``attention`` artifacts around a bias subgraph.

Contract (positions int64; everything else in the spec dtype):
- ``bias``: query_position_ids [b, q_len], key_position_ids [b, k_len] -> attention_bias [b, heads, q_len, k_len];
- ``scores``: query [b, heads, q_len, d], key [b, heads, k_len, d] + the position ids -> scores [b, heads, q, k];
- ``attention``: query, key, value [b, heads, k_len, d] + the position ids -> output [b, heads, q_len, d]. The fused
  graph is one opset-23 ``Attention`` node with the bias as its additive ``attn_mask``; the decomposed one is
  MatMul / Softmax / MatMul at opset 17.
A method supplies ``BiasFn(g, spec, qpos, kpos) -> name`` of a float32 tensor broadcastable to [b, heads, q, k];
this module clamps it to the dtype's finite range, rounds it once, and applies the causal mask (-inf for j > i).
That is four passes over [b, heads, q, k] (Max, Cast, Expand, Where). A method may also supply a ``SinglePassFn``
that returns the finished, masked bias in one pass when it can prove the result identical (ALiBi in fp32: the
clamp cannot act and the mask can go on the small [b, 1, q, k] distance), or None to take the general path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from ropeexport.dtypes import DTYPES
from ropeexport.forms import FORMS
from ropeexport.graph.onnx_io import GraphBuilder, artifact_metadata, make_model
from ropeexport.numerics import round_once
from ropeexport.recipes import KPOS, QPOS

BiasFn = Callable[[GraphBuilder, Any, str, str], str]
SinglePassFn = Callable[[GraphBuilder, Any, str, str], "str | None"]


def unsqueeze(g: GraphBuilder, x: str, axes: list[int], name: str) -> str:
    """Unsqueeze with a constant axes input."""
    return g.op("Unsqueeze", [x, g.const(name, np.array(axes, np.int64))])


def position_grid(g: GraphBuilder) -> tuple[str, str]:
    """float32 query positions [b, 1, q, 1] and key positions [b, 1, 1, k] (exact up to 2^24)."""
    q = unsqueeze(g, g.op("Cast", [QPOS], to=TensorProto.FLOAT), [1, 3], "qpos_axes")
    k = unsqueeze(g, g.op("Cast", [KPOS], to=TensorProto.FLOAT), [1, 2], "kpos_axes")
    return q, k


def pair_shape(g: GraphBuilder, heads: int) -> str:
    """[b, heads, q_len, k_len] as an int64 shape, from the position inputs."""
    return g.op(
        "Concat",
        [
            g.op("Shape", [QPOS], end=1),
            g.const("heads", np.array([heads], np.int64)),
            g.op("Shape", [QPOS], start=1),
            g.op("Shape", [KPOS], start=1),
        ],
        axis=0,
    )


def causal_future(g: GraphBuilder) -> str:
    """bool [b, 1, q, k]: key j comes after query i (the causal mask's -inf entries)."""
    return g.op("Greater", [unsqueeze(g, KPOS, [1, 2], "kmask_axes"), unsqueeze(g, QPOS, [1, 3], "qmask_axes")])


def _bias(g: GraphBuilder, spec: Any, bias_fn: BiasFn, single_pass: SinglePassFn | None = None) -> str:
    if single_pass is not None:
        done = single_pass(g, spec, QPOS, KPOS)
        if done is not None:
            return done
    raw = bias_fn(g, spec, QPOS, KPOS)  # float32, broadcastable to [b, h, q, k]
    clamped = g.op("Max", [raw, g.const("finite_min", np.array(DTYPES[spec.dtype].finite_min, np.float32))])
    bias = g.op("Cast", [clamped], to=DTYPES[spec.dtype].onnx)
    # Expand to [b, h, q, k] so the output has the contract's shape even when the method's bias broadcasts.
    bias = g.op("Expand", [bias, pair_shape(g, spec.num_heads)])
    if not spec.causal:
        return bias
    future = causal_future(g)
    minus_inf = g.const("minus_inf", round_once(np.array(-np.inf), spec.dtype))
    return g.op("Where", [future, minus_inf, bias])


def _io(name: str, dtype: int, dims: list[Any]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, dims)


def _model(
    spec: Any, g: GraphBuilder, inputs: list[onnx.ValueInfoProto], output: onnx.ValueInfoProto
) -> onnx.ModelProto:
    graph = helper.make_graph(g.nodes, spec.name, inputs, [output], g.initializers)
    metadata = artifact_metadata(spec, [QPOS, KPOS])
    return make_model(graph, FORMS[spec.graph].opset, metadata)


def _positions() -> list[onnx.ValueInfoProto]:
    return [_io(QPOS, TensorProto.INT64, ["batch", "q_len"]), _io(KPOS, TensorProto.INT64, ["batch", "k_len"])]


def _qkv(spec: Any, names: tuple[str, ...]) -> list[onnx.ValueInfoProto]:
    lengths = {"query": "q_len", "key": "k_len", "value": "k_len"}
    return [_io(n, DTYPES[spec.dtype].onnx, ["batch", spec.num_heads, lengths[n], spec.head_dim]) for n in names]


def build_bias_graph(spec: Any, bias_fn: BiasFn, single_pass: SinglePassFn | None = None) -> onnx.ModelProto:
    """The ``bias`` artifact."""
    g = GraphBuilder()
    g.name_output(_bias(g, spec, bias_fn, single_pass), "attention_bias")
    out = _io("attention_bias", DTYPES[spec.dtype].onnx, ["batch", spec.num_heads, "q_len", "k_len"])
    return _model(spec, g, _positions(), out)


def _scaled_logits(g: GraphBuilder, spec: Any) -> str:
    logits = g.op("MatMul", ["query", g.op("Transpose", ["key"], perm=[0, 1, 3, 2])])
    return g.op("Mul", [logits, g.const("scale", round_once(np.array(1.0 / math.sqrt(spec.head_dim)), spec.dtype))])


def build_scores_graph(spec: Any, bias_fn: BiasFn, single_pass: SinglePassFn | None = None) -> onnx.ModelProto:
    """The ``scores`` artifact: q . k / sqrt(d) + bias."""
    g = GraphBuilder()
    g.op("Add", [_scaled_logits(g, spec), _bias(g, spec, bias_fn, single_pass)], name="scores")
    out = _io("scores", DTYPES[spec.dtype].onnx, ["batch", spec.num_heads, "q_len", "k_len"])
    return _model(spec, g, _qkv(spec, ("query", "key")) + _positions(), out)


def build_attention_graph(spec: Any, bias_fn: BiasFn, single_pass: SinglePassFn | None = None) -> onnx.ModelProto:
    """The ``attention`` artifact: softmax(q . k / sqrt(d) + bias) . v."""
    g = GraphBuilder()
    bias = _bias(g, spec, bias_fn, single_pass)
    if spec.graph == "fused":
        g.op("Attention", ["query", "key", "value", bias], name="output", scale=1.0 / math.sqrt(spec.head_dim))
    else:
        weights = g.op("Softmax", [g.op("Add", [_scaled_logits(g, spec), bias])], axis=-1)
        g.op("MatMul", [weights, "value"], name="output")
    out = _io("output", DTYPES[spec.dtype].onnx, ["batch", spec.num_heads, "q_len", spec.head_dim])
    return _model(spec, g, _qkv(spec, ("query", "key", "value")) + _positions(), out)
