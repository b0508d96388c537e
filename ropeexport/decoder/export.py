"""The ``decoder`` graph: embeddings, ``num_layers`` x (norm, attention block, MLP), final norm, output head.

I/O as Optimum and onnxruntime-genai name it: inputs ``input_ids`` [batch, seq] int64, ``attention_mask``
[batch, past + seq] int64 (nonzero = a real token; left padding allowed), ``position_ids`` [batch, seq] int64,
``past_key_values.{i}.key`` / ``.value`` [batch, num_kv_heads, past, head_dim]; outputs ``logits`` [batch, seq,
vocab] and ``present.{i}.key`` / ``.value`` [batch, num_kv_heads, past + seq, head_dim] (keys stored rotated).

Each layer's attention is the encoding's ``block`` artifact (``block.export``), built with that layer's weights and
called through ``graph.compose``: the exact tables, range guards, mask rule and cache handling the block verified,
the tables stored once for every layer. Norms are computed in float32 (RMSNorm written out as transformers does;
LayerNormalization with a float32 stash), activations written out from their formulas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper

from ropeexport.block.export import MICROSOFT, OPSETS, build_block_graph
from ropeexport.catalog import kind_for
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.decoder.checkpoint import BLOCK_NAMES, geometry, layer_weights, lm_head
from ropeexport.dtypes import DTYPES
from ropeexport.graph.compose import call
from ropeexport.graph.onnx_io import GraphBuilder, make_model
from ropeexport.numerics import round_once
from ropeexport.version import __version__


def cache_names(i: int) -> tuple[str, str, str, str]:
    """Layer i's (past key, past value, present key, present value) names."""
    return f"past_key_values.{i}.key", f"past_key_values.{i}.value", f"present.{i}.key", f"present.{i}.value"


def _mean_last(g: GraphBuilder, x: str, opset: int) -> str:
    if opset >= 18:  # ReduceMean reads its axes from an input since opset 18
        return g.op("ReduceMean", [x, g.shared_const("last_axis", np.array([-1], np.int64))], keepdims=1)
    return g.op("ReduceMean", [x], axes=[-1], keepdims=1)


def _norm(g: GraphBuilder, spec: DecoderSpec, x: str, w: Mapping[str, str], name: str, opset: int) -> str:
    """RMSNorm (float32 inside, then the dtype, then the scale: transformers' order) or LayerNorm."""
    if spec.architecture.norm == "layer":
        return g.op("LayerNormalization", [x, w[f"{name}.weight"], w[f"{name}.bias"]], axis=-1,
                    epsilon=spec.norm_eps, stash_type=1)  # fmt: skip
    wide = x if spec.dtype == "fp32" else g.op("Cast", [x], to=TensorProto.FLOAT)
    eps = g.shared_const("norm_eps", np.array(spec.norm_eps, np.float32))
    # Pow, not Mul(x, x): ONNX Runtime fuses Pow -> ReduceMean -> Add -> Sqrt -> Div -> Mul into one
    # SimplifiedLayerNormalization only from Pow (one node instead of six, per norm, per call).
    squared = g.op("Pow", [wide, g.shared_const("norm_two", np.array(2.0, np.float32))])
    variance = _mean_last(g, squared, opset)
    scaled = g.op("Div", [wide, g.op("Sqrt", [g.op("Add", [variance, eps])])])
    narrow = scaled if spec.dtype == "fp32" else g.op("Cast", [scaled], to=DTYPES[spec.dtype].onnx)
    return g.op("Mul", [narrow, w[f"{name}.weight"]])


