"""ALiBi's bias subgraph: -m_h * (i - j) (or -m_h * |i - j|) from H float32 slopes and the position ids."""

from __future__ import annotations

import numpy as np

from ropeexport.encodings.alibi import AlibiSpec, spec_slopes
from ropeexport.export.attention import position_grid
from ropeexport.export.onnx_io import GraphBuilder


def alibi_bias_nodes(g: GraphBuilder, spec: AlibiSpec, qpos: str, kpos: str) -> str:
    """float32 bias [b, heads, q, k] before the mask; the artifact stores only the heads' slopes."""
    q, k = position_grid(g)
    distance = g.op("Sub", [q, k])  # i - j, [b, 1, q, k]
    if not spec.causal:
        distance = g.op("Abs", [distance])
    slopes = g.const("neg_slopes", -spec_slopes(spec).astype(np.float32).reshape(1, -1, 1, 1))
    return g.op("Mul", [slopes, distance])
