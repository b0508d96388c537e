"""The ``attention`` component's graph: projections, the position piece or none, attention over the cache, output.

Contract (the ``block`` artifact's, ``ropeexport.block``): inputs ``hidden`` [b, s, n], ``position_ids`` [b, s],
``attention_mask`` [b, t] (nonzero = a real token), ``past_key`` / ``past_value`` [b, KV, p, d] (a static cache:
buffers [b, KV, capacity, d] and ``cache_length`` [b]); outputs ``output`` [b, s, n], ``present_key`` /
``present_value`` [b, KV, t, d] (keys stored rotated). Five forms, each chosen by the spec's ``graph`` (never swapped
silently):
- ``fused``: opset-23 ``Attention`` reading ``past_key`` / ``past_value`` and writing ``present_*`` itself, the mask
  a boolean [b, 1, s, past + s] built from the causal rule and ``attention_mask`` (with a bias piece: additive,
  [b, H, s, t], the bias where visible, and rows that see no key multiplied by 0);
- ``decomposed``: opset-17 primitives: the cache concatenated, keys repeated for grouped-query heads, the same
  mask applied with the dtype's most negative finite value, softmax in float32 for fp16/bf16 (as transformers'
  eager attention does), and rows that see no key multiplied by 0;
- ``static-cache``: a preallocated cache, as a server keeps it: ``past_key`` / ``past_value`` are buffers
  [b, KV, capacity, d] and ``cache_length`` [b] says how many tokens each row holds; opset-24 ``TensorScatter``
  writes the new keys and values at cache_length, and ``Attention`` reads the buffer with ``nonpad_kv_seqlen`` =
  cache_length + s, ``attention_mask`` [b, capacity] covering the buffer (ONNX Runtime 1.31 still reads the slots
  past it: they must hold finite values);
- ``tensorrt``: what TensorRT 10.15 parses (``ropeexport check-trt``): the cache concatenated outside a 4-D opset-23
  ``Attention`` that takes no cache, the mask additive in the dtype (0 or its most negative finite value, never a
  boolean and never ``is_causal``, which TensorRT aligns top-left), rows that see no key multiplied by 0;
- ``gqa``: ONNX Runtime's ``GroupQueryAttention``: its own causal rule with the padding alone as
  ``attention_bias`` and the rows that see no key zeroed by ``head_sink`` (``_attend_gqa_padded``), or, with a
  window, a bias piece or sinks, the full mask as ``attention_bias`` (``_attend_gqa``).
The logits' variants (``AttentionSpec``) in every form: ``qk_norm`` (the ``norm`` component over each head of the
projected query and key, before the rotation); ``scale`` (the ops' scale attribute; the decomposed form's constant);
``logit_softcap`` (Attention's and GroupQueryAttention's ``softcap`` attribute, which ONNX Runtime 1.31 CPU applies
after the scale and before the mask and the bias, as the ONNX spec and transformers do: measured, the fused,
static-cache and gqa outputs agree with that order to 4e-7 in fp32 and with no other; the decomposed form writes it
out in float32; the tensorrt form is refused by the spec, TensorRT's Attention taking no softcap); ``sinks``
(decomposed: one more column of logits in the softmax, dropped after it; fused and tensorrt: one more key slot whose
key and value are zeros and whose additive mask value is the head's sink, so its logit is exactly 0 * scale,
soft-capped to 0, plus the sink; gqa: GroupQueryAttention's ``head_sink`` input with ``smooth_softmax``, measured to
be the sink in the denominator with the row's max taken over it; static-cache: refused by the spec).

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

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from ropeexport.components import MICROSOFT
from ropeexport.components.attention.spec import OPSETS, AttentionSpec, check_weights
from ropeexport.components.linear import linear
from ropeexport.components.norm import norm
from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.graph.compose import call
from ropeexport.graph.onnx_io import GraphBuilder, make_model
from ropeexport.numerics import round_once

INPUTS = ("hidden", "position_ids", "attention_mask", "past_key", "past_value")
OUTPUTS = ("output", "present_key", "present_value")


def _heads(g: GraphBuilder, x: str, heads: int, d: int, name: str) -> str:
    """[b, s, heads * d] -> [b, heads, s, d]."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    split = g.op("Reshape", [x, g.const(f"{name}_heads_shape", i64(0, 0, heads, d))])
    return g.op("Transpose", [split], perm=[0, 2, 1, 3])


