"""The ``block`` in float64: the ``attention`` component's twin on the block's weights (seeded by default).

The positions come from the family's float64 oracle (RoPE: ``families.rope.oracle.rope_oracle``, the complex form),
never from its exporter or its eager module; attention from the definition (``components.attention.float64``). A
static-cache call is evaluated row by row as the dynamic calls it stands for (``block.static``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ropeexport.block.projections import block_weights, kv_heads
from ropeexport.block.static import is_static, per_row
from ropeexport.components.attention import AttentionSpec
from ropeexport.components.attention.float64 import Bias64, Rotate64, attention64, visible
from ropeexport.recipes import Feeds

__all__ = ["Bias64", "Rotate64", "block_float64", "visible"]


def block_float64(
    spec: Any,
    feeds: Feeds,
    rotate: Rotate64 | None = None,
    bias: Bias64 | None = None,
    weights: Mapping[str, np.ndarray] | None = None,
    window: int = 0,
) -> dict[str, np.ndarray]:
    """float64 output [b, s, hidden] and present_key / present_value [b, KV, t, d].

    ``weights`` and ``window`` as ``block.export.build_block_graph`` takes them (default: the seeded projections).
    ``rotate`` / ``bias``: the family's float64 position function (``components.attention.float64``).
    """
    if is_static(feeds):
        return per_row(feeds, lambda row: block_float64(spec, row, rotate, bias, weights, window))
    attention = AttentionSpec(num_heads=spec.num_heads, num_kv_heads=kv_heads(spec), head_dim=spec.head_dim,
                              dtype=spec.dtype, graph=spec.graph, window=window)  # fmt: skip
    return attention64(attention, feeds, block_weights(spec) if weights is None else weights, rotate, bias)
