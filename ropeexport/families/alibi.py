"""ALiBi: ``bias``, ``scores`` and ``attention`` artifacts."""

from __future__ import annotations

import math

import numpy as np

from ropeexport.encodings.alibi import AlibiSpec, alibi_bias
from ropeexport.export.alibi import alibi_bias_nodes
from ropeexport.families.bias import register_bias_family


def _paper_slopes(n: int) -> list[float]:
    """The slopes as the ALiBi authors' code builds them, written apart from ``encodings.alibi.alibi_slopes``.

    A mistake in one then shows against the other: start = ratio = 2^(-2^-(log2 n - 3)) for a power of two n;
    otherwise the closest power of two's slopes, then every other slope of twice that many heads.
    """
    if math.log2(n).is_integer():
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]
    closest = 2 ** math.floor(math.log2(n))
    return _paper_slopes(closest) + _paper_slopes(2 * closest)[0::2][: n - closest]


def alibi_oracle(spec: AlibiSpec, qpos: np.ndarray, kpos: np.ndarray) -> np.ndarray:
    """float64 -m_h (i - j) (or -m_h |i - j|)."""
    distance = (qpos[:, None, :, None] - kpos[:, None, None, :]).astype(np.float64)
    if not spec.causal:
        distance = np.abs(distance)
    return -np.array(_paper_slopes(spec.num_heads))[None, :, None, None] * distance


register_bias_family("alibi", alibi_bias_nodes, alibi_bias, alibi_oracle)
