"""The ``attention`` component's graph: projections, the position piece or none, attention over the cache, output.

Contract (the ``block`` artifact's, ``ropeexport.block``): inputs ``hidden`` [b, s, n], ``position_ids`` [b, s] (the
rows' positions: what the layer's position piece reads, and the one [b, s] tensor the layer takes its batch and new
tokens from), ``attention_mask`` [b, t] (nonzero = a real token), ``past_key`` / ``past_value`` [b, KV, p, d] (a
static cache: buffers [b, KV, capacity, d] and ``cache_length`` [b]); outputs ``output`` [b, s, n], ``present_key``
/ ``present_value`` [b, KV, t, d] (keys stored rotated). A piece that reads other inputs (tables computed once for
the whole model, ``ropeexport.positions``) makes them inputs of the layer too, by the piece's own names.

One canonical graph, lowered to the spec's form (``ropeexport.forms``: named once there; each form's lowering is its
own module here, ``LOWERINGS``: ``fused``, ``decomposed``, ``tensorrt``, ``static`` (static-cache), ``gqa``; never
swapped silently): this module makes the query, key and value (one MatMul, the q/k norms), calls the position piece,
and hands them to the lowering, which builds its mask (``masks``) and its attention; then the output projection.

The logits' variants (``AttentionSpec``) in every form: ``qk_norm`` (the ``norm`` component over each head of the
projected query and key, before the rotation); ``scale`` (the ops' scale attribute; the decomposed form's constant);
``logit_softcap`` (Attention's and GroupQueryAttention's ``softcap`` attribute, which ONNX Runtime 1.31 CPU applies
after the scale and before the mask and the bias, as the ONNX spec and transformers do: measured, the fused,
static-cache and gqa outputs agree with that order to 4e-7 in fp32 and with no other; the decomposed form writes it
out in float32; the tensorrt form refuses it, TensorRT's Attention taking no softcap); ``sinks`` (decomposed: one
more column of logits in the softmax, dropped after it; fused and tensorrt: one more key slot whose key and value are
zeros and whose additive mask value is the head's sink, so its logit is exactly 0 * scale, soft-capped to 0, plus the
sink; gqa: GroupQueryAttention's ``head_sink`` input with ``smooth_softmax``, measured to be the sink in the
denominator with the row's max taken over it; static-cache: refused).

The position piece is the family's own artifact called through ``graph.compose`` (RoPE: query and key rotated by
``position_ids``; a bias method: its bias from the query positions and each slot's position counted over the real
tokens), tables and range guards included, so the layer uses exactly the tables the family verified. Without a
piece (``AttentionSpec.position`` None) nothing is rotated and no bias is added. The projections are stored by the
``linear`` component's weight format.

``attention_model`` builds the layer as a model of its own (the ``block`` artifact wraps it with its metadata);
``attention`` calls that model inside a bigger graph (a decoder layer), names prefixed, tables shared by content.
Every node and initializer name starts with ``block/`` (the names every exported model holds: keep them).

Notation: b batch, s new tokens, p past (cached) tokens, t = p + s, H query heads, KV key/value heads, d head_dim,
n the model width.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Protocol

import numpy as np
import onnx
from onnx import TensorProto, helper

from ropeexport.components import MICROSOFT
from ropeexport.components.attention import decomposed, fused, gqa, static, tensorrt
from ropeexport.components.attention.spec import AttentionSpec, check_weights
from ropeexport.components.linear import linear
from ropeexport.components.norm import norm
from ropeexport.components.query_scale import scale_query
from ropeexport.dtypes import DTYPES
from ropeexport.forms import FORMS
from ropeexport.graph.compose import call
from ropeexport.graph.onnx_io import GraphBuilder, make_model
from ropeexport.numerics import round_once

INPUTS = ("hidden", "position_ids", "attention_mask", "past_key", "past_value")
SHARED = ("shared_key", "shared_value")  # a storing layer's outputs and a reusing layer's inputs (kv_sharing)
OUTPUTS = ("output", "present_key", "present_value")


class Lowering(Protocol):
    """A form's lowering: a module with ``FORM`` (the form it lowers, named in ``ropeexport.forms``), ``FLAT`` (query,
    key and value as [b, s, heads * d] when True, else [b, heads, s, d]) and ``attend``.
    """  # noqa: D205

    FORM: str
    FLAT: bool

    def attend(self, g: GraphBuilder, spec: AttentionSpec, q: str, k: str, v: str, added: str | None,
               arrays: Mapping[str, np.ndarray]) -> str:  # fmt: skip
        """Attention over the cache of query, key and value (rotated: the piece has run), with ``added`` a bias
        piece's [b, H, s, t] or None and ``arrays`` the layer's weights (its sinks); [b, s, H * d] out when ``FLAT``,
        else [b, H, s, d]. The lowering builds its own mask (``masks``) and writes ``present_key`` /
        ``present_value``.
        """  # noqa: D205
        ...


# Each form's lowering (``ropeexport.forms`` names them; each module says which it lowers).
LOWERINGS: dict[str, ModuleType] = {m.FORM: m for m in (fused, decomposed, tensorrt, static, gqa)}


def _heads(g: GraphBuilder, x: str, heads: int, d: int, name: str) -> str:
    """[b, s, heads * d] -> [b, heads, s, d]."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    split = g.op("Reshape", [x, g.const(f"{name}_heads_shape", i64(0, 0, heads, d))])
    return g.op("Transpose", [split], perm=[0, 2, 1, 3])