def _window(g: GraphBuilder, causal: str, key_slot: str, query_slot: str, window: int) -> str:
    """``causal`` narrowed to a sliding window: key slot j stays visible to query slot i only if i - j < window
    (transformers' rule, on cache slots, as Mistral and Phi-3 count them).
    """  # noqa: D205
    if not window:
        return causal
    reach = g.op("Sub", [query_slot, g.const("window", np.array(window, np.int64))])
    return g.op("And", [causal, g.op("Greater", [key_slot, reach])])


def _static_mask(g: GraphBuilder) -> str:
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


def _mask(g: GraphBuilder, window: int = 0, shared: bool = False) -> str:
    """bool [b, 1, s, t]: key j visible to query i iff j <= i + p (and i + p - j < window, when given) and
    attention_mask[b, j] is 1.

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
    causal = _window(g, causal, keys, queries, window)
    real = g.op("Cast", ["attention_mask"], to=TensorProto.BOOL)  # [b, t]
    real = g.op("Unsqueeze", [real, g.const("mask_axes", i64(1, 2))])  # [b, 1, 1, t]
    return g.op("And", [causal, real], name="attention_visible")  # [b, 1, s, t]


def _repeat_kv(g: GraphBuilder, x: str, spec: AttentionSpec, name: str) -> str:
    """[b, KV, t, d] -> [b, H, t, d]: query head h reads key/value head h // (H / KV)."""
    H, KV, d = spec.num_heads, spec.num_kv_heads, spec.head_dim
    if H == KV:
        return x
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    grouped = g.op("Unsqueeze", [x, g.const(f"{name}_group_axis", i64(2))])  # [b, KV, 1, t, d]
    shape = g.op(
        "Concat",
        [g.op("Shape", [grouped], end=2), g.const(f"{name}_group", i64(H // KV)), g.op("Shape", [grouped], start=3)],
        axis=0,
    )
    return g.op("Reshape", [g.op("Expand", [grouped, shape]), g.const(f"{name}_heads_shape", i64(0, H, -1, d))])


def _scale(spec: AttentionSpec) -> float:
    """The logits' scale: the spec's, or 1 / sqrt(d)."""
    return spec.scale if spec.scale else 1.0 / math.sqrt(spec.head_dim)


def _softcap(g: GraphBuilder, spec: AttentionSpec, logits: str) -> str:
    """cap * tanh(logits / cap), in float32 and rounded once back to the dtype; ``logits`` as it is without a cap.

    Computed in float32 below fp32: transformers' eager attention divides, takes tanh and multiplies in the dtype
    (three fp16 roundings of values near the cap); one rounding is what the fp16 logits carry anyway.
    """
    if not spec.logit_softcap:
        return logits
    wide = logits if spec.dtype == "fp32" else g.op("Cast", [logits], to=TensorProto.FLOAT)
    cap = g.const("softcap", np.array(spec.logit_softcap, np.float32))
    capped = g.op("Mul", [g.op("Tanh", [g.op("Div", [wide, cap])]), cap])
    return capped if spec.dtype == "fp32" else g.op("Cast", [capped], to=DTYPES[spec.dtype].onnx)


def _sink_column(g: GraphBuilder, logits: str, sinks: str) -> str:
    """logits [b, H, s, t] -> [b, H, s, t + 1]: each head's sink (``sinks`` [1, H, 1, 1]) as one more column."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    shape = g.op("Concat", [g.op("Shape", [logits], end=3), g.const("sink_width", i64(1))], axis=0)
    return g.op("Concat", [logits, g.op("Expand", [sinks, shape])], axis=-1)


def _zero_slot(g: GraphBuilder, spec: AttentionSpec, k: str, kv: list[str]) -> list[str]:
    """Each of ``kv`` [b, KV, t, d] with one more slot of zeros at the end (the sinks' slot: a zero key's logit is
    exactly 0, a zero value adds nothing), [b, KV, t + 1, d].
    """  # noqa: D205
    zeros = g.const("sink_slot", round_once(np.zeros((1, spec.num_kv_heads, 1, spec.head_dim)), spec.dtype))
    rows = g.op("Concat", [g.op("Shape", [k], end=1), g.const("sink_slot_rest", np.ones(3, np.int64))], axis=0)
    slot = g.op("Expand", [zeros, rows])  # [b, KV, 1, d]
    return [g.op("Concat", [x, slot], axis=2) for x in kv]


def _attend_decomposed(
    g: GraphBuilder, spec: AttentionSpec, q: str, k: str, v: str, mask: str, bias: str | None, sinks: str | None = None
) -> str:
    """softmax(q k^T * scale (soft-capped) + bias, masked (with the sinks' column)) v with the cache concatenated;
    [b, H, s, d].
    """  # noqa: D205
    keys = g.op("Concat", ["past_key", k], axis=2, name="present_key")
    values = g.op("Concat", ["past_value", v], axis=2, name="present_value")
    keys, values = _repeat_kv(g, keys, spec, "keys"), _repeat_kv(g, values, spec, "values")
    logits = g.op("MatMul", [q, g.op("Transpose", [keys], perm=[0, 1, 3, 2])])
    scale = g.const("scale", round_once(np.array(_scale(spec)), spec.dtype))
    logits = _softcap(g, spec, g.op("Mul", [logits, scale]))  # the cap after the scale, before the bias and mask
    if bias is not None:  # after the scale, as ALiBi and transformers add it
        logits = g.op("Add", [logits, bias])
    dtype = DTYPES[spec.dtype]
    hidden_value = g.const("masked_logit", round_once(np.array(dtype.finite_min), spec.dtype))
    logits = g.op("Where", [mask, logits, hidden_value])  # finite: a row that sees nothing stays free of NaN
    # softmax in float32 below fp32, as transformers' eager attention computes it
    wide = logits if spec.dtype == "fp32" else g.op("Cast", [logits], to=TensorProto.FLOAT)
    if sinks is not None:  # the sinks join the softmax as one more column (exact in float32), dropped after it
        column = sinks if spec.dtype == "fp32" else g.op("Cast", [sinks], to=TensorProto.FLOAT)
        wide = _sink_column(g, wide, column)
    weights = g.op("Softmax", [wide], axis=-1)
    if sinks is not None:
        i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
        ends = [g.const("sink_drop_start", i64(0)), g.const("sink_drop_end", i64(-1)), g.const("sink_axis", i64(-1))]
        weights = g.op("Slice", [weights, *ends])
    if spec.dtype != "fp32":
        weights = g.op("Cast", [weights], to=dtype.onnx)
    attended = g.op("MatMul", [weights, values])  # [b, H, s, d]
    return g.op("Mul", [attended, _sees(g, spec, mask)])  # 0 where a query sees no key


def _attributes(spec: AttentionSpec) -> dict[str, Any]:
    """Attention's scale, its softcap when asked, and its softmax in float32 below fp32, as transformers' eager
    attention and the decomposed form do.
    """  # noqa: D205
    attributes: dict[str, Any] = {"scale": _scale(spec)}
    if spec.logit_softcap:
        attributes["softcap"] = spec.logit_softcap
    return attributes if spec.dtype == "fp32" else attributes | {"softmax_precision": TensorProto.FLOAT}


def _sees(g: GraphBuilder, spec: AttentionSpec, mask: str) -> str:
    """[b, 1, s, 1] in the dtype: 1 where a query sees at least one key, else 0 (its output must be zeros)."""
    flags = g.op("Cast", [mask], to=DTYPES[spec.dtype].onnx)
    if OPSETS[spec.graph] >= 18:  # ReduceMax reads its axes from an input since opset 18, an attribute before
        return g.op("ReduceMax", [flags, g.shared_const("last_axis", np.array([-1], np.int64))], keepdims=1)
    return g.op("ReduceMax", [flags], axes=[-1], keepdims=1)


def _additive(g: GraphBuilder, spec: AttentionSpec, mask: str, bias: str | None, sinks: str | None = None) -> str:
    """The mask as an additive term in the dtype: the bias (or 0) where visible, the most negative finite value else;
    [b, 1 | H, s, t]. With ``sinks`` [1, H, 1, 1]: per head, and each head's sink as the mask of one more slot (the
    sinks' zero key, ``_zero_slot``), [b, H, s, t + 1].
    """  # noqa: D205
    if bias is not None:
        open_ = bias
    elif sinks is not None:  # zeros per head, so the sinks' column can join: [b, H, s, t]
        open_ = g.const("mask_open_heads", round_once(np.zeros((1, spec.num_heads, 1, 1)), spec.dtype))
    else:
        open_ = g.const("mask_open", round_once(np.array(0.0), spec.dtype))
    closed = g.const("mask_closed", round_once(np.array(DTYPES[spec.dtype].finite_min), spec.dtype))
    additive = g.op("Where", [mask, open_, closed])
    return additive if sinks is None else _sink_column(g, additive, sinks)


def _attend_tensorrt(
    g: GraphBuilder, spec: AttentionSpec, q: str, k: str, v: str, mask: str, bias: str | None, sinks: str | None = None
) -> str:
    """The cache concatenated here, then a cache-less 4-D Attention with an additive mask; [b, H, s, d]. With sinks,
    the keys and values it reads end in the sinks' zero slot (one more copy of the cache per call).
    """  # noqa: D205
    keys = g.op("Concat", ["past_key", k], axis=2, name="present_key")
    values = g.op("Concat", ["past_value", v], axis=2, name="present_value")
    if sinks is not None:
        keys, values = _zero_slot(g, spec, k, [keys, values])
    additive = _additive(g, spec, mask, bias, sinks)
    attended = g.op("Attention", [q, keys, values, additive], name="attention", **_attributes(spec))
    return g.op("Mul", [attended, _sees(g, spec, mask)])


def _attend_static(g: GraphBuilder, spec: AttentionSpec, q: str, k: str, v: str, mask: str, bias: str | None) -> str:
    """New keys and values written into the buffers at cache_length, then Attention over the valid prefix."""
    keys = g.op("TensorScatter", ["past_key", k, "cache_length"], axis=-2, name="present_key")  # TensorRT: -2 only
    values = g.op("TensorScatter", ["past_value", v, "cache_length"], axis=-2, name="present_value")
    s = g.op("Shape", ["hidden"], start=1, end=2)  # [1]
    valid = g.op("Add", ["cache_length", s], name="nonpad_kv_seqlen")  # [b]: slots past it are never read
    attn_mask = mask if bias is None else _additive(g, spec, mask, bias)
    attended = g.op("Attention", [q, keys, values, attn_mask, "", "", valid], name="attention", **_attributes(spec))
    return attended if bias is None else g.op("Mul", [attended, _sees(g, spec, mask)])


def _seqlens(g: GraphBuilder) -> tuple[str, str]:
    """GroupQueryAttention's (seqlens_k [b], total_sequence_length) int32: every row's buffer full, t - 1 and t."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    t = g.op("Shape", ["attention_mask"], start=1, end=2)  # [1]
    total = g.op("Cast", [g.op("Squeeze", [t, g.const("gqa_axis0", i64(0))])], to=TensorProto.INT32)
    b = g.op("Shape", ["position_ids"], start=0, end=1)  # one for all layers (see _mask)
    last = g.op("Sub", [total, g.const("gqa_one", np.array(1, np.int32))])
    return g.op("Expand", [last, b], name="seqlens_k"), total  # the last slot of each (full) buffer


@dataclass(frozen=True)
class KernelRotary:
    """The rotation GroupQueryAttention does itself (``do_rotary``) once the cache holds tokens (``_kernel_rotary``).

    ``packed``: the projection [b, s, (H + 2 KV) d] the kernel reads whole; ``tables``: the piece's cos and sin
    [rows, r/2] and its row per token [b, s] (the same inputs its RotaryEmbedding nodes read); ``interleaved``: the
    pairs' layout; ``explicit``: the Split and the piece's two RotaryEmbedding nodes, which a first prompt runs.
    """

    packed: str
    tables: tuple[str, str, str]
    interleaved: int
    explicit: tuple[onnx.NodeProto, ...]


def _kernel_rotary(g: GraphBuilder, spec: AttentionSpec, q: str, k: str, v: str) -> KernelRotary | None:
    """Take the projection's Split and the piece's RotaryEmbedding nodes out of ``g`` for ``_gqa`` to branch on, when
    GroupQueryAttention can rotate in their place; None (``g`` unchanged) when it cannot.

    It can when the piece rotates query and key with one table by rows (a static or a switched schedule: not dynamic
    NTK's per-token tables), straight from the projection (no qk_norm between), in a geometry ONNX Runtime 1.31's CPU
    kernel runs (head_dim a multiple of 16, r/2 a multiple of 8). Decode steps then run three nodes fewer a layer:
    the Split and two RotaryEmbedding (with the bare branch of ``_gqa``: Llama-3.2-1B int4's decode step at past
    2048, 0.98x of the builder's before, 1.01x after, ``tools/session_ab.py``; ``docs/status/speed.md``).
    """  # noqa: D205
    producers = {o: n for n in g.nodes for o in n.output}
    rotations = [producers.get(q), producers.get(k)]
    if any(n is None or n.op_type != "RotaryEmbedding" or len(n.input) != 4 for n in rotations):
        return None  # no rotary piece, a per-token table (dynamic NTK), or nothing rotated here
    rq, rk = rotations
    assert rq is not None and rk is not None
    split = producers.get(rq.input[0])
    if split is None or split.op_type != "Split" or list(split.output) != [rq.input[0], rk.input[0], v]:
        return None  # a norm between the projection and the rotation (qk_norm)
    attributes = [
        {a.name: helper.get_attribute_value(a) for a in n.attribute if a.name != "num_heads"} for n in (rq, rk)
    ]
    if list(rq.input[1:]) != list(rk.input[1:]) or attributes[0] != attributes[1]:
        return None
    rotary_dim = int(attributes[0].get("rotary_embedding_dim") or spec.head_dim)
    if spec.head_dim % 16 or (rotary_dim // 2) % 8:
        return None
    moved = (split, rq, rk)
    if any(set(n.input) & {*split.output, q, k} for n in g.nodes if all(n is not m for m in moved)):
        return None  # another node reads the rotated tensors
    g.nodes[:] = [n for n in g.nodes if all(n is not m for m in moved)]
    tables = (rq.input[1], rq.input[2], rq.input[3])
    return KernelRotary(split.input[0], tables, int(attributes[0].get("interleaved", 0)), moved)


def _gqa(
    g: GraphBuilder,
    spec: AttentionSpec,
    qkv: tuple[str, str, str],
    lengths: tuple[str, str],
    additive: str,
    sinks: str | None,
    rotary: KernelRotary | None = None,
    real: str | None = None,
) -> str:
    """The GroupQueryAttention node over the cache, its present outputs named; its output [b, s, H * d].

    Every row's buffer counts as full (seqlens_k = t - 1, so its causal rule is the bottom-right one); what that rule
    does not cover goes in ``additive`` (attention_bias [b, 1 | H, s, t]). past and present may be one buffer
    [b, KV, capacity, d] (ONNX Runtime then writes the new keys in place at slot t - s). ``sinks`` [H]: its
    ``head_sink`` input, read with ``smooth_softmax``: exp(sink - max) in each row's denominator, the max taken over
    it (measured on ONNX Runtime 1.31 CPU).

    With ``rotary`` (``_kernel_rotary``), an If on t > s: once the cache holds tokens, the kernel rotates the packed
    projection itself by the piece's tables at the piece's rows (ONNX Runtime 1.31 CPU honours position_ids then,
    row by row); a first prompt (t = s) runs the piece's RotaryEmbedding nodes and the kernel without rotation, since
    there the kernel rotates every row at position_ids[0, 0] + i whatever the other position_ids say
    (``tests/block/test_gqa_rotary.py``), which a left-padded batch would get wrong. ``real`` ([b, t] bool, given when
    ``additive`` carries the padding alone and ``sinks`` only zeroes the rows that see no key): the rotating branch
    runs only when no slot is padding as well, and then without attention_bias and head_sink, which have nothing to
    hide (the kernel's causal rule is the whole mask; Llama-3.2-1B int4 at past 2048: 0.92x -> 0.98x of the
    builder's decode step, ``tools/session_ab.py``); a padded batch takes the explicit branch.
    """
    seqlens, total = lengths
    tail = [additive] if sinks is None else [additive, sinks]
    variants: dict[str, Any] = {}
    if spec.logit_softcap:  # after the scale, before attention_bias (measured on ONNX Runtime 1.31 CPU)
        variants["softcap"] = spec.logit_softcap
    if sinks is not None:
        variants["smooth_softmax"] = 1
    kernel = {"num_heads": spec.num_heads, "kv_num_heads": spec.num_kv_heads, "scale": _scale(spec), **variants}
    if rotary is None:
        inputs = [*qkv, "past_key", "past_value", seqlens, total, "", "", "", *tail]
        attended, present_key, present_value = g.op("GroupQueryAttention", inputs, n_out=3, name="attention",
                                                    domain=MICROSOFT, **kernel)  # fmt: skip
    else:
        t = g.op("Shape", ["attention_mask"], start=1, end=2)
        s = g.op("Shape", ["position_ids"], start=1, end=2)
        cached = g.op("Greater", [t, s], name="cache_holds_tokens")  # [1]: the same for every layer
        cos, sin, rows = rotary.tables
        rotating = [rotary.packed, "", "", "past_key", "past_value", seqlens, total, cos, sin, rows]
        rotating_kernel = dict(kernel)
        if real is None:
            rotating += tail
        else:  # no padding anywhere: the kernel's causal rule is the whole mask (docstring)
            every = g.op("ReduceMin", [g.op("Cast", [real], to=TensorProto.INT32)], keepdims=0)  # 1: all real
            cached = g.op("And", [cached, g.op("Cast", [every], to=TensorProto.BOOL)], name="cached_and_unpadded")
            rotating_kernel.pop("smooth_softmax", None)
        explicit = [*qkv, "past_key", "past_value", seqlens, total, "", "", "", *tail]
        branches = {}
        rotation = {"do_rotary": 1, "rotary_interleaved": rotary.interleaved}
        for label, inputs, attributes in (("rotating", rotating, rotating_kernel | rotation),
                                          ("explicit", explicit, kernel)):  # fmt: skip
            outputs = [f"{g.prefix}attention_{label}_{i}" for i in range(3)]
            node = helper.make_node("GroupQueryAttention", inputs, outputs, name=f"{g.prefix}attention_{label}_node",
                                    domain=MICROSOFT, **attributes)  # fmt: skip
            nodes = [node] if label == "rotating" else [*rotary.explicit, node]
            dtype = DTYPES[spec.dtype].onnx
            values = [helper.make_tensor_value_info(o, dtype, None) for o in outputs]
            branches[label] = helper.make_graph(nodes, f"{g.prefix}attention_{label}", [], values)
        attended, present_key, present_value = g.op("If", [cached], n_out=3, name="attention",
                                                    then_branch=branches["rotating"],
                                                    else_branch=branches["explicit"])  # fmt: skip
    g.name_output(present_key, "present_key")
    g.name_output(present_value, "present_value")
    return attended


def _attend_gqa_padded(
    g: GraphBuilder, spec: AttentionSpec, q: str, k: str, v: str, rotary: KernelRotary | None = None
) -> str:
    """GroupQueryAttention when only padding hides keys (no window, bias or sinks): [b, s, H * d] out.

    The kernel's own causal rule (bottom-right, every buffer full) is the mask's causal part, so attention_bias
    carries the padding alone: 0 for a real slot, -inf for a padded one, [b, 1, s, t] (the kernel wants s rows; a
    [b, 1, 1, t] row is refused). A query that sees no real key (a left-padded prompt's padding) must output zeros:
    ``head_sink`` = the dtype's most negative finite value with ``smooth_softmax`` does it inside the kernel. The
    sink joins each row's max and denominator as exp(sink - max): for a row with a real key the max is a real logit
    and the term is exp(-3.4e38 - max) = 0 (the softmax unchanged; measured to 1 ulp in fp32 against the additive
    mask); for a row whose every logit is -inf the max is the sink, every key weighs exp(-inf) = 0 and the sink's
    value slot is not a key: the output is exactly 0. Eleven nodes fewer per decoder than the full mask and the
    per-layer "sees" factor, and one Mul fewer per layer (``tools/bench_serving.py``'s decode step).
    """
    i64 = lambda *vals: np.array(vals, np.int64)  # noqa: E731
    slots = g.op("Cast", ["attention_mask"], to=TensorProto.BOOL)  # [b, t]
    real = g.op("Unsqueeze", [slots, g.const("mask_axes", i64(1, 2))])  # [b, 1, 1, t]
    # [b, 1, s, 1] from position_ids (every layer reads the same, so ONNX Runtime builds this once per decoder)
    rows = g.op("Shape", [g.op("Unsqueeze", ["position_ids", g.const("query_rows_axes", i64(1, 3))])])
    real = g.op("Expand", [real, rows])  # [b, 1, s, t]
    opened = g.const("mask_open", round_once(np.array(0.0), spec.dtype))
    closed = g.const("mask_padded", round_once(np.array(-np.inf), spec.dtype))
    additive = g.op("Where", [real, opened, closed], name="attention_padding")
    floor = round_once(np.full(spec.num_heads, DTYPES[spec.dtype].finite_min), spec.dtype)
    lengths = _seqlens(g)  # before the sink: the initializers' order is the pinned bytes' (tests/pinned)
    sink = g.const("empty_row_sink", floor)
    return _gqa(g, spec, (q, k, v), lengths, additive, sink, rotary, real=slots)


def _attend_gqa(
    g: GraphBuilder,
    spec: AttentionSpec,
    q: str,
    k: str,
    v: str,
    mask: str,
    bias: str | None,
    sinks: str | None = None,
    rotary: KernelRotary | None = None,
) -> str:
    """ONNX Runtime's GroupQueryAttention over the cache with the full mask (a window, a bias piece or sinks);
    query [b, s, H * d], key and value [b, s, KV * d] in, [b, s, H * d] out.

    Query and key arrive rotated by the family's piece (as in the other forms), fed the 3-D tensors straight from the
    projection (RotaryEmbedding takes [b, s, heads * d] with its num_heads): GroupQueryAttention's own rotary
    (do_rotary) positions a first prompt at position_ids[:, 0] + i whatever the other position_ids say (measured on
    ONNX Runtime 1.31 CPU), so a left-padded prompt would be rotated at the wrong positions. What the kernel's causal
    rule (``_gqa``) does not cover (padding, a window, a bias) goes in attention_bias [b, 1 | H, s, t]; the mask reads
    p as t - s (``_mask``'s shared). How ``decoder.serve`` and onnxruntime-genai run this form.
    """  # noqa: D205
    H, d = spec.num_heads, spec.head_dim
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    lengths = _seqlens(g)
    attended = _gqa(g, spec, (q, k, v), lengths, _additive(g, spec, mask, bias), sinks, rotary)
    # 0 where a query sees no key: one Mul per layer by a [b, s, 1] (or, with a per-head bias, [b, s, H * d]) factor
    # that reads only the mask, so ONNX Runtime builds it once for every layer of a decoder.
    sees = g.op("Transpose", [_sees(g, spec, mask)], perm=[0, 2, 1, 3])  # [b, s, 1 | H, 1]
    if bias is not None:  # a bias hides keys per head: the factor per head, repeated over its d columns
        sees = g.op("Expand", [sees, g.const("gqa_head_columns", i64(1, 1, 1, d))])  # [b, s, H, d]
        sees = g.op("Reshape", [sees, g.const("gqa_sees_heads", i64(0, 0, H * d))])
    else:
        sees = g.op("Squeeze", [sees, g.const("gqa_sees_axis", i64(3))])  # [b, s, 1]
    return g.op("Mul", [attended, sees])


def _attend_fused(
    g: GraphBuilder, spec: AttentionSpec, q: str, k: str, v: str, mask: str, bias: str | None, sinks: str | None = None
) -> str:
    """Attention reading past_key / past_value and writing present_* itself; [b, H, s, d].

    With sinks, the new keys and values end in the sinks' zero slot, so the present Attention writes ends in it too:
    it is sliced off (one more copy of the cache per call; the cache never holds the slot).
    """
    attn_mask = mask if bias is None and sinks is None else _additive(g, spec, mask, bias, sinks)
    if sinks is not None:
        k, v = _zero_slot(g, spec, k, [k, v])
    attended, present_key, present_value = g.op(
        "Attention",
        [q, k, v, attn_mask, "past_key", "past_value"],
        n_out=3,
        name="attention",
        **_attributes(spec),
    )
    if sinks is not None:
        i64 = lambda *vals: np.array(vals, np.int64)  # noqa: E731
        ends = [g.const("sink_drop_start", i64(0)), g.const("sink_drop_end", i64(-1)), g.const("sink_axis", i64(2))]
        present_key, present_value = (g.op("Slice", [x, *ends]) for x in (present_key, present_value))
    g.name_output(present_key, "present_key")
    g.name_output(present_value, "present_value")
    if attn_mask != mask:  # an additive mask leaves a query that sees nothing uniform weights, not zeros
        attended = g.op("Mul", [attended, _sees(g, spec, mask)])
    return attended


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
    proj = np.concatenate([arrays["q_proj"], arrays["k_proj"], arrays["v_proj"]], axis=1)
    weight = spec.weight_format.store(g, "qkv_proj", proj)
    bias = None
    if any(f"{n}_bias" in arrays for n in "qkv"):
        widths = {"q": H * d, "k": KV * d, "v": KV * d}
        joined = np.concatenate([arrays.get(f"{n}_bias", np.zeros(widths[n])) for n in "qkv"])
        bias = g.const("qkv_bias", round_once(joined, spec.dtype))
    out = linear(g, "hidden", weight, bias)
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
    for x, name, heads in ((q, "q", spec.num_heads), (k, "k", spec.num_kv_heads)):
        weight = g.const(f"{name}_norm", round_once(arrays[f"{name}_norm"], spec.dtype))
        if flat:  # [b, s, heads * d] -> [b, s, heads, d]: the norm reads the last axis
            x = g.op("Reshape", [x, g.const(f"{name}_norm_heads", i64(0, 0, heads, d))])
        x = norm(g, spec.qk_norm, x, weight, None, OPSETS[spec.graph])
        if flat:
            x = g.op("Reshape", [x, g.const(f"{name}_norm_flat", i64(0, 0, heads * d))])
        out.append(x)
    return out[0], out[1]


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
    H = spec.num_heads
    arrays = dict(weights)
    hidden = int(arrays["q_proj"].shape[0])
    if spec.window and spec.graph == "static-cache":
        raise SpecError("graph", "a sliding window is not offered in the static-cache form; use fused or decomposed")
    check_weights(spec, arrays)
    q, k, v = _qkv(g, spec, arrays, flat=spec.graph == "gqa")
    q, k = _qk_norms(g, spec, arrays, q, k, flat=spec.graph == "gqa")  # each head normalized before the rotation
    stored = {"o_proj": spec.weight_format.store(g, "o_proj", arrays["o_proj"])}
    if "o_bias" in arrays:
        stored["o_bias"] = g.const("o_bias", round_once(arrays["o_bias"], spec.dtype))
    piece = spec.position
    rotary = piece.rotary if piece is not None else None
    bias = piece.bias if piece is not None else None
    if rotary is not None:  # the gqa form's query and key are 3-D: the fused piece's RotaryEmbedding takes both
        rotated = call(g, rotary, {"query": q, "key": k, "position_ids": "position_ids"}, "rope/")
        q, k = rotated["query_out"], rotated["key_out"]
    kernel_rotary = _kernel_rotary(g, spec, q, k, v) if spec.graph == "gqa" and rotary is not None else None
    added = None
    if bias is not None:
        wired = {"query_position_ids": "position_ids", "key_position_ids": _key_positions(g)}
        added = call(g, bias, wired, "bias/")["attention_bias"]  # [b, H, s, t]
    static = spec.graph == "static-cache"
    if spec.graph == "gqa" and added is None and not spec.window and not spec.sinks:
        # GroupQueryAttention's own causal rule covers everything but the padding: no [s, t] mask to build
        merged = _attend_gqa_padded(g, spec, q, k, v, kernel_rotary)
        return _finish(g, spec, merged, stored, hidden, static, rotary, bias, metadata, name)
    mask = _static_mask(g) if static else _mask(g, spec.window, shared=spec.graph == "gqa")
    if added is not None:
        # A key the method itself hides (-inf: the bias's causal rule by position) counts as hidden everywhere, so a
        # query whose every key is hidden outputs zeros, as the eager and float64 blocks do.
        wide = added if spec.dtype == "fp32" else g.op("Cast", [added], to=TensorProto.FLOAT)
        # x > -inf holds for every finite x (the bias is clamped to the dtype's finite range): Greater parses on every
        # TensorRT release in the support table, IsInf on none before 10.x.
        finite = g.op("Greater", [wide, g.const("minus_inf", np.array(-np.inf, np.float32))])
        mask = g.op("And", [mask, finite], name="attention_open")  # [b, H, s, t]
    sinks = None
    if spec.sinks:  # [H] for GroupQueryAttention's head_sink, else [1, H, 1, 1] against the logits
        shape = (H,) if spec.graph == "gqa" else (1, H, 1, 1)
        sinks = g.const("sinks", round_once(arrays["sinks"].reshape(shape), spec.dtype))
    if spec.graph == "gqa":
        attended = _attend_gqa(g, spec, q, k, v, mask, added, sinks, kernel_rotary)
    elif static:
        attended = _attend_static(g, spec, q, k, v, mask, added)
    elif spec.graph == "tensorrt":
        attended = _attend_tensorrt(g, spec, q, k, v, mask, added, sinks)
    elif spec.graph == "fused":
        attended = _attend_fused(g, spec, q, k, v, mask, added, sinks)
    else:
        attended = _attend_decomposed(g, spec, q, k, v, mask, added, sinks)
    return _finish(g, spec, attended, stored, hidden, static, rotary, bias, metadata, name)


def _finish(
    g: GraphBuilder,
    spec: AttentionSpec,
    attended: str,
    stored: Mapping[str, str],
    hidden: int,
    static: bool,
    rotary: onnx.ModelProto | None,
    bias: onnx.ModelProto | None,
    metadata: Mapping[str, str] | None,
    name: str,
) -> onnx.ModelProto:
    """The output projection and the model around the layer: ``attended`` is [b, s, H * d] in the gqa form, else
    [b, H, s, d].
    """  # noqa: D205
    H, KV, d = spec.num_heads, spec.num_kv_heads, spec.head_dim
    i64 = lambda *vals: np.array(vals, np.int64)  # noqa: E731
    merged = attended
    if spec.graph != "gqa":
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
    graph = helper.make_graph(
        g.nodes,
        name,
        inputs,
        [
            io("output", dtype, ["batch", "seq", hidden]),
            io("present_key", dtype, ["batch", KV, total, d]),
            io("present_value", dtype, ["batch", KV, total, d]),
        ],
        g.initializers,
    )
    if metadata is None:
        piece_graph = rotary if rotary is not None else bias
        metadata = _guarded(piece_graph) if piece_graph is not None else {}
    domains = {MICROSOFT: 1} if spec.graph == "gqa" or spec.weight_format.quantized else None
    return make_model(graph, OPSETS[spec.graph], dict(metadata), domains)


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
