"""Gemma 4's per-layer input embeddings (``hidden_size_per_layer_input``, the E2B / E4B sizes): one small input per
layer, made once per call from the tokens and the embeddings, added after each layer's feed-forward.

As transformers 5.23 computes them (``Gemma4TextModel.get_per_layer_inputs``, ``project_per_layer_inputs``,
``Gemma4TextDecoderLayer.forward``), with e the scaled embeddings the first layer reads [b, s, n]:

- t = ``embed_per_layer``[ids] * sqrt(P) [b, s, L * P] (its own table of ``per_layer_vocab`` rows);
- c = (e @ ``per_layer_model_projection``) * n^-0.5, each layer's P values RMS-normed with
  ``per_layer_projection_norm`` [P] (Gemma4RMSNorm: normed times the weight in float32);
- layer i's input p_i = (c_i + t_i) * 2^-0.5 [b, s, P];
- in layer i, after the feed-forward's residual add and before the layer's scalar:
  h = h + RMSNorm_n(act(h @ ``per_layer_input_gate``) * p_i @ ``per_layer_projection``) (its
  ``per_layer_norm``, transformers' post_per_layer_input_norm; act the layer's activation).

Its projections are plain MatMuls in the dtype (never int4: the names are not ``*_proj``). Notation: b batch, s tokens,
L layers, P ``per_layer_input``, n hidden.
"""  # noqa: D205

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ropeexport.components.mlp import activation, activation64
from ropeexport.components.norm import NormSpec, norm, norm64
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.graph.onnx_io import GraphBuilder
from ropeexport.numerics import round_once


def _scale(spec: DecoderSpec, value: float) -> np.ndarray:
    """A scalar factor in the dtype (transformers multiplies by a Python float in the tensor's dtype)."""
    return round_once(np.array(value, np.float64), spec.dtype)


def inputs_graph(g: GraphBuilder, spec: DecoderSpec, norm_of: NormSpec, embedded: str, top: Mapping[str, str],
                 opset: int) -> list[str]:  # fmt: skip
    """Per layer its input p_i [b, s, P] (module doc), from ``input_ids`` and ``embedded`` [b, s, n]."""
    P, L = spec.per_layer_input, spec.num_layers
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    tokens = g.op("Mul", [g.op("Gather", [top["embed_per_layer"], "input_ids"], axis=0),
                          g.const("per_layer_embed_scale", _scale(spec, math.sqrt(P)))])  # fmt: skip
    context = g.op("Mul", [g.op("MatMul", [embedded, top["per_layer_model_projection"]]),
                           g.const("per_layer_projection_scale", _scale(spec, spec.hidden_size**-0.5))])  # fmt: skip
    shape = g.const("per_layer_shape", i64(0, 0, L, P))
    context = norm(g, norm_of, g.op("Reshape", [context, shape]), top["per_layer_projection_norm.weight"], None, opset)
    summed = g.op("Mul", [g.op("Add", [context, g.op("Reshape", [tokens, shape])]),
                          g.const("per_layer_input_scale", _scale(spec, 2.0**-0.5))])  # [b, s, L, P]
    if L == 1:
        return [summed]
    return list(g.op("Split", [summed, g.const("per_layer_split", np.full(L, 1, np.int64))], n_out=L, axis=2))


def layer_graph(g: GraphBuilder, spec: DecoderSpec, norm_of: NormSpec, act: str, h: str, p: str,
                w: Mapping[str, str], opset: int) -> str:  # fmt: skip
    """h [b, s, n] plus layer i's per-layer term (module doc); ``p`` its input [b, s, 1, P] from ``inputs_graph``."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    gated = activation(g, act, g.op("MatMul", [h, w["per_layer_input_gate"]]), spec.dtype)
    mixed = g.op("Mul", [gated, g.op("Squeeze", [p, g.shared_const("per_layer_axis", i64(2))])])
    out = norm(g, norm_of, g.op("MatMul", [mixed, w["per_layer_projection"]]), w["per_layer_norm.weight"], None, opset)
    return g.op("Add", [h, out])


def inputs64(spec: DecoderSpec, norm_of: NormSpec, embedded: np.ndarray, input_ids: np.ndarray,
             weights64: Mapping[str, np.ndarray]) -> np.ndarray:  # fmt: skip
    """float64 [b, s, L, P]: every layer's input p_i (module doc), exact angles aside nothing rounded."""
    P, L = spec.per_layer_input, spec.num_layers
    b, s = input_ids.shape
    tokens = weights64["embed_per_layer"][input_ids] * math.sqrt(P)
    context = (embedded @ weights64["per_layer_model_projection"]) * spec.hidden_size**-0.5
    context = norm64(norm_of, context.reshape(b, s, L, P), weights64["per_layer_projection_norm.weight"])
    return (context + tokens.reshape(b, s, L, P)) * 2.0**-0.5


def layer64(norm_of: NormSpec, act: str, h: np.ndarray, p: np.ndarray, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """float64 h [b, s, n] plus the layer's per-layer term; ``p`` its input [b, s, P]."""
    mixed = activation64(act, h @ w["per_layer_input_gate"]) * p
    return h + norm64(norm_of, mixed @ w["per_layer_projection"], w["per_layer_norm.weight"])