def _skip_norm(
    g: GraphBuilder, spec: DecoderSpec, h: str, delta: str | None, w: Mapping[str, str], name: str, opset: int
) -> tuple[str, str]:
    """(h + delta, norm of it); ``delta`` None: (h, norm of h).

    The gqa form (ONNX Runtime only already) writes a residual add and the RMSNorm after it as one
    ``com.microsoft.SkipSimplifiedLayerNormalization``, as onnxruntime-genai's builder does: ONNX Runtime does not
    fuse them itself when the sum has a second reader (the next residual add always is one), and a decode step pays
    per node. The sum is the same float32 addition; the norm is computed in float32 as ``_norm`` computes it.
    """
    fused = spec.graph == "gqa" and spec.architecture.norm != "layer" and spec.dtype == "fp32"
    if delta is None:
        return h, _norm(g, spec, h, w, name, opset)
    if not fused:
        added = g.op("Add", [h, delta])
        return added, _norm(g, spec, added, w, name, opset)
    normed, _, _, added = g.op(
        "SkipSimplifiedLayerNormalization",
        [h, delta, w[f"{name}.weight"]],
        n_out=4,
        epsilon=spec.norm_eps,
        domain=MICROSOFT,
    )
    g.nodes[-1].output[1:3] = ["", ""]  # mean and inverse std: not computed when not asked for
    return added, normed


def _act(g: GraphBuilder, spec: DecoderSpec, x: str) -> str:
    c = lambda name, value: g.shared_const(f"act_{name}", round_once(np.array(value), spec.dtype))  # noqa: E731
    if spec.act == "silu":
        return g.op("Mul", [x, g.op("Sigmoid", [x])])
    if spec.act == "relu":
        return g.op("Relu", [x])
    if spec.act == "gelu":  # 0.5 x (1 + erf(x / sqrt 2))
        inner = g.op("Erf", [g.op("Mul", [x, c("rsqrt2", 1 / math.sqrt(2))])])
    else:  # gelu_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = g.op("Mul", [g.op("Mul", [x, x]), x])
        poly = g.op("Add", [x, g.op("Mul", [cube, c("cubic", 0.044715)])])
        inner = g.op("Tanh", [g.op("Mul", [poly, c("sqrt2pi", math.sqrt(2 / math.pi))])])
    return g.op("Mul", [g.op("Mul", [x, c("half", 0.5)]), g.op("Add", [inner, c("one", 1.0)])])


def _linear(g: GraphBuilder, x: str, w: Mapping[str, str], proj: str, bias: str) -> str:
    out = g.op("MatMul", [x, w[proj]])
    return g.op("Add", [out, w[bias]]) if bias in w else out


