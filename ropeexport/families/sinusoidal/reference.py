"""Sinusoidal position encoding (Vaswani et al. 2017, "Attention Is All You Need", section 3.5).

    PE(pos, 2i)     = sin(pos / base^(2i / d))
    PE(pos, 2i + 1) = cos(pos / base^(2i / d))        (base = 10000 in the paper; i = 0 .. d/2 - 1)

Artifacts:
- ``apply``: y = x * sqrt(d_model) + PE[position_ids] with ``scale_input`` (the paper multiplies its embedding
  weights by sqrt(d_model), section 3.4), else y = x + PE[position_ids]; PE is d_model wide.
- ``scores``: the paper adds PE to the token embeddings before the query/key projections, so it has no per-head
  logit of its own. The shared ``scores`` contract takes projected query and key, so this artifact adds a table of
  width head_dim to every head of both, then takes the scaled dot product:
      scores[b, h, i, j] = (q_i + PE(p_i)) . (k_j + PE(p_j)) / sqrt(head_dim)
  Expanded, that is q.k + q.PE_j + PE_i.k + PE_i.PE_j, and the last term is sum_i cos((p_i - p_j) w_i), a function
  of the distance alone (the bias Sandwich builds on). ``scale_input`` applies to ``apply`` only: the paper's scaling
  is of embeddings, and the spec rejects it for ``scores`` rather than invent a per-head variant.

Precision: the table is computed in float64 (angles included) and rounded once to the artifact dtype. A float32
angle pos / base^(2i/d) at pos = 131072 is off by up to half the float32 spacing there (2^-7 = 0.008 rad), which is
what this avoids; the table is stored whole, [max_positions, width], so nothing trigonometric runs in the graph.

Notation: b batch, s sequence, h heads, d d_model (``apply``) or head_dim (``scores``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ropeexport.errors import RuntimeInputError
from ropeexport.families.sinusoidal.spec import SinusoidalSpec
from ropeexport.numerics import round_once
from ropeexport.tensors import check_positions, to_torch


def sinusoid_table(positions: int, width: int, base: float) -> np.ndarray:
    """float64 PE [positions, width] (module docstring): sin in even channels, cos in odd ones."""
    inv_freq = base ** (-np.arange(0, width, 2, dtype=np.float64) / width)  # [width / 2], 1 / base^(2i/d)
    angles = np.arange(positions, dtype=np.float64)[:, None] * inv_freq  # [positions, width / 2], float64
    table = np.empty((positions, width), dtype=np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles)
    return table


def stored_table(spec: SinusoidalSpec) -> np.ndarray:
    """The table as the artifact stores it: [max_positions, width] in the spec dtype, rounded once from float64."""
    return round_once(sinusoid_table(spec.max_positions, spec.width, spec.base), spec.dtype)


def input_scale(spec: SinusoidalSpec) -> np.ndarray:
    """sqrt(d_model) rounded once to the spec dtype (a 0-d array): the factor of ``scale_input``."""
    return round_once(np.array(math.sqrt(spec.d_model)), spec.dtype)


class SinusoidalEmbedding(nn.Module):
    """Eager sinusoidal encoding: ``forward(x, *, position_ids) -> y`` (the ``apply`` artifact).

    x [b, s, d_model] in the spec dtype, position_ids int64 [b, s]; y [b, s, d_model]. Arithmetic runs in the spec
    dtype, as the graph's does: x * sqrt(d_model) rounds once (with ``scale_input``), the add rounds once.
    """

    table: torch.Tensor  # [max_positions, width], buffer
    scale: torch.Tensor  # 0-d sqrt(d_model), buffer

    def __init__(self, spec: SinusoidalSpec) -> None:
        super().__init__()
        self.spec = spec
        self.register_buffer("table", to_torch(stored_table(spec)), persistent=False)  # [P, width]
        self.register_buffer("scale", to_torch(input_scale(spec)), persistent=False)  # 0-d

    def lookup(self, position_ids: torch.Tensor, name: str = "position_ids") -> torch.Tensor:
        """Rows of the table [*, width] for position_ids [*]; positions outside the table raise."""
        check_positions(position_ids, self.spec.max_positions, name)
        return self.table[position_ids]

    def forward(self, x: torch.Tensor, *, position_ids: torch.Tensor) -> torch.Tensor:
        """x + PE[position_ids] (x scaled first with ``scale_input``), shapes in the class docstring."""
        d = self.spec.d_model
        if x.dim() != 3 or x.shape[2] != d or list(position_ids.shape) != list(x.shape[:2]):
            raise RuntimeInputError(
                f"x: expected [batch, seq, {d}] with position_ids [batch, seq], got {list(x.shape)} and "
                f"{list(position_ids.shape)}"
            )
        if self.spec.scale_input:
            x = x * self.scale
        return x + self.lookup(position_ids)


def sinusoidal_scores(
    module: SinusoidalEmbedding,
    query: torch.Tensor,
    key: torch.Tensor,
    query_position_ids: torch.Tensor,
    key_position_ids: torch.Tensor,
) -> torch.Tensor:
    """(q_i + PE_i) . (k_j + PE_j) / sqrt(head_dim) in the spec dtype: [b, num_heads, q_len, k_len].

    query [b, num_heads, q_len, head_dim], key [b, num_heads, k_len, head_dim]; the module's table is head_dim wide.
    """
    q = query + module.lookup(query_position_ids, "query_position_ids")[:, None]  # [b, h, q, d]
    k = key + module.lookup(key_position_ids, "key_position_ids")[:, None]  # [b, h, k, d]
    scale = to_torch(round_once(np.array(1.0 / math.sqrt(module.spec.head_dim)), module.spec.dtype))
    return (q @ k.transpose(-1, -2)) * scale
