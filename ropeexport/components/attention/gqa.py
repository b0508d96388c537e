"""The ``gqa`` form: ONNX Runtime's ``GroupQueryAttention`` (com.microsoft), how serving runs a decoder.

Its own causal rule with the padding alone as ``attention_bias`` and the rows that see no key zeroed by
``head_sink`` (``_attend_gqa_padded``), or, with a window, a bias piece or sinks, the full mask as ``attention_bias``
(``_attend_gqa``). Once the cache holds tokens the kernel rotates decode steps itself where it can
(``_kernel_rotary``). Sinks: its ``head_sink`` input with ``smooth_softmax``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from ropeexport.components import MICROSOFT

# the mask rules by module: a planted bug in a test replaces one for every form (tests/block)
from ropeexport.components.attention import masks
from ropeexport.components.attention.masks import (
    additive,
    scale_of,
    sees,
    sinks_const,
    visible,
)
from ropeexport.components.attention.spec import AttentionSpec
from ropeexport.dtypes import DTYPES
from ropeexport.numerics import round_once

if TYPE_CHECKING:
    from ropeexport.graph.onnx_io import GraphBuilder


FORM = "gqa"
FLAT = True  # query, key and value as [b, s, heads * d] (True) or [b, heads, s, d]


def attend(g: GraphBuilder, spec: AttentionSpec, q: str, k: str, v: str, added: str | None,
           arrays: Mapping[str, np.ndarray]) -> str:  # fmt: skip
    """The ``gqa`` lowering (``graph.Lowering``: query, key and value rotated in, [b, s, H * d] out)."""
    # None: the kernel cannot rotate in the piece's place, nor where the rotated keys are given out (kv_sharing)
    rotary = None if spec.kv_sharing == "store" else _kernel_rotary(g, spec, q, k, v)
    if added is None and not spec.window and not spec.chunk and not spec.sinks:
        # GroupQueryAttention's own causal rule covers everything but the padding: no [s, t] mask to build
        return _attend_gqa_padded(g, spec, q, k, v, rotary)
    mask = visible(g, spec, masks.causal_mask(g, spec.window, shared=True, chunk=spec.chunk), added)
    sinks = sinks_const(g, spec, arrays, (spec.num_heads,))
    return _attend_gqa(g, spec, q, k, v, mask, added, sinks, rotary)


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
    kernel = {"num_heads": spec.num_heads, "kv_num_heads": spec.num_kv_heads, "scale": scale_of(spec), **variants}
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
    p as t - s (``causal_mask``'s shared). How ``decoder.serve`` and onnxruntime-genai run this form.
    """  # noqa: D205
    H, d = spec.num_heads, spec.head_dim
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    lengths = _seqlens(g)
    attended = _gqa(g, spec, (q, k, v), lengths, additive(g, spec, mask, bias), sinks, rotary)
    # 0 where a query sees no key: one Mul per layer by a [b, s, 1] (or, with a per-head bias, [b, s, H * d]) factor
    # that reads only the mask, so ONNX Runtime builds it once for every layer of a decoder.
    factor = g.op("Transpose", [sees(g, spec, mask)], perm=[0, 2, 1, 3])  # [b, s, 1 | H, 1]
    if bias is not None:  # a bias hides keys per head: the factor per head, repeated over its d columns
        factor = g.op("Expand", [factor, g.const("gqa_head_columns", i64(1, 1, 1, d))])  # [b, s, H, d]
        factor = g.op("Reshape", [factor, g.const("gqa_sees_heads", i64(0, 0, H * d))])
    else:
        factor = g.op("Squeeze", [factor, g.const("gqa_sees_axis", i64(3))])  # [b, s, 1]
    return g.op("Mul", [attended, factor])
