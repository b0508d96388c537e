"""The ``decoder`` graph: embeddings, ``num_layers`` x (norm, attention, MLP), final norm, output head.

I/O as Optimum and onnxruntime-genai name it: inputs ``input_ids`` [batch, seq] int64, ``attention_mask``
[batch, past + seq] int64 (nonzero = a real token; left padding allowed), ``position_ids`` [batch, seq] int64,
``past_key_values.{i}.key`` / ``.value`` [batch, num_kv_heads, past, head_dim]; outputs ``logits`` [batch, seq,
vocab] and ``present.{i}.key`` / ``.value`` [batch, num_kv_heads, past + seq, head_dim] (keys stored rotated); each
layer's shapes its own, ``LayerSpec.cache_shapes`` in the spec's form. A layer that reads another's keys and values
(``kv_from``: Gemma 4's shared key/value layers, ``architectures.sharing``) has neither: it attends over that layer's
cache and new keys, and the cache per token is the storing layers' alone.

A composition of components (``ropeexport.components``, their specs from ``decoder.parts``) over ``spec.layers``:
``norm`` and ``mlp`` (or ``moe``) graphs, projections stored by ``linear``'s weight format, and per layer the
``attention`` component (the ``block`` artifact's graph) built with that layer's weights, window and position piece
(none: nothing rotated) and called through ``graph.compose``: the exact tables, range guards, mask rule and cache
handling the block verified, a table stored once for every layer that has it. Norms are computed in float32 (RMSNorm
written out as transformers does; LayerNormalization with a float32 stash), activations written out from their formulas.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import TensorProto, helper

from ropeexport.architectures.sharing import cached_layers
from ropeexport.components import MICROSOFT, qmoe
from ropeexport.components.attention.graph import SHARED, attention
from ropeexport.components.gemma4_moe import Gemma4MoESpec, branch
from ropeexport.components.grouped_moe import SharedMoESpec, shared_moe
from ropeexport.components.grouped_qmoe import grouped_qmoe, interleaved
from ropeexport.components.latent.graph import latent_model
from ropeexport.components.linear import Packed, WeightFormat, gather, is_weight, joined_columns, linear
from ropeexport.components.mlp import MLPSpec, joined, mlp
from ropeexport.components.moe import MoESpec, moe, to_graph
from ropeexport.components.norm import add_norm, fusable, norm
from ropeexport.decoder import per_layer
from ropeexport.decoder.parts import (
    Pieces,
    attention_spec,
    head_name,
    in_qmoe,
    index_pieces,
    latent_spec,
    mlp_spec,
    norm_spec,
    position_pieces,
    weight_format,
)
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.decoder.weights import BLOCK_NAMES, cache_shapes, expected, layer_weights, lm_head, vocab_part
from ropeexport.dtypes import DTYPES
from ropeexport.forms import FORMS
from ropeexport.graph.compose import call
from ropeexport.graph.onnx_io import (
    DATA_FILE,
    EXTERNAL_DATA_THRESHOLD,
    ExternalData,
    GraphBuilder,
    make_model,
    save_model,
    save_streamed,
)
from ropeexport.numerics import round_once
from ropeexport.positions import AXES_INPUT
from ropeexport.version import __version__

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ropeexport.pipeline import Stage


def embed_scale(spec: DecoderSpec) -> np.ndarray:
    """Gemma's embedding multiplier: sqrt(hidden_size) in float32 (transformers' buffer), cast to the dtype."""
    return round_once(np.array(np.float32(math.sqrt(spec.hidden_size)), np.float64), spec.dtype)


# float32 bytes of the output projection's columns packed at once in int4 (``head_weight``)
HEAD_SLICE_BYTES = 256 * 2**20


def head_weight(spec: DecoderSpec, weights: Mapping[str, np.ndarray], stores: WeightFormat) -> np.ndarray | Packed:
    """The output projection [hidden, vocab] as ``stores.store`` takes it: whole in a float dtype; in int4 packed a
    slice of columns at a time, each read alone (``vocab_part``) and joined (``linear.joined_columns``: the same
    bytes), since Gemma 4's 262144-word head tied to a 5376-wide embedding is 5.6 GB in float32 whole.
    """  # noqa: D205
    if not stores.quantized:
        return lm_head(spec, weights)
    name = "embed" if spec.tie_embeddings else "lm_head"
    step = max(1, HEAD_SLICE_BYTES // (4 * spec.hidden_size))
    parts = []
    for start in range(0, spec.vocab_size, step):
        part = vocab_part(weights, name, start, min(spec.vocab_size, start + step))  # embed rows / head columns
        parts.append(stores.pack(part.T if name == "embed" else part))
    return joined_columns(parts)


def cache_names(i: int) -> tuple[str, str, str, str]:
    """Layer i's (past key, past value, present key, present value) names."""
    return f"past_key_values.{i}.key", f"past_key_values.{i}.value", f"present.{i}.key", f"present.{i}.value"


