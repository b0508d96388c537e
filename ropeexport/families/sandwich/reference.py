"""Sandwich: a parameter-free bias from the inner product of sinusoidal position embeddings.

Chi et al. 2023, "Dissecting Transformer Length Extrapolation via the Lens of Receptive Field Analysis" (ACL 2023,
arXiv:2212.10356).

With sinusoidal embeddings p_m of dimension d' (pairs sin(m w_k), cos(m w_k), w_k = theta^(-2k / d'), k = 1..d'/2),
p_m . p_n = sum_k cos((m - n) w_k), which depends on m - n alone and decays roughly logarithmically with |m - n|.
Sandwich shifts it by d'/2 so that distance 0 has bias 0 and the rest is negative, and scales it per head as ALiBi
scales its slopes, dividing head h (1..H) by 8h / H:

    B[h, i, j] = (sum_{k=1}^{d'/2} cos((i - j) w_k) - d'/2) * H / (8 h)

The frequency indexing (k from 1), the d'/2 shift and the 8h/H division follow NVIDIA NeMo's
SandwichRelativePositionEmbedding, which cites this paper; d' defaults to head_dim, as NeMo passes the per-head
hidden size.

The sum is computed in float64 for every distance 0..max_positions-1 and rounded once to float32: in float32 the
angle (i - j) w_k would err by ~1e-3 rad near distance 10^4, and the cosine with it. The artifact stores that table
[max_positions, heads] and gathers it by |i - j|, so it grows with max_positions (4 * heads bytes per position),
unlike ALiBi's and KERPLE's. Positions outside [0, max_positions) make the gather fail.

Notation: b batch, h heads, q query length, k key length.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from ropeexport.families.bias.reference import finish_bias
from ropeexport.families.sandwich.spec import SandwichSpec
from ropeexport.tensors import check_positions

_CHUNK = 1 << 16  # distances per float64 block (a block holds _CHUNK * d'/2 angles)


def sandwich_table(spec: SandwichSpec) -> np.ndarray:
    """float32 [max_positions, num_heads]: B[h, distance] for distance 0..max_positions-1, rounded once (cached)."""
    return _table(spec.max_positions, spec.num_heads, spec.embedding_dim, spec.theta)


@functools.lru_cache(maxsize=8)
def _table(positions: int, heads: int, dim: int, theta: float) -> np.ndarray:
    omega = theta ** (-2.0 * np.arange(1, dim // 2 + 1, dtype=np.float64) / dim)  # [d'/2]
    inner = np.empty(positions, np.float64)  # p_0 . p_n - d'/2
    for start in range(0, positions, _CHUNK):
        n = np.arange(start, min(start + _CHUNK, positions), dtype=np.float64)
        inner[start : start + n.size] = np.cos(n[:, None] * omega).sum(axis=1) - dim / 2
    scale = heads / (8.0 * np.arange(1, heads + 1, dtype=np.float64))  # [h]: 1 / (8h / H)
    table = (inner[:, None] * scale).astype(np.float32)  # [P, h], one rounding
    table.setflags(write=False)  # shared by every caller through the cache
    return table


def sandwich_bias(spec: SandwichSpec, query_position_ids: torch.Tensor, key_position_ids: torch.Tensor) -> torch.Tensor:
    """Eager bias [b, num_heads, q_len, k_len] in the spec dtype: the float32 table gathered by |i - j|."""
    check_positions(query_position_ids, spec.max_positions, "query_position_ids")
    check_positions(key_position_ids, spec.max_positions, "key_position_ids")
    distance = (query_position_ids[:, :, None] - key_position_ids[:, None, :]).abs()  # [b, q, k]
    raw = torch.from_numpy(np.array(sandwich_table(spec)))[distance].permute(0, 3, 1, 2)  # [b, q, k, h] -> [b, h, q, k]
    return finish_bias(spec, raw, query_position_ids, key_position_ids)
