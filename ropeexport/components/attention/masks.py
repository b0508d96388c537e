"""What every form of the attention shares: the mask rules and the pieces of the logits around them.

``causal_mask`` (the causal rule bottom-right aligned on cache slots, a sliding window, the padding of
``attention_mask``), ``static_mask`` (the same over a preallocated buffer), ``visible`` (a bias piece's hidden keys
hidden too), ``additive`` (the mask as an additive term, with a bias and sinks), ``sees`` (0 for a query that sees no
key), the sinks' slot and column, the logits' ``scale_of`` and the ``attributes`` of ONNX's Attention.

Notation: b batch, s new tokens, p past (cached) tokens, t = p + s, H query heads, KV key/value heads, d head_dim.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import TensorProto

from ropeexport.components.attention.spec import OPSETS, AttentionSpec
from ropeexport.dtypes import DTYPES
from ropeexport.numerics import round_once

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ropeexport.graph.onnx_io import GraphBuilder


def window_rule(g: GraphBuilder, causal: str, key_slot: str, query_slot: str, window: int) -> str:
    """``causal`` narrowed to a sliding window: key slot j stays visible to query slot i only if i - j < window
    (transformers' rule, on cache slots, as Mistral and Phi-3 count them).
    """  # noqa: D205
    if not window:
        return causal
    reach = g.op("Sub", [query_slot, g.const("window", np.array(window, np.int64))])
    return g.op("And", [causal, g.op("Greater", [key_slot, reach])])


def chunk_rule(g: GraphBuilder, causal: str, key_slot: str, query_slot: str, chunk: int) -> str:
    """``causal`` narrowed to chunks (Llama 4): key slot j stays visible to query slot i only if (j - l) // chunk ==
    (i - l) // chunk, l the row's left padding (its slots before the first real token), as transformers 5.23's
    ``create_chunked_causal_mask`` counts them (``chunked_overlay``): the chunks start at each row's first real token.
    [s, t] -> [b, 1, s, t]. A slot before the first real token is put in chunk 0 (Max with 0): it is padding, hidden
    by the padding rule whatever its chunk.
    """  # noqa: D205
    if not chunk:
        return causal
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    # the left padding counted in float32 (exact below 2^24): TensorRT's CumSum takes no integers
    real = g.op("Cast", [g.op("Cast", ["attention_mask"], to=TensorProto.BOOL)], to=TensorProto.FLOAT)  # [b, t]
    counted = g.op("CumSum", [real, g.const("chunk_mask_axis", np.array(1, np.int64))])
    before = g.op("Cast", [g.op("Equal", [counted, g.const("chunk_none", np.array(0.0, np.float32))])],
                  to=TensorProto.FLOAT)  # fmt: skip
    padding = g.op("ReduceSum", [before, g.const("chunk_sum_axis", i64(1))], keepdims=1)  # [b, 1]
    padding = g.op("Cast", [padding], to=TensorProto.INT64)
    size, zero = g.const("chunk", np.array(chunk, np.int64)), g.const("chunk_zero", np.array(0, np.int64))
    keys = g.op("Div", [g.op("Max", [g.op("Sub", [key_slot, padding]), zero]), size])  # [b, t]: j >= 0, so floor
    keys = g.op("Unsqueeze", [keys, g.const("chunk_key_axes", i64(1, 2))])  # [b, 1, 1, t]
    rows = g.op("Unsqueeze", [padding, g.const("chunk_row_axes", i64(2, 3))])  # [b, 1, 1, 1]
    queries = g.op("Div", [g.op("Max", [g.op("Sub", [query_slot, rows]), zero]), size])  # [b, 1, s, 1]
    return g.op("And", [causal, g.op("Equal", [keys, queries])])  # [b, 1, s, t]


def static_mask(g: GraphBuilder) -> str:
    """bool [b, 1, s, capacity]: buffer slot j visible to query i of row b iff j <= cache_length[b] + i and
    attention_mask[b, j] is 1 (slots past cache_length + s are never visible).
    """  # noqa: D205
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    s = g.op("Squeeze", [g.op("Shape", ["hidden"], start=1, end=2), g.const("s_axis0", i64(0))])
    capacity = g.op("Squeeze", [g.op("Shape", ["attention_mask"], start=1, end=2), g.const("t_axis0", i64(0))])
    zero, one = g.const("zero", np.array(0, np.int64)), g.const("one", np.array(1, np.int64))
    offsets = g.op("Unsqueeze", [g.op("Range", [zero, s, one]), g.const("offset_axis", i64(0))])  # [1, s]
    lengths = g.op("Unsqueeze", ["cache_length", g.const("length_axis", i64(1))])  # [b, 1]
    query_slot = g.op("Unsqueeze", [g.op("Add", [lengths, offsets]), g.const("query_axes", i64(1, 3))])  # [b,1,s,1]
    key_slot = g.op("Range", [zero, capacity, one])  # [capacity]
    causal = g.op("LessOrEqual", [key_slot, query_slot])  # [b, 1, s, capacity]
    real = g.op("Cast", ["attention_mask"], to=TensorProto.BOOL)
    real = g.op("Unsqueeze", [real, g.const("mask_axes", i64(1, 2))])  # [b, 1, 1, capacity]
    return g.op("And", [causal, real], name="attention_visible")


def causal_mask(g: GraphBuilder, window: int = 0, shared: bool = False, chunk: int = 0) -> str:
    """bool [b, 1, s, t]: key j visible to query i iff j <= i + p (and i + p - j < window, when given; and in i + p's
    chunk, when ``chunk`` is given: ``chunk_rule``) and attention_mask[b, j] is 1.

    p is past_key's length, or with ``shared`` (the gqa form) t - s: a server may hand GroupQueryAttention one
    buffer as both past and present (onnxruntime-genai's past_present_share_buffer), whose length is its capacity,
    not the tokens cached; the mask covers exactly the cached and new tokens in every form (t = p + s).
    """  # noqa: D205
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    scalar = lambda shape_of, axis, name: g.op(  # noqa: E731
        "Squeeze", [g.op("Shape", [shape_of], start=axis, end=axis + 1), g.const(f"{name}_axis0", i64(0))]
    )
    # s and b from position_ids [b, s], not hidden: every layer of a decoder gets the same position_ids, so ONNX
    # Runtime's common-subexpression pass builds this mask once for all layers instead of once per layer.
    s, t = scalar("position_ids", 1, "s"), scalar("attention_mask", 1, "t")
    p = g.op("Sub", [t, s]) if shared else scalar("past_key", 2, "p")
    zero, one = g.const("zero", np.array(0, np.int64)), g.const("one", np.array(1, np.int64))
    query_slot = g.op("Add", [g.op("Range", [zero, s, one]), p])  # [s]: the cache slot each query occupies
    key_slot = g.op("Range", [zero, t, one])  # [t]
    keys = g.op("Unsqueeze", [key_slot, g.const("key_axis", i64(0))])  # [1, t]
    queries = g.op("Unsqueeze", [query_slot, g.const("query_axis", i64(1))])  # [s, 1]
    causal = g.op("LessOrEqual", [keys, queries])  # [s, t]: bottom-right aligned
    causal = window_rule(g, causal, keys, queries, window)
    causal = chunk_rule(g, causal, keys, queries, chunk)
    real = g.op("Cast", ["attention_mask"], to=TensorProto.BOOL)  # [b, t]
    real = g.op("Unsqueeze", [real, g.const("mask_axes", i64(1, 2))])  # [b, 1, 1, t]
    return g.op("And", [causal, real], name="attention_visible")  # [b, 1, s, t]


def scale_of(spec: AttentionSpec) -> float:
    """The logits' scale: the spec's, or 1 / sqrt(d)."""
    return spec.scale if spec.scale else 1.0 / math.sqrt(spec.head_dim)


def sink_column(g: GraphBuilder, logits: str, sinks: str) -> str:
    """logits [b, H, s, t] -> [b, H, s, t + 1]: each head's sink (``sinks`` [1, H, 1, 1]) as one more column."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    shape = g.op("Concat", [g.op("Shape", [logits], end=3), g.const("sink_width", i64(1))], axis=0)
    return g.op("Concat", [logits, g.op("Expand", [sinks, shape])], axis=-1)


def zero_slot(g: GraphBuilder, spec: AttentionSpec, k: str, kv: list[str]) -> list[str]:
    """Each of ``kv`` [b, KV, t, d] with one more slot of zeros at the end (the sinks' slot: a zero key's logit is
    exactly 0, a zero value adds nothing), [b, KV, t + 1, d].
    """  # noqa: D205
    zeros = g.const("sink_slot", round_once(np.zeros((1, spec.num_kv_heads, 1, spec.head_dim)), spec.dtype))
    rows = g.op("Concat", [g.op("Shape", [k], end=1), g.const("sink_slot_rest", np.ones(3, np.int64))], axis=0)
    slot = g.op("Expand", [zeros, rows])  # [b, KV, 1, d]
    return [g.op("Concat", [x, slot], axis=2) for x in kv]


def attributes(spec: AttentionSpec) -> dict[str, Any]:
    """Attention's scale, its softcap when asked, and its softmax in float32 below fp32, as transformers' eager
    attention and the decomposed form do.
    """  # noqa: D205
    attributes: dict[str, Any] = {"scale": scale_of(spec)}
    if spec.logit_softcap:
        attributes["softcap"] = spec.logit_softcap
    return attributes if spec.dtype == "fp32" else attributes | {"softmax_precision": TensorProto.FLOAT}


def sees(g: GraphBuilder, spec: AttentionSpec, mask: str) -> str:
    """[b, 1, s, 1] in the dtype: 1 where a query sees at least one key, else 0 (its output must be zeros)."""
    flags = g.op("Cast", [mask], to=DTYPES[spec.dtype].onnx)
    if OPSETS[spec.graph] >= 18:  # ReduceMax reads its axes from an input since opset 18, an attribute before
        return g.op("ReduceMax", [flags, g.shared_const("last_axis", np.array([-1], np.int64))], keepdims=1)
    return g.op("ReduceMax", [flags], axes=[-1], keepdims=1)


def additive(g: GraphBuilder, spec: AttentionSpec, mask: str, bias: str | None, sinks: str | None = None) -> str:
    """The mask as an additive term in the dtype: the bias (or 0) where visible, the most negative finite value else;
    [b, 1 | H, s, t]. With ``sinks`` [1, H, 1, 1]: per head, and each head's sink as the mask of one more slot (the
    sinks' zero key, ``zero_slot``), [b, H, s, t + 1].
    """  # noqa: D205
    if bias is not None:
        open_ = bias
    elif sinks is not None:  # zeros per head, so the sinks' column can join: [b, H, s, t]
        open_ = g.const("mask_open_heads", round_once(np.zeros((1, spec.num_heads, 1, 1)), spec.dtype))
    else:
        open_ = g.const("mask_open", round_once(np.array(0.0), spec.dtype))
    closed = g.const("mask_closed", round_once(np.array(DTYPES[spec.dtype].finite_min), spec.dtype))
    additive = g.op("Where", [mask, open_, closed])
    return additive if sinks is None else sink_column(g, additive, sinks)


def visible(g: GraphBuilder, spec: AttentionSpec, mask: str, added: str | None) -> str:
    """``mask`` with every key a bias piece hides (its -inf: the bias's own causal rule by position) hidden too, so a
    query whose every key is hidden outputs zeros, as the eager and float64 blocks do; ``mask`` without a bias.
    """  # noqa: D205
    if added is None:
        return mask
    wide = added if spec.dtype == "fp32" else g.op("Cast", [added], to=TensorProto.FLOAT)
    # x > -inf holds for every finite x (the bias is clamped to the dtype's finite range): Greater parses on every
    # TensorRT release in the support table, IsInf on none before 10.x.
    finite = g.op("Greater", [wide, g.const("minus_inf", np.array(-np.inf, np.float32))])
    return g.op("And", [mask, finite], name="attention_open")  # [b, H, s, t]


def cache_mask(g: GraphBuilder, spec: AttentionSpec, added: str | None,
               arrays: Mapping[str, np.ndarray]) -> tuple[str, str | None]:  # fmt: skip
    """What a lowering over a growing cache (fused, decomposed, tensorrt) applies: the causal rule with the window
    and the padding, a bias piece's hidden keys hidden too (bool [b, 1 | H, s, t]), and the sinks as [1, H, 1, 1].
    """  # noqa: D205
    mask = visible(g, spec, causal_mask(g, spec.window, chunk=spec.chunk), added)
    return mask, sinks_const(g, spec, arrays, (1, spec.num_heads, 1, 1))


def sinks_const(g: GraphBuilder, spec: AttentionSpec, arrays: Mapping[str, np.ndarray],
                shape: tuple[int, ...]) -> str | None:  # fmt: skip
    """The sinks (weight ``sinks`` [H]) as a constant of ``shape`` in the dtype, or None when the spec has none."""
    if not spec.sinks:
        return None
    return g.const("sinks", round_once(arrays["sinks"].reshape(shape), spec.dtype))