def _key_positions(g: GraphBuilder) -> str:
    """[b, t]: the position of each cache slot, counted over real tokens (cumsum(attention_mask) - 1, padding at 0).

    A bias method reads every key's position; the block has position_ids for the new tokens only, so the cached
    ones are counted from the mask, as BLOOM counts them. Padded slots (masked anyway) get 0, inside the table.
    """
    # Counted in float32 (exact below 2^24, the largest max_positions): TensorRT's CumSum takes no integers.
    # Any nonzero mask value is a real token (as the mask rule reads it), counted once.
    real = g.op("Cast", [g.op("Cast", ["attention_mask"], to=TensorProto.BOOL)], to=TensorProto.FLOAT)
    counted = g.op("CumSum", [real, g.const("mask_axis", np.array(1, np.int64))])
    before = g.op("Sub", [counted, g.const("one_count", np.array(1.0, np.float32))])
    first = g.op("Max", [before, g.const("zero_position", np.array(0.0, np.float32))])
    return g.op("Cast", [first], to=TensorProto.INT64)


def _qkv(g: GraphBuilder, spec: AttentionSpec, arrays: Mapping[str, np.ndarray], flat: bool) -> tuple[str, str, str]:
    """query [b, H, s, d], key and value [b, KV, s, d] (``flat``: [b, s, H * d], [b, s, KV * d]): one MatMul, Split.

    One wide MatMul instead of three: a decode step is a row times each weight matrix, and ONNX Runtime's per-node
    cost is a visible share of three small ones (``tools/bench_serving.py``). Each output column is the same dot
    product either way. The biases are fused the same way (absent ones as zeros, when only some exist).
    """
    H, KV, d = spec.num_heads, spec.num_kv_heads, spec.head_dim
    if spec.kv_sharing == "reuse":  # the query alone; keys and values are the storing layer's, in the form's layout
        bias = g.const("q_bias", round_once(arrays["q_bias"], spec.dtype)) if "q_bias" in arrays else None
        q = linear(g, "hidden", spec.weight_format.store(g, "q_proj", arrays["q_proj"]), bias)
        return (q if flat else _heads(g, q, H, d, "q")), SHARED[0], SHARED[1]
    names = "qk" if spec.k_eq_v else "qkv"  # keys as values (Gemma 4): no v_proj, the key's output read twice
    proj = np.concatenate([arrays[f"{n}_proj"] for n in names], axis=1)
    weight = spec.weight_format.store(g, "qkv_proj", proj)
    bias = None
    if any(f"{n}_bias" in arrays for n in names):
        widths = {"q": H * d, "k": KV * d, "v": KV * d}
        joined = np.concatenate([arrays.get(f"{n}_bias", np.zeros(widths[n])) for n in names])
        bias = g.const("qkv_bias", round_once(joined, spec.dtype))
    out = linear(g, "hidden", weight, bias)
    if spec.k_eq_v:
        q, k = g.op("Split", [out, g.const("qk_split", np.array([H * d, KV * d], np.int64))], n_out=2, axis=-1)
        v = k
    else:
        sizes = g.const("qkv_split", np.array([H * d, KV * d, KV * d], np.int64))
        q, k, v = g.op("Split", [out, sizes], n_out=3, axis=-1)
    if flat:
        return q, k, v
    return _heads(g, q, H, d, "q"), _heads(g, k, KV, d, "k"), _heads(g, v, KV, d, "v")


