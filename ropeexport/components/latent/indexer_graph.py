"""The indexer's graph piece: the selection a latent-attention layer's mask is narrowed to (``indexer`` module doc).

Called inside ``components.latent.graph`` with the layer's names: ``hidden`` [b, s, n], the query LoRA's normed
output [b, s, q_lora_rank] (the ``lora`` query), ``position_ids`` [b, s], ``past_index_key`` [b, 1, p, D] and the
attention's visibility [b, 1, s, t] (causal and padding). It returns the selection bool [b, 1, s, t] and the grown
key cache ``present_index_key`` [b, 1, t, D].

The scores are computed in float32 whatever the dtype (transformers' ``q.float()``, its ``weights_proj`` kept in
float32): the projections' products are cast up before the dot products, ``weights_proj`` (stored in the dtype)
cast up before it multiplies. The
selection is ``TopK`` over the masked scores with K = min(topk, t) (t read from the cache, so a decode step's
K grows with the cache until it reaches topk), its indices scattered into zeros; ONNX's ``TopK`` takes equal
scores in ascending key order, as the twin does (``indexer64``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from onnx import TensorProto, helper

from ropeexport.components.latent.indexer import INDEXER_NORM_EPS, IndexerSpec
from ropeexport.components.linear import WeightFormat, is_weight, linear
from ropeexport.components.norm import NormSpec, norm
from ropeexport.dtypes import DTYPES
from ropeexport.graph.compose import call
from ropeexport.graph.onnx_io import GraphBuilder
from ropeexport.numerics import round_once


def _i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def store_indexer(g: GraphBuilder, spec: IndexerSpec, weights: Mapping[str, np.ndarray], fmt: WeightFormat,
                  dtype: str) -> dict[str, str]:  # fmt: skip
    """The indexer's weights as initializers (``indexer/`` names): ``wq_b`` and ``wk`` by the layer's weight format
    (``linear.is_weight``), the rest rounded once to the dtype: the norms' weights and biases, Large 4's factors and
    ``weights_proj`` (never int4: it weighs the scores that select; the scores computed in float32 from it, as
    transformers keeps it in float32). Returns {canonical name: value name}.
    """  # noqa: D205
    out = {}
    for name, w in weights.items():
        if is_weight(f"indexer.{name}"):
            out[name] = fmt.store(g, f"indexer/{name}", w)
        else:
            out[name] = g.const(f"indexer/{name}", round_once(w, dtype))
    return out


def selection(g: GraphBuilder, spec: IndexerSpec, stored: Mapping[str, str], q_source: str | None, visible: str,
              dtype: str, opset: int) -> tuple[str, str]:  # fmt: skip
    """(selected bool [b, 1, s, t], present_index_key [b, 1, t, D]) for the layer's names (module doc)."""
    H, D, rope = spec.num_heads, spec.head_dim, spec.rope_dim
    wide = lambda x: x if dtype == "fp32" else g.op("Cast", [x], to=TensorProto.FLOAT)  # noqa: E731
    layer = NormSpec("layer", INDEXER_NORM_EPS, dtype)
    if spec.query == "hidden":
        q_source = norm(g, layer, "hidden", stored["q_norm"], stored["q_norm_bias"], opset)
    assert q_source is not None, "the lora query reads the query LoRA's normed output"
    q = linear(g, q_source, stored["wq_b"])  # [b, s, H D]
    q = g.op("Reshape", [q, g.const("indexer/q_heads_shape", _i64(0, 0, H, D))])
    q = g.op("Transpose", [q], perm=[0, 2, 1, 3])  # [b, H, s, D]
    if spec.log_scale:  # q_scale[h] * log(p + 1) + q_bias[h], log in float32 (transformers' .float().log())
        plus = g.op("Add", ["position_ids", g.const("indexer/one", np.array(1, np.int64))])
        log = g.op("Log", [g.op("Cast", [plus], to=TensorProto.FLOAT)])  # [b, s]
        if dtype != "fp32":
            log = g.op("Cast", [log], to=DTYPES[dtype].onnx)
        log = g.op("Unsqueeze", [log, g.const("indexer/log_axes", _i64(1, 3))])  # [b, 1, s, 1]
        per_head = g.const("indexer/head_axis_shape", _i64(1, H, 1, 1))
        scale = g.op("Reshape", [stored["q_scale"], per_head])
        bias = g.op("Reshape", [stored["q_bias"], per_head])
        q = g.op("Mul", [q, g.op("Add", [g.op("Mul", [scale, log]), bias])])
    k = norm(g, layer, linear(g, "hidden", stored["wk"]), stored["k_norm"], stored["k_norm_bias"], opset)
    k = g.op("Unsqueeze", [k, g.const("indexer/one_head_axis", _i64(1))])  # [b, 1, s, D]
    if spec.position is not None:
        rotary = spec.position.rotary
        if D > rope:  # the rotated dims first, the rest passed through (transformers' q_rot, q_pass order)
            widths = g.const("indexer/rope_split", _i64(rope, D - rope))
            q_rot, q_pass = g.op("Split", [q, widths], n_out=2, axis=-1)
            k_rot, k_pass = g.op("Split", [k, widths], n_out=2, axis=-1)
        else:
            q_rot, k_rot = q, k
        wired = {"query": q_rot, "key": k_rot,
                 **{i.name: i.name for i in rotary.graph.input if i.name not in ("query", "key")}}  # fmt: skip
        rotated = call(g, rotary, wired, "indexer/rope/")
        q, k = rotated["query_out"], rotated["key_out"]
        if D > rope:
            q = g.op("Concat", [q, q_pass], axis=-1)
            k = g.op("Concat", [k, k_pass], axis=-1)
    present = g.op("Concat", ["past_index_key", k], axis=2, name="present_index_key")  # [b, 1, t, D]
    logits = g.op("MatMul", [wide(q), g.op("Transpose", [wide(present)], perm=[0, 1, 3, 2])])  # [b, H, s, t]
    scores = g.op("Relu", [g.op("Mul", [logits, g.const("indexer/scale", np.array(D**-0.5, np.float32))])])
    heads = g.op("Mul", [linear(g, wide("hidden"), wide(stored["weights_proj"])),
                         g.const("indexer/head_scale", np.array(H**-0.5, np.float32))])  # [b, s, H] # fmt: skip
    heads = g.op("Unsqueeze", [g.op("Transpose", [heads], perm=[0, 2, 1]), g.const("indexer/w_axis", _i64(3))])
    index = g.op("ReduceSum", [g.op("Mul", [scores, heads]), g.const("indexer/head_sum", _i64(1))], keepdims=1)
    index = g.op("Where", [visible, index, g.const("indexer/masked", np.array(-np.inf, np.float32))])  # [b,1,s,t]
    t = g.op("Shape", [present], start=2, end=3)  # [1]
    k_top = g.op("Min", [t, g.const("indexer/topk", _i64(spec.topk))])
    _, chosen = g.op("TopK", [index, k_top], n_out=2, axis=-1, largest=1, sorted=1)  # [b, 1, s, K]
    filled = lambda v: helper.make_tensor("value", TensorProto.FLOAT, [1], [v])  # noqa: E731
    zeros = g.op("ConstantOfShape", [g.op("Shape", [index])], value=filled(0.0))
    ones = g.op("ConstantOfShape", [g.op("Shape", [chosen])], value=filled(1.0))
    hit = g.op("ScatterElements", [zeros, chosen, ones], axis=-1)
    return g.op("Cast", [hit], to=TensorProto.BOOL, name="index_selected"), present

