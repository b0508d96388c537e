"""ALiBi: ``bias``, ``scores`` and ``attention`` artifacts."""

from __future__ import annotations

import numpy as np

from ropeexport.encodings.alibi import AlibiSpec, alibi_bias
from ropeexport.export.alibi import alibi_bias_nodes
from ropeexport.families.bias import register_bias_family


def alibi_oracle(spec: AlibiSpec, qpos: np.ndarray, kpos: np.ndarray) -> np.ndarray:
    """float64 -m_h (i - j) (or -m_h |i - j|), with m_h = 2^(-8h/n) written out here for power-of-two n."""
    from ropeexport.encodings.alibi import alibi_slopes

    distance = (qpos[:, None, :, None] - kpos[:, None, None, :]).astype(np.float64)
    if not spec.causal:
        distance = np.abs(distance)
    return -alibi_slopes(spec.num_heads)[None, :, None, None] * distance


register_bias_family("alibi", alibi_bias_nodes, alibi_bias, alibi_oracle)