def index_cache_names(i: int) -> tuple[str, str]:
    """Layer i's indexer key cache (past, present) names (DeepSeek Sparse Attention: ``components.latent.indexer``)."""
    return f"past_key_values.{i}.index_key", f"present.{i}.index_key"


def layer_caches(spec: DecoderSpec, i: int, graph: str | None = None) -> list[tuple[str, str, int, int]]:
    """Layer i's cached tensors as (past name, present name, heads, width): key and value (``cache_names``), and a
    layer with its own indexer its key cache third (``index_cache_names``; that one alone on a layer reading another's
    latent); shapes as ``weights.cache_shapes``.
    """  # noqa: D205
    past_key, past_value, present_key, present_value = cache_names(i)
    names = [(past_key, present_key), (past_value, present_value), index_cache_names(i)]
    out = [(past, present, heads, width)
           for (past, present), (heads, width) in zip(names, cache_shapes(spec, i, graph), strict=False)]  # fmt: skip
    # a layer reading another's latent keeps only its own indexer's keys (Mistral Large 4's reuse_but_indexer)
    return out[2:] if spec.layers[i].attention.kv_from is not None else out


def prefill_and_step(
    infer: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
    spec: DecoderSpec,
    input_ids: np.ndarray,
    position_ids: np.ndarray,
    step_positions: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """A prompt prefilled from an empty cache, then one greedy decode step reading its cache at ``step_positions``
    (an image prompt's checks: ``tools/grid_check.py``, ``tests/decoder/test_qwen_vl.py``).

    ``infer``: a runner's feeds -> every output by name; input_ids [b, s] (every slot real); position_ids [b, s] or
    M-RoPE's [3, b, s]; step_positions [b, 1] or [3, b, 1] (M-RoPE: the cache position plus ``rope_deltas``).
    Returns (float64 logits [b, s + 1, vocab]: the prompt's slots then the step's, as the runtime returned them; the
    step's token [b, 1], the argmax of the prompt's last slot).
    """  # noqa: D205
    b, s = input_ids.shape
    cached = cached_layers(spec.layers)  # a layer reading another's keys and values has no cache of its own
    feed = {"input_ids": input_ids, "attention_mask": np.ones((b, s), np.int64), "position_ids": position_ids}
    for i in cached:
        for name, _, heads, width in layer_caches(spec, i):
            feed[name] = np.zeros((b, heads, 0, width), DTYPES[spec.dtype].np_dtype)
    out = infer(feed)
    token = np.argmax(out["logits"][:, -1], axis=-1)[:, None].astype(np.int64)
    step = {"input_ids": token, "attention_mask": np.ones((b, s + 1), np.int64), "position_ids": step_positions}
    for i in cached:
        for past, present, _, _ in layer_caches(spec, i):
            step[past] = out[present]
    logits = np.concatenate([out["logits"], infer(step)["logits"]], axis=1).astype(np.float64)
    return logits, token


def build_decoder_graph(
    spec: DecoderSpec,
    weights: Mapping[str, np.ndarray],
    source: str,
    pieces: Pieces | None = None,
    sink: ExternalData | None = None,
    stage: Stage | None = None,
) -> onnx.ModelProto:
    """The decoder with ``weights`` (canonical names, ``decoder.checkpoint``); ``source`` says where they came from.

    ``pieces``: per layer its position piece (default ``parts.position_pieces``: each layer's own encoding).
    ``stage``: told ``("export", i, num_layers)`` as layer i is reached (a real size takes minutes).
    ``sink``: the data file each large initializer is written to as it is made (``write_decoder``); the model then
    holds no weight bytes, and each weight is read from ``weights`` once, stored and let go (a layer's attention
    projections, or its gate and up projections, are held together while they are joined).
    """
    g = GraphBuilder(prefix="", sink=sink)
    pieces = position_pieces(spec) if pieces is None else pieces
    position = spec.position_spec()
    form = FORMS[spec.graph]
    opset = form.opset
    positions = spec.positions  # the model's position input (``ropeexport.positions``)
    rows = positions.name  # the [b, s] rows every layer reads: the input itself, one axis
    axes_wired: dict[str, str] = {}
    if not positions.one_axis:  # [3, b, s]: the rows are the time axis (text: all three equal), the piece reads all
        first = g.const("position_rows_axis", np.array(0, np.int64))
        rows = g.op("Gather", [positions.name, first], axis=0, name="position_rows")  # [b, s]
        axes_wired = {AXES_INPUT: positions.name}
    dtype = DTYPES[spec.dtype].onnx
    norm_of, stores = norm_spec(spec), weight_format(spec)
    fused = form.fused_norms and fusable(norm_of)  # the residual add and the RMSNorm after it as one node

    def stored(name: str, values: np.ndarray | Packed) -> str:  # projections as the weight format stores them
        if isinstance(values, Packed):  # the int4 head, packed in slices (``head_weight``)
            return stores.store(g, name, values)
        if name.endswith("router_correction"):  # added to float32 scores (``grouped_moe.grouped_routing``): float32
            return g.const(name, round_once(values, "fp32"))
        return stores.store(g, name, values) if is_weight(name) else g.const(name, round_once(values, spec.dtype))

    def feedforward(mlp_of: MLPSpec | MoESpec | SharedMoESpec | Gemma4MoESpec, y: str, w: Mapping[str, str]) -> str:
        assert not isinstance(mlp_of, Gemma4MoESpec)  # a sandwich layer's branch (``gemma4_moe.branch``)
        if isinstance(mlp_of, SharedMoESpec) and qmoe.holds(g, w["experts_gate_up_proj"]):  # its experts in QMoE
            return grouped_qmoe(g, mlp_of.router, mlp_of.dtype, y, w)
        if isinstance(mlp_of, SharedMoESpec):  # DeepSeek's grouped router and shared experts
            return shared_moe(g, mlp_of.router, mlp_of.inner, mlp_of.dtype, y, w)
        return moe(g, mlp_of, y, w) if isinstance(mlp_of, MoESpec) else mlp(g, mlp_of, y, w)

    def normed(h: str, delta: str | None, w: Mapping[str, str], name: str) -> tuple[str, str]:
        return add_norm(g, norm_of, h, delta, w[f"{name}.weight"], w.get(f"{name}.bias"), opset, fused)

    top = {n: stored(n, weights[n]) for n in weights if not n.startswith("layers.") and n not in ("embed", "lm_head")}
    head = embed = ""  # the weights' names as stored
    if spec.storage.tied_embedding_int4:  # the tied head first: the embedding is gathered from its int4 bytes
        head = stored("lm_head", head_weight(spec, weights, stores))
        h = gather(g, head, "input_ids")
    else:
        embed = stored("embed", weights["embed"])
        h = g.op("Gather", [embed, "input_ids"], axis=0)  # out-of-range ids: ONNX Runtime refuses the call
    if spec.architecture.embed_scale:  # Gemma: times sqrt(hidden), a constant of the dtype
        h = g.op("Mul", [h, g.const("embed_scale", embed_scale(spec))])
    if spec.architecture.has("embed_norm.weight"):  # BLOOM: a LayerNorm on the embeddings
        h = norm(g, norm_of, h, top["embed_norm.weight"], top.get("embed_norm.bias"), opset)
    # Gemma 4's per-layer input embeddings: each layer's input [b, s, 1, P], made once from the embeddings
    inputs_of = per_layer.inputs_graph(g, spec, norm_of, h, top, opset) if spec.per_layer_input else []
    pending = None  # the residual add a layer leaves to the next norm (made there, fused with it in the gqa form)
    shared: dict[int, tuple[str, str]] = {}  # a storing layer's new keys and values (kv_sharing), by layer
    selected = ""  # the last full indexer layer's selection: what a shared indexer layer reads (GLM-5)
    indexing = index_pieces(spec) if any(x.attention.index_topk for x in spec.layers) else [None] * spec.num_layers
    for i, layer in enumerate(spec.layers):
        if stage is not None:
            stage("export", i, spec.num_layers)
        arrays: Mapping[str, np.ndarray] = layer_weights(weights, i)  # read as asked for: one weight at a time
        pair: tuple[str, ...] = ()
        mlp_of = mlp_spec(spec, i)
        qmoe_held = ("experts_gate_up_proj", "experts_down_proj") if in_qmoe(spec, i) else ()
        if isinstance(mlp_of, MoESpec):  # the experts as the form stores them (one layer's mixture at a time)
            arrays = to_graph(mlp_of, arrays)
        elif qmoe_held:  # DeepSeek's experts as QMoE stores them
            arrays = interleaved(arrays)
        elif isinstance(mlp_of, (SharedMoESpec, Gemma4MoESpec)):  # gate | up columns [E, n, 2m], as read
            pair = ("gate_proj", "up_proj") if isinstance(mlp_of, Gemma4MoESpec) else ()  # Gemma 4's dense MLP
            arrays = {k: v for k, v in arrays.items() if k not in ("experts_gate_proj", "experts_up_proj")} | {
                "experts_gate_up_proj": np.concatenate([arrays["experts_gate_proj"], arrays["experts_up_proj"]], -1)}
        elif mlp_of.kind == "gated":
            pair = ("gate_proj", "up_proj", "gate_bias", "up_bias")
        skip = (*pair, *qmoe_held)
        w = {n: stored(f"layers.{i}.{n}", arrays[n]) for n in arrays if n not in BLOCK_NAMES and n not in skip}
        # QMoE's experts (rows out: ``qmoe.store``), after the layer's other weights (its bytes' order)
        w |= {n: qmoe.store(g, stores, f"layers.{i}.{n}", arrays[n]) for n in qmoe_held}
        if pair:  # gate | up stored as one gate_up_proj, after the layer's other weights
            gate_up = joined({n: arrays[n] for n in pair if n in arrays})
            w |= {n: stored(f"layers.{i}.{n}", v) for n, v in gate_up.items()}
            del gate_up
        reads = layer.attention.kv_from  # keys and values another layer stored (Gemma 4): its cache, no own
        past_key, past_value, present_key, present_value = cache_names(i if reads is None else reads)
        if "norm1" in layer.norms:
            h, x = normed(h, pending, w, "norm1")
        else:  # the post residual: attention reads the residual stream itself
            h = h if pending is None else g.op("Add", [h, pending])
            x = h
        wired = {"hidden": x, "position_ids": rows, "attention_mask": "attention_mask",
                 "past_key": past_key, "past_value": past_value, **axes_wired}  # fmt: skip
        block = {n: arrays[n] for n in arrays if n in BLOCK_NAMES}
        if layer.attention.kind == "latent":  # DeepSeek's latent attention over its cache
            latent_of = latent_spec(spec, i, pieces[i], index=indexing[i])
            if latent_of.cache == "latent":  # the latent and the rotated rope key under the layer's cache names
                wired = {k: v for k, v in wired.items() if k not in ("past_key", "past_value")} | (
                    {"past_latent": past_key, "past_rope_key": past_value} if reads is None else
                    dict(zip(("shared_latent", "shared_rope_key"), shared[reads], strict=True)))  # fmt: skip
            own_index = latent_of.indexer is not None and not latent_of.indexer.shared
            if own_index:  # its own key cache, even on a layer reading another's latent (Mistral Large 4)
                wired["past_index_key"] = index_cache_names(i)[0]
            elif latent_of.indexer is not None:
                wired["index_selected"] = selected
            out = call(g, latent_model(latent_of, block), wired, f"layers.{i}/")
            if latent_of.kv_sharing == "store":  # its whole latent and rope key, read by later layers
                shared[i] = (out["present_latent"], out["present_rope_key"])
            if own_index:
                g.name_output(out["present_index_key"], index_cache_names(i)[1])
                selected = out["index_selected"]
            out = {"output": out["output"], "present_key": out.get("present_key", out.get("present_latent", "")),
                   "present_value": out.get("present_value", out.get("present_rope_key", ""))}  # fmt: skip
        else:
            if reads is not None:
                wired |= dict(zip(SHARED, shared[reads], strict=True))
            out = attention(g, attention_spec(spec, i, pieces[i]), block, wired, f"layers.{i}/")
            if SHARED[0] in out:  # read by later layers
                shared[i] = (out[SHARED[0]], out[SHARED[1]])
        if reads is None:  # a layer that reads another's keys and values has no present of its own
            g.name_output(out["present_key"], present_key)
            g.name_output(out["present_value"], present_value)
        if layer.residual == "sandwich":  # Gemma: each branch normed on its way in and on its way out
            attended = norm(g, norm_of, out["output"], w["norm2.weight"], None, opset)
            h, y = normed(h, attended, w, "norm3")
            # Gemma 4's mixture beside its MLP reads the residual stream h as well (``gemma4_moe``)
            mixed = branch(g, mlp_of, h, y, w, opset) if isinstance(mlp_of, Gemma4MoESpec) else None
            pending = norm(g, norm_of, mixed or feedforward(mlp_of, y, w), w["norm4.weight"], None, opset)
        elif layer.residual == "sequential":
            h, y = normed(h, out["output"], w, "norm2")
            pending = feedforward(mlp_of, y, w)
        elif layer.residual == "post":  # OLMo 2/3, EXAONE 4: each branch normed on its way out only
            h = g.op("Add", [h, norm(g, norm_of, out["output"], w["norm2.weight"], None, opset)])
            pending = norm(g, norm_of, feedforward(mlp_of, h, w), w["norm4.weight"], None, opset)
        else:  # parallel: the MLP reads its own norm of the layer input (GPT-NeoX), or the attention's (GPT-J)
            y = norm(g, norm_of, h, w["norm2.weight"], w.get("norm2.bias"), opset) if "norm2" in layer.norms else x
            h, pending = g.op("Add", [h, out["output"]]), feedforward(mlp_of, y, w)
        if inputs_of:  # Gemma 4: the per-layer input's term after the feed-forward, before the layer's scalar
            h = g.op("Add", [h, pending]) if pending is not None else h
            h, pending = per_layer.layer_graph(g, spec, norm_of, layer.ffn.act, h, inputs_of[i], w, opset), None
        if layer.layer_scale:  # Gemma 4: the residual stream after the layer times its scalar, in the dtype
            h, pending = g.op("Mul", [h if pending is None else g.op("Add", [h, pending]), w["layer_scalar"]]), None
    _, h = normed(h, pending, top, "final_norm")
    if g.nodes[-1].op_type == "SkipSimplifiedLayerNormalization":
        g.nodes[-1].output[3] = ""  # the last residual sum: read by nothing
    if not head and head_name(spec) == "lm_head":
        head = stored("lm_head", head_weight(spec, weights, stores))
    elif not head:  # tied: the embedding read transposed, stored once
        head = g.op("Transpose", [embed], perm=[1, 0])
    logits = linear(g, h, head, top.get("lm_head_bias"))
    if spec.logit_scale:  # Cohere 2: logits * logit_scale, in the dtype as transformers computes it
        logits = g.op("Mul", [logits, g.const("logit_scale", round_once(np.array(spec.logit_scale), spec.dtype))])
    if spec.final_softcap:  # Gemma 2: cap * tanh(logits / cap), in the dtype as transformers computes it
        cap = g.const("final_softcap", round_once(np.array(spec.final_softcap), spec.dtype))
        logits = g.op("Mul", [g.op("Tanh", [g.op("Div", [logits, cap])]), cap])
    g.name_output(logits, "logits")
    io = helper.make_tensor_value_info
    inputs = [
        io("input_ids", TensorProto.INT64, ["batch", "seq"]),
        io("attention_mask", TensorProto.INT64, ["batch", "total"]),
        io(positions.name, TensorProto.INT64, positions.dims),
    ]
    outputs = [io("logits", dtype, ["batch", "seq", spec.vocab_size])]
    for i in cached_layers(spec.layers):  # a layer that reads another's keys and values has no cache of its own
        for past, present, heads, width in layer_caches(spec, i):
            inputs.append(io(past, dtype, ["batch", heads, "past", width]))
            outputs.append(io(present, dtype, ["batch", heads, "total", width]))
    graph = helper.make_graph(g.nodes, spec.name, inputs, outputs, g.initializers)
    metadata = {
        "ropeexport.encoding": position.encoding,
        "ropeexport.artifact": "decoder",
        "ropeexport.spec": spec.digest_text(),
        "ropeexport.max_positions": str(position.max_positions),
        "ropeexport.position_inputs": positions.name,
        "ropeexport.weights": source,
        "ropeexport.version": __version__,
    }
    contrib = form.contrib or stores.quantized  # GroupQueryAttention, MatMulNBits
    return make_model(graph, opset, metadata, {MICROSOFT: 1} if contrib else None)


def weight_bytes(spec: DecoderSpec) -> int:
    """The bytes of the decoder's weights in its dtype (the tables aside): what decides whether it streams."""
    return DTYPES[spec.dtype].np_dtype(0).itemsize * sum(math.prod(shape) for shape in expected(spec).values())


def write_decoder(
    spec: DecoderSpec, weights: Mapping[str, np.ndarray], source: str, folder: Path, stage: Stage | None = None
) -> tuple[list[str], onnx.ModelProto]:
    """The decoder written into ``folder``: (file names, the model as written, weights external or inline).

    Past ``EXTERNAL_DATA_THRESHOLD`` of weights (where ``save_model`` would put them in ``model.onnx.data`` anyway)
    the build streams: each weight is read, rounded once, written to the data file and let go as the graph is made,
    and the graph proto written alone (``graph.onnx_io.ExternalData``: onnx's own layout, so the files are the
    bytes ``save_model`` writes for the same model). Below it, the model is made in memory and saved as before.
    """
    if weight_bytes(spec) <= EXTERNAL_DATA_THRESHOLD:
        model = build_decoder_graph(spec, weights, source, stage=stage)
        return save_model(model, folder), model
    folder.mkdir(parents=True, exist_ok=True)
    with ExternalData(folder / DATA_FILE) as sink:
        model = build_decoder_graph(spec, weights, source, sink=sink, stage=stage)
        return save_streamed(model, folder, sink), model
