"""ALiBi (Press et al. 2022, "Train Short, Test Long"): a per-head linear bias -m_h * (i - j) on the logits.

Slopes follow the paper's recipe: for n heads a power of two, m_h = 2^(-8h/n) (h = 1..n); otherwise the
2^floor(log2 n) geometric slopes, then every other slope of the set for twice that many heads, until there are n.
The bias is computed in the graph from the n slopes (float32) and the position ids: nothing in the artifact grows
with the maximum length. Causal form: -m (i - j) for j <= i, -inf after; bidirectional form: -m |i - j|.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ropeexport.families.alibi.spec import AlibiSpec
from ropeexport.families.bias.reference import finish_bias


def alibi_slopes(num_heads: int) -> np.ndarray:
    """float64 slopes [num_heads], the paper's recipe (module docstring)."""

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    if math.log2(num_heads).is_integer():
        return np.array(power_of_two(num_heads))
    closest = 2 ** math.floor(math.log2(num_heads))
    extra = alibi_slopes(2 * closest)[0::2][: num_heads - closest]
    return np.concatenate([power_of_two(closest), extra])


def spec_slopes(spec: AlibiSpec) -> np.ndarray:
    """float64 slopes [num_heads] of a spec: the paper's recipe times ``slope_scale``."""
    return alibi_slopes(spec.num_heads) * spec.slope_scale


def alibi_bias(spec: AlibiSpec, query_position_ids: torch.Tensor, key_position_ids: torch.Tensor) -> torch.Tensor:
    """Eager bias [b, num_heads, q_len, k_len] in the spec dtype (float32 arithmetic, rounded once)."""
    slopes = torch.from_numpy(spec_slopes(spec).astype(np.float32))[None, :, None, None]  # [1, h, 1, 1]
    distance = (query_position_ids[:, None, :, None] - key_position_ids[:, None, None, :]).to(torch.float32)
    if not spec.causal:
        distance = distance.abs()
    return finish_bias(spec, -slopes * distance, query_position_ids, key_position_ids)
