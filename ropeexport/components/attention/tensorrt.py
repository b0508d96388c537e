"""The ``tensorrt`` form: what TensorRT 10.15 parses (``ropeexport check-trt``).

The cache concatenated outside a 4-D opset-23 ``Attention`` that takes no cache, the mask additive in the dtype (0 or
its most negative finite value, never a boolean and never ``is_causal``, which TensorRT aligns top-left), rows that
see no key multiplied by 0. No soft cap (TensorRT's Attention takes none: ``forms.FORMS``).
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


FORM = "tensorrt"
FLAT = False  # query, key and value as [b, s, heads * d] (True) or [b, heads, s, d]


def attend(g: GraphBuilder, spec: AttentionSpec, q: str, k: str, v: str, added: str | None,
           arrays: Mapping[str, np.ndarray]) -> str:  # fmt: skip
    """The ``tensorrt`` lowering (``graph.Lowering``: query, key and value rotated in, [b, H, s, d] out)."""
    mask, sinks = masks.cache_mask(g, spec, added, arrays)
    return _attend_tensorrt(g, spec, q, k, v, mask, added, sinks)


def _attend_tensorrt(
    g: GraphBuilder, spec: AttentionSpec, q: str, k: str, v: str, mask: str, bias: str | None, sinks: str | None = None
) -> str:
    """The cache concatenated here, then a cache-less 4-D Attention with an additive mask; [b, H, s, d]. With sinks,
    the keys and values it reads end in the sinks' zero slot (one more copy of the cache per call).
    """  # noqa: D205
    keys = g.op("Concat", ["past_key", k], axis=2, name="present_key")
    values = g.op("Concat", ["past_value", v], axis=2, name="present_value")
    if sinks is not None:
        keys, values = zero_slot(g, spec, k, [keys, values])
    logits_mask = additive(g, spec, mask, bias, sinks)
    attended = g.op("Attention", [q, keys, values, logits_mask], name="attention", **attributes(spec))
    return g.op("Mul", [attended, sees(g, spec, mask)])