def _qk_norms(
    g: GraphBuilder, spec: AttentionSpec, arrays: Mapping[str, np.ndarray], q: str, k: str, flat: bool
) -> tuple[str, str]:
    """query and key, each head RMS-normalized over d with its weight (``q_norm`` / ``k_norm`` [d], stored in the
    dtype as every norm weight is); shapes as they came ([b, heads, s, d], or ``flat`` [b, s, heads * d]).
    """  # noqa: D205
    if spec.qk_norm is None:
        return q, k
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    d, out = spec.head_dim, []
    normed = ((q, "q", spec.num_heads), (k, "k", spec.num_kv_heads))[: 1 if spec.kv_sharing == "reuse" else 2]
    for x, name, heads in normed:  # a reusing layer's keys come normed
        # a weightless norm (Llama 4's L2 norm) times ones: exact in every dtype, the RMSNorm's graph kept
        values = arrays[f"{name}_norm"] if spec.qk_weights else np.ones(heads * d if spec.qk_norm_over == "projection"
                                                                          else d)  # fmt: skip
        weight = g.const(f"{name}_norm", round_once(values, spec.dtype))
        if spec.qk_norm_over == "projection":  # [b, s, heads * d] as it is: one norm over the whole projection
            assert flat, "a norm over the projection reads it before the heads are split"
            out.append(norm(g, spec.qk_norm, x, weight, None, FORMS[spec.graph].opset))
            continue
        if flat:  # [b, s, heads * d] -> [b, s, heads, d]: the norm reads the last axis
            x = g.op("Reshape", [x, g.const(f"{name}_norm_heads", i64(0, 0, heads, d))])
        x = norm(g, spec.qk_norm, x, weight, None, FORMS[spec.graph].opset)
        if flat:
            x = g.op("Reshape", [x, g.const(f"{name}_norm_flat", i64(0, 0, heads * d))])
        out.append(x)
    return out[0], out[1] if len(out) > 1 else k


def _v_norm(g: GraphBuilder, spec: AttentionSpec, v: str, flat: bool) -> str:
    """value with each head RMS-normalized over d and no weight (Gemma 4's ``v_norm``); shape as it came.

    Its weight is ones: the product by 1.0 is exact in every dtype, so the norm computes transformers'
    ``with_scale=False`` (normed in float32, cast) while sharing the ``norm`` component's graph.
    """
    if spec.v_norm is None:
        return v
    i64 = lambda *vals: np.array(vals, np.int64)  # noqa: E731
    heads, d = spec.num_kv_heads, spec.head_dim
    ones = g.const("v_norm_ones", round_once(np.ones(d), spec.dtype))
    if flat:  # [b, s, KV * d] -> [b, s, KV, d]: the norm reads the last axis
        v = g.op("Reshape", [v, g.const("v_norm_heads", i64(0, 0, heads, d))])
    v = norm(g, spec.v_norm, v, ones, None, FORMS[spec.graph].opset)
    if flat:
        v = g.op("Reshape", [v, g.const("v_norm_flat", i64(0, 0, heads * d))])
    return v


