"""The ``static-cache`` form: a preallocated cache, as a server keeps it.

``past_key`` / ``past_value`` are buffers [b, KV, capacity, d] and ``cache_length`` [b] says how many tokens each row
holds; opset-24 ``TensorScatter`` writes the new keys and values at cache_length, and ``Attention`` reads the buffer
with ``nonpad_kv_seqlen`` = cache_length + s, ``attention_mask`` [b, capacity] covering the buffer (ONNX Runtime
1.31 still reads the slots past it: they must hold finite values). No sinks, no window (``forms.FORMS``).
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
    visible,
)
from ropeexport.components.attention.spec import AttentionSpec

if TYPE_CHECKING:
    from ropeexport.graph.onnx_io import GraphBuilder


FORM = "static-cache"
FLAT = False  # query, key and value as [b, s, heads * d] (True) or [b, heads, s, d]


def attend(g: GraphBuilder, spec: AttentionSpec, q: str, k: str, v: str, added: str | None,
           arrays: Mapping[str, np.ndarray]) -> str:  # fmt: skip
    """The ``static-cache`` lowering (``graph.Lowering``: query, key and value rotated in, [b, H, s, d] out)."""
    mask = visible(g, spec, masks.static_mask(g), added)
    return _attend_static(g, spec, q, k, v, mask, added)


def _attend_static(g: GraphBuilder, spec: AttentionSpec, q: str, k: str, v: str, mask: str, bias: str | None) -> str:
    """New keys and values written into the buffers at cache_length, then Attention over the valid prefix."""
    keys = g.op("TensorScatter", ["past_key", k, "cache_length"], axis=-2, name="present_key")  # TensorRT: -2 only
    values = g.op("TensorScatter", ["past_value", v, "cache_length"], axis=-2, name="present_value")
    s = g.op("Shape", ["hidden"], start=1, end=2)  # [1]
    valid = g.op("Add", ["cache_length", s], name="nonpad_kv_seqlen")  # [b]: slots past it are never read
    attn_mask = mask if bias is None else additive(g, spec, mask, bias)
    attended = g.op("Attention", [q, keys, values, attn_mask, "", "", valid], name="attention", **attributes(spec))
    return attended if bias is None else g.op("Mul", [attended, sees(g, spec, mask)])