def _gate_up(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A layer's weights with gate_proj | up_proj as one gate_up_proj [hidden, 2 * inner] (biases alike)."""
    out = {n: v for n, v in arrays.items() if n not in ("gate_proj", "up_proj", "gate_bias", "up_bias")}
    out["gate_up_proj"] = np.concatenate([arrays["gate_proj"], arrays["up_proj"]], axis=1)
    if "gate_bias" in arrays or "up_bias" in arrays:
        inner = arrays["up_proj"].shape[1]
        out["gate_up_bias"] = np.concatenate([arrays.get(n, np.zeros(inner)) for n in ("gate_bias", "up_bias")])
    return out


def _mlp(g: GraphBuilder, spec: DecoderSpec, x: str, w: Mapping[str, str]) -> str:
    if spec.architecture.mlp == "gated":  # gate | up as one MatMul (see block.export._qkv for why), then Split
        both = _linear(g, x, w, "gate_up_proj", "gate_up_bias")
        half = g.shared_const("gate_up_split", np.array([spec.intermediate_size] * 2, np.int64))
        gate, up = g.op("Split", [both, half], n_out=2, axis=-1)
        up = g.op("Mul", [_act(g, spec, gate), up])
    else:
        up = _act(g, spec, _linear(g, x, w, "up_proj", "up_bias"))
    return _linear(g, up, w, "down_proj", "down_bias")


def build_decoder_graph(spec: DecoderSpec, weights: Mapping[str, np.ndarray], source: str) -> onnx.ModelProto:
    """The decoder with ``weights`` (canonical names, ``decoder.checkpoint``); ``source`` says where they came from."""
    g = GraphBuilder(prefix="")
    position = spec.position_spec()
    piece = kind_for(position).piece(position)
    opset = OPSETS[spec.graph]
    dtype = DTYPES[spec.dtype].onnx
    H, KV, d = geometry(spec)
    stored = lambda name: g.const(name, round_once(weights[name], spec.dtype))  # noqa: E731
    top = {n: stored(n) for n in weights if not n.startswith("layers.") and n not in ("embed", "lm_head")}
    embed = stored("embed")
    h = g.op("Gather", [embed, "input_ids"], axis=0)  # out-of-range ids: ONNX Runtime refuses the call
    if spec.architecture.embed_norm:
        h = _norm(g, spec, h, top, "embed_norm", opset)
    pending = None  # the residual add a layer leaves to the next norm (made there, fused with it in the gqa form)
    for i in range(spec.num_layers):
        arrays = layer_weights(weights, i)
        if spec.architecture.mlp == "gated":
            arrays = _gate_up(arrays)
        w = {n: g.const(f"layers.{i}.{n}", round_once(v, spec.dtype)) for n, v in arrays.items()
             if n not in BLOCK_NAMES}  # fmt: skip
        block = build_block_graph(
            position,
            rotary=piece.rotary,
            bias=piece.bias,
            weights={n: v for n, v in arrays.items() if n in BLOCK_NAMES},
            window=spec.sliding_window,
        )
        past_key, past_value, present_key, present_value = cache_names(i)
        h, x = _skip_norm(g, spec, h, pending, w, "norm1", opset)
        wired = {"hidden": x, "position_ids": "position_ids", "attention_mask": "attention_mask",
                 "past_key": past_key, "past_value": past_value}  # fmt: skip
        out = call(g, block, wired, f"layers.{i}/")
        g.name_output(out["present_key"], present_key)
        g.name_output(out["present_value"], present_value)
        if spec.residual == "sequential":
            h, y = _skip_norm(g, spec, h, out["output"], w, "norm2", opset)
            pending = _mlp(g, spec, y, w)
        else:  # parallel: the MLP reads its own norm of the layer input (GPT-NeoX) or the attention's (GPT-J)
            y = x if spec.residual == "shared" else _norm(g, spec, h, w, "norm2", opset)
            h, pending = g.op("Add", [h, out["output"]]), _mlp(g, spec, y, w)
    _, h = _skip_norm(g, spec, h, pending, top, "final_norm", opset)
    if g.nodes[-1].op_type == "SkipSimplifiedLayerNormalization":
        g.nodes[-1].output[3] = ""  # the last residual sum: read by nothing
    head = g.const("lm_head", round_once(lm_head(spec, weights), spec.dtype)) if not spec.tie_embeddings else None
    if head is None:  # tied: the embedding read transposed, stored once
        head = g.op("Transpose", [embed], perm=[1, 0])
    logits = g.op("MatMul", [h, head])
    if "lm_head_bias" in top:
        logits = g.op("Add", [logits, top["lm_head_bias"]])
    g.name_output(logits, "logits")
    io = helper.make_tensor_value_info
    inputs = [
        io("input_ids", TensorProto.INT64, ["batch", "seq"]),
        io("attention_mask", TensorProto.INT64, ["batch", "total"]),
        io("position_ids", TensorProto.INT64, ["batch", "seq"]),
    ]
    outputs = [io("logits", dtype, ["batch", "seq", spec.vocab_size])]
    for i in range(spec.num_layers):
        past_key, past_value, present_key, present_value = cache_names(i)
        inputs += [io(n, dtype, ["batch", KV, "past", d]) for n in (past_key, past_value)]
        outputs += [io(n, dtype, ["batch", KV, "total", d]) for n in (present_key, present_value)]
    graph = helper.make_graph(g.nodes, spec.name, inputs, outputs, g.initializers)
    metadata = {
        "ropeexport.encoding": position.encoding,
        "ropeexport.artifact": "decoder",
        "ropeexport.spec": spec.digest_text(),
        "ropeexport.max_positions": str(position.max_positions),
        "ropeexport.position_inputs": "position_ids",
        "ropeexport.weights": source,
        "ropeexport.version": __version__,
    }
    return make_model(graph, opset, metadata, {MICROSOFT: 1} if spec.graph == "gqa" else None)