def _drop_unread(g: GraphBuilder, value: str) -> None:
    """The nodes that computed ``value`` and nothing read otherwise, removed from ``g`` (walking up from it)."""
    dead = [value]
    while dead:
        name = dead.pop()
        producer = next((n for n in g.nodes if name in n.output), None)
        if producer is None or any(set(n.input) & set(producer.output) for n in g.nodes):
            continue
        g.nodes.remove(producer)
        dead.extend(i for i in producer.input if i)


def _guarded(piece_graph: onnx.ModelProto) -> dict[str, str]:
    """The range guard a layer with this piece puts on position_ids: the piece's own range (its metadata)."""
    props = {p.key: p.value for p in piece_graph.metadata_props}
    return {"ropeexport.position_inputs": "position_ids", "ropeexport.max_positions": props["ropeexport.max_positions"]}


def attention_model(
    spec: AttentionSpec,
    weights: Mapping[str, np.ndarray],
    name: str = "attention",
    metadata: Mapping[str, str] | None = None,
) -> onnx.ModelProto:
    """The layer as a model of its own (contract in the module doc).

    ``weights``: q_proj [n, H*d], k_proj / v_proj [n, KV*d], o_proj [H*d, n], and optionally q_bias, k_bias, v_bias,
    o_bias, in float64 (stored by the weight format, biases rounded once to the dtype); with the spec's variants,
    q_norm / k_norm [d] (``qk_norm``) and sinks [H] (``sinks``), rounded once to the dtype. ``metadata``: the model's
    (its ``ropeexport.position_inputs`` / ``max_positions`` put a range guard on position_ids); default: the position
    piece's range, none without a piece.
    """
    g = GraphBuilder(prefix="block/")
    arrays = dict(weights)
    hidden = int(arrays["q_proj"].shape[0])
    FORMS[spec.graph].check("window", spec.window, "graph")
    check_weights(spec, arrays)
    lowering = LOWERINGS[spec.graph]
    # a norm over the whole projection (OLMo 3) reads it before the heads are split
    over_projection = spec.qk_norm is not None and spec.qk_norm_over == "projection"
    flat = lowering.FLAT or over_projection
    q, k, v = _qkv(g, spec, arrays, flat=flat)
    q, k = _qk_norms(g, spec, arrays, q, k, flat=flat)  # each head (or the projection) normalized before the rotation
    v = _v_norm(g, spec, v, flat=flat)  # each value head normalized, no weight (Gemma 4)
    if flat and not lowering.FLAT:
        H, KV, d = spec.num_heads, spec.num_kv_heads, spec.head_dim
        q = _heads(g, q, H, d, "q")
        if spec.kv_sharing != "reuse":  # a reusing layer's come in the lowering's layout
            k, v = _heads(g, k, KV, d, "k"), _heads(g, v, KV, d, "v")
    stored = {"o_proj": spec.weight_format.store(g, "o_proj", arrays["o_proj"])}
    if "o_bias" in arrays:
        stored["o_bias"] = g.const("o_bias", round_once(arrays["o_bias"], spec.dtype))
    piece = spec.position
    rotary = piece.rotary if piece is not None else None
    bias = piece.bias if piece is not None else None
    extra: list[onnx.ValueInfoProto] = []  # the piece's inputs beyond query, key and position_ids: the layer's too
    if rotary is not None:  # the gqa form's query and key are 3-D: the fused piece's RotaryEmbedding takes both
        extra = [i for i in rotary.graph.input if i.name not in ("query", "key", "position_ids")]
        wired = {"query": q, "key": k, **{i.name: i.name for i in rotary.graph.input if i.name not in ("query", "key")}}
        rotated = call(g, rotary, wired, "rope/")
        if spec.kv_sharing == "reuse":  # the keys came rotated: the piece's rotation of them is dropped
            _drop_unread(g, rotated["key_out"])
            q = rotated["query_out"]
        else:
            q, k = rotated["query_out"], rotated["key_out"]
    if spec.query_scale is not None:  # the rotated query times its position's factor (Ministral 3), as transformers
        q = scale_query(g, spec.query_scale, q, flat=lowering.FLAT)
    added = None
    if bias is not None:
        wired = {"query_position_ids": "position_ids", "key_position_ids": _key_positions(g)}
        added = call(g, bias, wired, "bias/")["attention_bias"]  # [b, H, s, t]
    attended = lowering.attend(g, spec, q, k, v, added, arrays)
    if spec.kv_sharing == "store":  # the new keys and values as attended, for the layers that reuse them
        g.name_output(k, SHARED[0])
        g.name_output(v, SHARED[1])
    return _finish(g, spec, attended, stored, hidden, (rotary, bias), extra, metadata, name)


