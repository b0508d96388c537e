"""The ``latent`` component's graph: one MLA layer over its cache, in two forms (``LatentSpec.graph``).

``decomposed``: opset-17 primitives, either cache. The expanded cache only: ``fused``, opset-23 ``Attention``
reading and writing the cache itself, v of its own width; ``gqa``, ONNX Runtime's ``GroupQueryAttention`` (how
serving runs a decoder), whose one head size makes the cached values padded with zeros to the key's width
(``LatentSpec.cache_shapes``: the gqa form's cache is that much larger).

Inputs ``hidden`` [b, s, n], ``position_ids`` [b, s], ``attention_mask`` [b, t] and the spec's cache
(``LatentSpec.cache_shapes``); outputs ``output`` [b, s, n] and the cache grown by s. A rotary piece's inputs beyond
query, key and position_ids (tables computed once for a model) become the layer's inputs, as in
``components.attention.graph``. Names start with ``latent/``.

- ``expanded``: keys [b, H, t, nope + rope] and values [b, H, t, v] rebuilt from the new tokens' latent by
  ``kv_b_proj`` and cached; plain attention over them (what a runtime without an MLA kernel runs; ONNX Runtime has
  none on CPU, ORT #23925).
- ``latent``: the normed latent [b, 1, t, r] and the rotated rope key [b, 1, t, rope] cached; ``kv_b_proj``'s key
  half absorbed into the query (q_nope [b, H, s, nope] x W_uk [H, nope, r]: the logits q_nope . (W_uk c) as
  (q_nope W_uk) . c) and its value half applied after the softmax (weights [b, H, s, t] x c [b, 1, t, r] x W_uv
  [H, r, v]). The absorbed matrices are the stored kv_b_proj's values, transposed: one rounding, as stored.

A ``query_scale`` (``components.query_scale``) multiplies the whole query [q_nope, q_rope] by its position's factor:
the expanded forms scale the concatenated query, as transformers does. Mistral 4's (one factor a position) scales the
latent form's logits of each query row [b, H, s, t], the same product regrouped ((f q) . k = f (q . k)), since its
query is never concatenated (q_nope is absorbed into the latent's width); Mistral Large 4's learned one (a factor per
head and position, ``learned_factor``) scales the latent form's two query halves before q_nope is absorbed.

Both: logits times ``logit_scale`` (YaRN's mscale squared in it), masked with the dtype's most negative finite
value (the causal rule over the cache and the padding, ``attention.masks.causal_mask``), softmax in float32 below
fp32 (as transformers' eager attention), rows that see no key multiplied by 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper

from ropeexport.components import MICROSOFT
from ropeexport.components.attention import gqa
from ropeexport.components.attention.masks import causal_mask
from ropeexport.components.attention.spec import AttentionSpec
from ropeexport.components.latent.indexer_graph import selection, store_indexer
from ropeexport.components.latent.spec import LatentSpec, check_weights
from ropeexport.components.linear import linear
from ropeexport.components.norm import norm
from ropeexport.components.query_scale import LearnedScaleSpec, QueryScaleSpec, learned_factor, scale_query
from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.forms import FORMS
from ropeexport.graph.compose import call
from ropeexport.graph.onnx_io import GraphBuilder, make_model
from ropeexport.numerics import round_once


def _i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def _heads(g: GraphBuilder, x: str, heads: int, width: int, name: str) -> str:
    """[b, s, heads * width] -> [b, heads, s, width]."""
    split = g.op("Reshape", [x, g.const(f"{name}_heads_shape", _i64(0, 0, heads, width))])
    return g.op("Transpose", [split], perm=[0, 2, 1, 3])


def _query(g: GraphBuilder, spec: LatentSpec, stored: Mapping[str, str]) -> tuple[str, str | None, str | None]:
    """(q_nope [b, H, s, nope], q_rope [b, H, s, rope] or None on a NoPE layer, the LoRA's normed output
    [b, s, q_lora_rank] or None), the query through its LoRA and norm when it has one (the indexer's ``lora`` query
    reads the normed output).
    """  # noqa: D205
    low = None
    if spec.q_lora_rank:
        opset = FORMS[spec.graph].opset
        low = norm(g, spec.norm, linear(g, "hidden", stored["q_a_proj"]), stored["q_a_norm"], None, opset)
        q = linear(g, low, stored["q_b_proj"])
    else:
        q = linear(g, "hidden", stored["q_proj"])
    q = _heads(g, q, spec.num_heads, spec.qk_head_dim, "q")
    if not spec.qk_rope_head_dim:  # a NoPE layer: the whole head is the part never rotated
        return q, None, low
    widths = g.const("q_split", _i64(spec.qk_nope_head_dim, spec.qk_rope_head_dim))
    nope, rope = g.op("Split", [q, widths], n_out=2, axis=-1)
    return nope, rope, low


def _softmax(g: GraphBuilder, spec: LatentSpec, logits: str, visible: Callable[[], str]) -> tuple[str, str]:
    """(softmax weights [b, H, s, t] in the dtype, sees [b, 1, s, 1]: 0 where a query sees no key) under the mask
    ``visible`` makes, bool [b, 1, s, t] (the causal rule, narrowed to the indexer's selection when the layer has one).
    """  # noqa: D205
    mask = visible()
    dtype = DTYPES[spec.dtype]
    closed = g.const("masked_logit", round_once(np.array(dtype.finite_min), spec.dtype))
    logits = g.op("Where", [mask, logits, closed])
    wide = logits if spec.dtype == "fp32" else g.op("Cast", [logits], to=TensorProto.FLOAT)
    weights = g.op("Softmax", [wide], axis=-1)
    if spec.dtype != "fp32":
        weights = g.op("Cast", [weights], to=dtype.onnx)
    sees = g.op("ReduceMax", [g.op("Cast", [mask], to=dtype.onnx)], axes=[-1], keepdims=1)  # opset 17: attribute
    return weights, sees


def _attend_gqa(g: GraphBuilder, spec: LatentSpec, query: str, keys: str, values: str) -> str:
    """ONNX Runtime's GroupQueryAttention over the expanded cache, [b, H, s, v] out: the values padded with zeros to
    the key's width (the kernel takes one head size; a zero column adds exactly 0 to every output and is sliced
    off), query, key and value flattened to [b, s, H (nope + rope)], the ``gqa`` lowering of ``components.attention``
    with one key/value head per query head, the logit scale and no rotation of its own (the slice is rotated here).
    """  # noqa: D205
    H, qk, v = spec.num_heads, spec.qk_head_dim, spec.v_head_dim
    stand_in = AttentionSpec(num_heads=H, num_kv_heads=H, head_dim=qk, dtype=spec.dtype, graph="gqa",
                             scale=spec.logit_scale)  # fmt: skip
    padded = g.op("Pad", [values, g.const("value_pad", _i64(0, 0, 0, 0, 0, 0, 0, qk - v))])  # [b, H, s, qk]
    flat = lambda x, n: g.op("Reshape", [g.op("Transpose", [x], perm=[0, 2, 1, 3]),  # noqa: E731
                                         g.const(f"{n}_flat", _i64(0, 0, H * qk))])  # fmt: skip
    out = gqa.attend(g, stand_in, flat(query, "q"), flat(keys, "k"), flat(padded, "v"), None, {})  # [b, s, H qk]
    heads = g.op("Reshape", [out, g.const("gqa_heads", _i64(0, 0, H, qk))])
    narrow = g.op("Slice", [heads, g.const("v_start", _i64(0)), g.const("v_end", _i64(v)), g.const("v_axis", _i64(3))])
    return g.op("Transpose", [narrow], perm=[0, 2, 1, 3])


def latent_model(spec: LatentSpec, weights: Mapping[str, np.ndarray], name: str = "latent_attention",
                 metadata: Mapping[str, str] | None = None) -> onnx.ModelProto:  # fmt: skip
    """The layer as a model of its own (module doc). ``weights``: float64 stored values (``LatentSpec.shapes``),
    projections stored by the weight format, norms rounded once to the dtype. ``metadata``: default the piece's
    range guard on position_ids (none without a piece).
    """  # noqa: D205
    hidden = check_weights(spec, weights)
    if spec.cache not in FORMS[spec.graph].latent_caches:
        builds = [name for name, f in FORMS.items() if spec.cache in f.latent_caches]
        raise SpecError("graph", f"the {spec.graph} form is built for the expanded cache only; the {spec.cache} "
                        f"cache is the {', '.join(builds)} form's")  # fmt: skip
    if spec.kv_sharing == "reuse" and spec.cache != "latent":
        raise SpecError("latent_cache", "a latent layer reading another's latent (kv_sharing) is built over the "
                        "latent cache only: the expanded cache holds keys and values through the source's own "
                        "kv_b_proj")  # fmt: skip
    if spec.cache == "latent" and spec.weight_format.quantized:
        raise SpecError("weights", "int4 with the latent cache is not built: the absorbed kv_b_proj halves are read "
                        "by plain MatMuls (use the expanded cache for int4)")  # fmt: skip
    g = GraphBuilder(prefix="latent/")
    fmt = spec.weight_format
    stored = {n: (g.const(n, round_once(w, spec.dtype)) if n.endswith("_norm") or n.startswith("q_scale")
                  else fmt.store(g, n, w))
              for n, w in weights.items()
              if not (spec.cache == "latent" and n == "kv_b_proj") and not n.startswith("indexer.")}  # fmt: skip
    H, nope, rope, v, r = (
        spec.num_heads,
        spec.qk_nope_head_dim,
        spec.qk_rope_head_dim,
        spec.v_head_dim,
        spec.kv_lora_rank,
    )
    q_nope, q_rope, q_low = _query(g, spec, stored)
    reuse = spec.kv_sharing == "reuse"
    rope_key: str | None
    if reuse:  # another layer's latent and rotated rope key over the whole sequence: no kv_a of its own
        latent, rope_key = "shared_latent", "shared_rope_key"
    else:
        compressed = linear(g, "hidden", stored["kv_a_proj"])  # [b, s, r + rope]
        latent, rope_key = g.op("Split", [compressed, g.const("kv_split", _i64(r, rope))], n_out=2, axis=-1) if (
            rope) else (compressed, None)  # fmt: skip
        latent = norm(g, spec.norm, latent, stored["kv_a_norm"], None, FORMS[spec.graph].opset)
        one_head = g.const("one_head_axis", _i64(1))  # (made here: the graph's bytes as before sharing came)
        latent = g.op("Unsqueeze", [latent, one_head])  # [b, 1, s, r]
        if rope_key is None and spec.cache == "latent":  # NoPE: a rope key 0 wide, so its cache is one too
            rope_key = g.op("Slice", [compressed, *(g.const(f"no_rope_{n}", _i64(v)) for n, v in
                                                    (("start", r), ("end", r), ("axis", 2)))])  # [b, s, 0]
        if rope_key is not None:
            rope_key = g.op("Unsqueeze", [rope_key, one_head])  # [b, 1, s, rope]: one key slice for every head
    extra: list[onnx.ValueInfoProto] = []
    rotary = spec.position.rotary if spec.position is not None else None
    if rotary is not None and rope_key is not None and q_rope is not None:
        extra = [i for i in rotary.graph.input if i.name not in ("query", "key", "position_ids")]
        # a reused key is rotated already: the piece's key input is then head 0 of the query, its rotation unread
        key = rope_key
        if reuse:
            key = g.op("Slice", [q_rope, *(g.const(f"head0_{n}", _i64(v)) for n, v in
                                           (("start", 0), ("end", 1), ("axis", 1)))])  # fmt: skip
        wired = {"query": q_rope, "key": key,
                 **{i.name: i.name for i in rotary.graph.input if i.name not in ("query", "key")}}  # fmt: skip
        rotated = call(g, rotary, wired, "rope/")
        q_rope = rotated["query_out"]
        rope_key = rope_key if reuse else rotated["key_out"]
    # the logits' scale as a constant of the dtype: the forms that multiply it out (fused and gqa take an attribute)
    scale = lambda: g.const("scale", round_once(np.array(spec.logit_scale), spec.dtype))  # noqa: E731
    caches = list(spec.cache_shapes())[:2]  # the attention's two; an indexer's key cache is its own
    index = spec.indexer

    def visible() -> str:
        # the attention's mask, made where each form reads it: a layer without an indexer gets the same nodes, in the
        # same order, as before the indexer came (its bytes are pinned)
        mask = causal_mask(g, 0, shared=True)  # p = t - s: the cache inputs are not named past_key in the latent form
        if index is not None and index.shared:  # GLM-5's shared layer: the previous full layer's selection
            return g.op("And", [mask, "index_selected"])
        if index is not None:
            own = {n.removeprefix("indexer."): w for n, w in weights.items() if n.startswith("indexer.")}
            chosen, _ = selection(g, index, store_indexer(g, index, own, fmt, spec.dtype), q_low, mask, spec.dtype,
                                  FORMS[spec.graph].opset)  # fmt: skip
            return g.op("And", [mask, chosen])
        return mask
    if spec.cache == "latent":
        assert rope_key is not None  # a NoPE layer's is 0 wide in the latent cache
        if reuse:
            latents, rope_keys = latent, rope_key
        else:
            latents = g.op("Concat", [caches[0], latent], axis=2, name="present_latent")
            rope_keys = g.op("Concat", [caches[1], rope_key], axis=2, name="present_rope_key")
        kv_b = np.asarray(weights["kv_b_proj"], np.float64).reshape(r, H, nope + v)
        absorb_k = g.const(
            "kv_b_key_absorbed", round_once(kv_b[..., :nope].transpose(1, 2, 0), spec.dtype)
        )  # [H,nope,r]
        absorb_v = g.const(
            "kv_b_value_absorbed", round_once(kv_b[..., nope:].transpose(1, 0, 2), spec.dtype)
        )  # [H,r,v]
        if isinstance(spec.query_scale, LearnedScaleSpec):  # the whole query, as its two halves (the same products)
            factor = learned_factor(g, spec.query_scale, stored["q_scale"], stored["q_scale_bias"])
            q_nope = g.op("Mul", [q_nope, factor])
            q_rope = None if q_rope is None else g.op("Mul", [q_rope, factor])
        q_latent = g.op("MatMul", [q_nope, absorb_k])  # [b, H, s, r]
        logits = g.op("MatMul", [q_latent, g.op("Transpose", [latents], perm=[0, 1, 3, 2])])
        if q_rope is not None:  # a NoPE layer's logits are the latent's alone
            logits = g.op("Add", [logits, g.op("MatMul", [q_rope, g.op("Transpose", [rope_keys], perm=[0, 1, 3, 2])])])
        if isinstance(spec.query_scale, QueryScaleSpec):  # [b, 1, s, 1] against [b, H, s, t]: each row's factor
            logits = scale_query(g, spec.query_scale, logits, flat=False)
        probs, sees = _softmax(g, spec, g.op("Mul", [logits, scale()]), visible)
        attended = g.op("MatMul", [g.op("MatMul", [probs, latents]), absorb_v])  # [b, H, s, v]
    else:
        kv = _heads(g, linear(g, g.op("Squeeze", [latent, one_head]), stored["kv_b_proj"]), H, nope + v, "kv")
        k_nope, values = g.op("Split", [kv, g.const("kv_b_split", _i64(nope, v))], n_out=2, axis=-1)
        if rope_key is not None and q_rope is not None:
            shape = g.op("Concat", [g.op("Shape", [k_nope], end=3), g.const("rope_width", _i64(rope))], axis=0)
            keys = g.op("Concat", [k_nope, g.op("Expand", [rope_key, shape])], axis=-1)  # [b, H, s, nope + rope]
            query = g.op("Concat", [q_nope, q_rope], axis=-1)
        else:  # a NoPE layer: keys and query all nope
            keys, query = k_nope, q_nope
        if isinstance(spec.query_scale, LearnedScaleSpec):
            query = g.op("Mul", [query, learned_factor(g, spec.query_scale, stored["q_scale"], stored["q_scale_bias"])])
        if isinstance(spec.query_scale, QueryScaleSpec):  # the whole query, after the rotation (Mistral 4)
            query = scale_query(g, spec.query_scale, query, flat=False)
        form = FORMS[spec.graph]
        if form.one_head_size:  # GroupQueryAttention: values padded to the key's width
            attended = _attend_gqa(g, spec, query, keys, values)
            sees = None  # GroupQueryAttention's head_sink zeroes a query that sees no key (``attention.gqa``)
        elif form.fused_ops:  # opset-23 Attention: the cache read and written by the op, v its own width
            attributes = {"scale": spec.logit_scale}
            if spec.dtype != "fp32":  # the softmax in float32, as transformers' eager attention computes it
                attributes["softmax_precision"] = TensorProto.FLOAT
            mask = visible()
            attended, present_key, present_value = g.op("Attention", [query, keys, values, mask, *caches], n_out=3,
                                                        name="attention", **attributes)  # fmt: skip
            g.name_output(present_key, "present_key")
            g.name_output(present_value, "present_value")
            sees = None  # a boolean mask: ONNX Runtime writes zeros for a query that sees no key (tested)
        else:
            keys = g.op("Concat", [caches[0], keys], axis=2, name="present_key")
            values = g.op("Concat", [caches[1], values], axis=2, name="present_value")
            logits = g.op("MatMul", [query, g.op("Transpose", [keys], perm=[0, 1, 3, 2])])
            probs, sees = _softmax(g, spec, g.op("Mul", [logits, scale()]), visible)
            attended = g.op("MatMul", [probs, values])  # [b, H, s, v]
    if sees is not None:
        attended = g.op("Mul", [attended, sees])
    merged = g.op("Reshape", [g.op("Transpose", [attended], perm=[0, 2, 1, 3]), g.const("merge", _i64(0, 0, H * v))])
    linear(g, merged, stored["o_proj"], name="output")
    dtype = DTYPES[spec.dtype].onnx
    io = lambda n, elem, dims: helper.make_tensor_value_info(n, elem, dims)  # noqa: E731
    inputs = [io("hidden", dtype, ["batch", "seq", hidden]), io("position_ids", TensorProto.INT64, ["batch", "seq"]),
              io("attention_mask", TensorProto.INT64, ["batch", "total"])]  # fmt: skip
    outputs = [io("output", dtype, ["batch", "seq", hidden])]
    for cache, shape in spec.cache_shapes().items():
        if reuse and cache != "past_index_key":  # the source's whole latent and rope key; its indexer keys its own
            inputs.append(io(cache.replace("past_", "shared_"), dtype, [shape[0], shape[1], "total", shape[3]]))
            continue
        inputs.append(io(cache, dtype, list(shape)))
        outputs.append(io(cache.replace("past_", "present_"), dtype, [shape[0], shape[1], "total", shape[3]]))
    if index is not None:  # the selection: a shared layer's input, a full layer's output (what verification reads)
        selected = io("index_selected", TensorProto.BOOL, ["batch", 1, "seq", "total"])
        (inputs if index.shared else outputs).append(selected)
    index_rotary = index.position.rotary if index is not None and index.position is not None else None
    if index_rotary is not None:  # the indexer's rotation: its own layout, its table inputs as the attention's
        named = {i.name for i in inputs + extra}
        extra += [i for i in index_rotary.graph.input if i.name not in ("query", "key") and i.name not in named]
    graph = helper.make_graph(g.nodes, name, inputs + extra, outputs, g.initializers)
    if metadata is None and rotary is not None:
        props = {p.key: p.value for p in rotary.metadata_props}
        metadata = {"ropeexport.position_inputs": "position_ids",
                    "ropeexport.max_positions": props["ropeexport.max_positions"]}  # fmt: skip
    return make_model(graph, FORMS[spec.graph].opset, dict(metadata or {}), {MICROSOFT: 1} if fmt.quantized else None)
