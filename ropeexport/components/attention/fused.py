"""The ``fused`` form: opset-23 ``Attention`` reading ``past_key`` / ``past_value`` and writing ``present_*`` itself.

The mask a boolean [b, 1, s, past + s] built from the causal rule and ``attention_mask`` (with a bias piece:
additive, [b, H, s, t], the bias where visible, and rows that see no key multiplied by 0); sinks: one more key slot
whose key and value are zeros and whose additive mask value is the head's sink.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

# the mask rules by module: a planted bug in a test replaces one for every form (tests/block)
from ropeexport.components.attention import masks
from ropeexport.components.attention.masks import (
    additive,
    attributes,
    sees,
    zero_slot,
)
from ropeexport.components.attention.spec import AttentionSpec

if TYPE_CHECKING:
    from ropeexport.graph.onnx_io import GraphBuilder


FORM = "fused"
FLAT = False  # query, key and value as [b, s, heads * d] (True) or [b, heads, s, d]


def attend(g: GraphBuilder, spec: AttentionSpec, q: str, k: str, v: str, added: str | None,
           arrays: Mapping[str, np.ndarray]) -> str:  # fmt: skip
    """The ``fused`` lowering (``graph.Lowering``: query, key and value rotated in, [b, H, s, d] out)."""
    mask, sinks = masks.cache_mask(g, spec, added, arrays)
    return _attend_fused(g, spec, q, k, v, mask, added, sinks)


def _attend_fused(
    g: GraphBuilder, spec: AttentionSpec, q: str, k: str, v: str, mask: str, bias: str | None, sinks: str | None = None
) -> str:
    """Attention reading past_key / past_value and writing present_* itself; [b, H, s, d].

    With sinks, the new keys and values end in the sinks' zero slot, so the present Attention writes ends in it too:
    it is sliced off (one more copy of the cache per call; the cache never holds the slot).
    """
    attn_mask = mask if bias is None and sinks is None else additive(g, spec, mask, bias, sinks)
    if sinks is not None:
        k, v = zero_slot(g, spec, k, [k, v])
    attended, present_key, present_value = g.op(
        "Attention",
        [q, k, v, attn_mask, "past_key", "past_value"],
        n_out=3,
        name="attention",
        **attributes(spec),
    )
    if sinks is not None:
        i64 = lambda *vals: np.array(vals, np.int64)  # noqa: E731
        ends = [g.const("sink_drop_start", i64(0)), g.const("sink_drop_end", i64(-1)), g.const("sink_axis", i64(2))]
        present_key, present_value = (g.op("Slice", [x, *ends]) for x in (present_key, present_value))
    g.name_output(present_key, "present_key")
    g.name_output(present_value, "present_value")
    if attn_mask != mask:  # an additive mask leaves a query that sees nothing uniform weights, not zeros
        attended = g.op("Mul", [attended, sees(g, spec, mask)])
    return attended