def _finish(
    g: GraphBuilder,
    spec: AttentionSpec,
    attended: str,
    stored: Mapping[str, str],
    hidden: int,
    pieces: tuple[onnx.ModelProto | None, onnx.ModelProto | None],
    extra: list[onnx.ValueInfoProto],
    metadata: Mapping[str, str] | None,
    name: str,
) -> onnx.ModelProto:
    """The output projection and the model around the layer: ``attended`` is [b, s, H * d] in a flat lowering
    (gqa), else [b, H, s, d]; ``pieces``: the rotary and bias graphs called (their range guards the model's by
    default); ``extra``: the piece's inputs beyond position_ids, the layer's inputs too.
    """  # noqa: D205
    H, KV, d = spec.num_heads, spec.num_kv_heads, spec.head_dim
    form, (rotary, bias) = FORMS[spec.graph], pieces
    static = form.static
    i64 = lambda *vals: np.array(vals, np.int64)  # noqa: E731
    merged = attended
    if not LOWERINGS[spec.graph].FLAT:
        heads_last = g.op("Transpose", [attended], perm=[0, 2, 1, 3])
        merged = g.op("Reshape", [heads_last, g.const("merge", i64(0, 0, H * d))])
    linear(g, merged, stored["o_proj"], stored.get("o_bias"), name="output")
    dtype = DTYPES[spec.dtype].onnx
    io = lambda name, elem, dims: helper.make_tensor_value_info(name, elem, dims)  # noqa: E731
    cache = "capacity" if static else "past"  # a static buffer's length, or the tokens cached so far
    total = "capacity" if static else "total"
    inputs = [
        io("hidden", dtype, ["batch", "seq", hidden]),
        io("position_ids", TensorProto.INT64, ["batch", "seq"]),
        io("attention_mask", TensorProto.INT64, ["batch", total]),
        io("past_key", dtype, ["batch", KV, cache, d]),
        io("past_value", dtype, ["batch", KV, cache, d]),
    ]
    if static:
        inputs.append(io("cache_length", TensorProto.INT64, ["batch"]))
    flat = LOWERINGS[spec.graph].FLAT
    shared = [io(n, dtype, ["batch", "seq", KV * d] if flat else ["batch", KV, "seq", d]) for n in SHARED]
    inputs += shared if spec.kv_sharing == "reuse" else []
    inputs += extra
    graph = helper.make_graph(
        g.nodes,
        name,
        inputs,
        [
            io("output", dtype, ["batch", "seq", hidden]),
            io("present_key", dtype, ["batch", KV, total, d]),
            io("present_value", dtype, ["batch", KV, total, d]),
            *(shared if spec.kv_sharing == "store" else []),
        ],
        g.initializers,
    )
    if metadata is None:
        piece_graph = rotary if rotary is not None else bias
        metadata = _guarded(piece_graph) if piece_graph is not None else {}
    domains = {MICROSOFT: 1} if form.contrib or spec.weight_format.quantized else None
    return make_model(graph, form.opset, dict(metadata), domains)


def attention(
    g: GraphBuilder,
    spec: AttentionSpec,
    weights: Mapping[str, np.ndarray],
    inputs: Mapping[str, str],
    prefix: str,
) -> dict[str, str]:
    """The layer called inside ``g``: ``inputs`` wires its inputs (module doc) to values of ``g``; its outputs by
    name. Every name it adds starts with ``prefix`` (``layers.3/``); tables equal to ones ``g`` holds are shared.
    """  # noqa: D205
    return call(g, attention_model(spec, weights), inputs, prefix)
