"""Attention with an additive positional bias: the shared spec and eager pieces of ALiBi, T5, KERPLE and Sandwich.

Each method defines a bias B[h, i, j] from the query position i and key position j (its own module); this module
turns it into the three artifacts every such method has:
- ``bias``:      B, [b, heads, q_len, k_len], -inf where a causal mask hides key j from query i (j > i);
- ``scores``:    q . k / sqrt(head_dim) + B (the bias after the scale, as ALiBi and Hugging Face do);
- ``attention``: softmax(scores) . v.
Biases are computed in float32 whatever the model dtype (ALiBi's slopes at fp16 would lose the small ones), clamped
to the dtype's finite range so only the mask is -inf, and rounded once to the dtype.

Notation: b batch, h heads, i query position, j key position, d head_dim.
"""

from __future__ import annotations

import math

import torch

from ropeexport.dtypes import DTYPES
from ropeexport.families.bias.spec import BiasSpec


def finish_bias(spec: BiasSpec, raw: torch.Tensor, qpos: torch.Tensor, kpos: torch.Tensor) -> torch.Tensor:
    """float32 bias [b|1, h, q, k] -> clamped, rounded once to the dtype, -inf where the causal mask applies."""
    out = raw.clamp(min=DTYPES[spec.dtype].finite_min).to(DTYPES[spec.dtype].torch)
    out = out.expand(qpos.shape[0], spec.num_heads, qpos.shape[1], kpos.shape[1])
    if spec.causal:
        future = kpos[:, None, None, :] > qpos[:, None, :, None]  # [b, 1, q, k]
        out = out.masked_fill(future, float("-inf"))
    return out


def scores_with_bias(query: torch.Tensor, key: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """q . k / sqrt(d) + bias: query [b, h, q, d], key [b, h, k, d], bias [b, h, q, k] -> [b, h, q, k]."""
    return (query @ key.transpose(-1, -2)) * (1.0 / math.sqrt(query.shape[-1])) + bias


def attention_with_bias(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """softmax(q . k / sqrt(d) + bias) . v -> [b, h, q, d]."""
    return torch.softmax(scores_with_bias(query, key, bias), dim=-1) @ value
