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
from dataclasses import dataclass
from typing import ClassVar

import ml_dtypes
import numpy as np
import torch

from ropeexport.errors import SpecError
from ropeexport.spec import SpecBase, require_bool, require_int

BIAS_ARTIFACTS = ("bias", "scores", "attention")
MAX_WIDTH = 2**20  # num_heads x head_dim: the widest attention any model uses is far below this


@dataclass(frozen=True)
class BiasSpec(SpecBase):
    """Fields every additive-bias method shares: heads, head size (scores/attention), and the causal mask."""

    artifacts: ClassVar[tuple[str, ...]] = BIAS_ARTIFACTS

    num_heads: int = 8
    head_dim: int = 64
    causal: bool = True

    def _validate(self) -> None:
        self._put("num_heads", require_int("num_heads", self.num_heads, 1, 4096))
        self._put("head_dim", require_int("head_dim", self.head_dim, 1, 65536))
        if self.num_heads * self.head_dim > MAX_WIDTH:
            raise SpecError(
                "head_dim",
                f"num_heads x head_dim = {self.num_heads * self.head_dim} is over the limit of "
                f"{MAX_WIDTH} (2^20): verification feeds would not fit in memory",
            )
        self._put("causal", require_bool("causal", self.causal))
        self._validate_method()

    def _validate_method(self) -> None:
        """Check the method's own fields (raise SpecError naming the field)."""


def finite_min(dtype: str) -> float:
    """The most negative finite value of a dtype: biases are clamped here so that only the mask is -inf."""
    return {
        "fp32": float(np.finfo(np.float32).min),
        "fp16": float(np.finfo(np.float16).min),
        "bf16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).min),
    }[dtype]


def finish_bias(spec: BiasSpec, raw: torch.Tensor, qpos: torch.Tensor, kpos: torch.Tensor) -> torch.Tensor:
    """float32 bias [b|1, h, q, k] -> clamped, rounded once to the dtype, -inf where the causal mask applies."""
    from ropeexport.encodings.rope import TORCH_DTYPES

    out = raw.clamp(min=finite_min(spec.dtype)).to(TORCH_DTYPES[spec.dtype])
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
