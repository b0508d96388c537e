"""Transformer-XL relative position encoding (Dai et al. 2019, "Transformer-XL", section 3.3, eq. for A^rel).

For query i at position p_i and key j at position p_j, with R_(p_i - p_j) the sinusoidal relative embedding:

    A^rel_ij = q_i . k_j                    (a) content
             + q_i . (W_R R_(p_i - p_j))     (b) content-dependent position
             + u . k_j                      (c) global content bias
             + v . (W_R R_(p_i - p_j))       (d) global position bias
    scores[b, h, i, j] = A^rel_ij / sqrt(head_dim), -inf where j is in i's future (p_j > p_i) when ``causal``.

Conventions follow the authors' code (kimiyoung/transformer-xl, ``pytorch/mem_transformer.py``):
- ``PositionalEmbedding``: inv_freq = 1 / 10000^(arange(0, d_model, 2) / d_model) and R_d = [sin(d inv_freq),
  cos(d inv_freq)], the sin half first, then the cos half (not interleaved);
- ``RelPartialLearnableMultiHeadAttn``: AC = (q + r_w_bias) . k, BD = (q + r_r_bias) . r_net(R), score =
  (AC + BD) * 1/sqrt(d_head), then the mask; ``r_net`` is ``nn.Linear(d_model, n_head * d_head, bias=False)``, so
  its weight is [n_head * d_head, d_model] and W_R R_d = r_net.weight @ R_d;
- ``_forward`` feeds distances klen-1 .. 0 (``pos_seq``): only i - j >= 0 are ever looked up, the rest are masked.
  With ``causal=False`` this module also defines R_d for d < 0 (sin odd, cos even), the natural extension for
  bidirectional attention; the original has no such case. ``clamp_len`` is not modelled (no clamping).

Learned tensors (names in a ``--weights`` safetensors file; shapes checked):
- ``r_w_bias`` [num_heads, head_dim]: u;
- ``r_r_bias`` [num_heads, head_dim]: v;
- ``r_net`` [num_heads * head_dim, d_model]: W_R (the nn.Linear weight layout).

Precision: W_R R_d is computed in float64 for every distance the artifact accepts and rounded once to the dtype
(``relative_table``): R_d at d near 131072 from a float32 angle is off by ~0.004 rad, and a per-call projection in
the dtype would add a rounding per product term. The table is [rows, num_heads, head_dim] with rows = max_positions
(causal: d = 0 .. P-1) or 2 max_positions - 1 (d = -(P-1) .. P-1): it grows linearly with max_positions (131072
positions x 4096 channels is 2 GiB in fp32). Storing R_d [rows, d_model] instead would be the same size when
d_model = num_heads * head_dim, and leave a projection and its rounding to every call. Weights are model data: u, v
and W_R are rounded once to the dtype, and the table is the float64 product of the rounded W_R.

Notation: b batch, h heads, i query index, j key index, d head_dim (or a distance, where said).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
from torch import nn

from ropeexport.errors import RuntimeInputError
from ropeexport.families.transformer_xl.spec import TransformerXLSpec, learned_weights
from ropeexport.learned import rounded
from ropeexport.numerics import round_once
from ropeexport.tensors import check_positions, to_torch

BASE = 10000.0  # the original's constant in inv_freq


def stored_weights(spec: TransformerXLSpec) -> dict[str, np.ndarray]:
    """u, v and W_R rounded once to the spec dtype, returned as float64 (the values the artifact holds)."""
    return rounded(learned_weights(spec), spec.dtype)


def relative_embedding(distances: np.ndarray, d_model: int) -> np.ndarray:
    """float64 R_d [len(distances), d_model]: [sin(d inv_freq), cos(d inv_freq)] as the original lays it out."""
    inv_freq = 1.0 / BASE ** (np.arange(0.0, d_model, 2.0) / d_model)  # [d_model / 2], float64
    angles = np.outer(np.asarray(distances, np.float64), inv_freq)  # float64 angles: exact distances, one rounding
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)


@lru_cache(maxsize=4)
def _float64_table(spec: TransformerXLSpec) -> np.ndarray:
    distances = np.arange(spec.table_rows, dtype=np.float64) - spec.distance_offset
    w_r = stored_weights(spec)["r_net"]  # [H * d, d_model], the rounded model weights, in float64
    table = (relative_embedding(distances, spec.d_model) @ w_r.T).reshape(-1, spec.num_heads, spec.head_dim)
    table.setflags(write=False)
    return table


def relative_table(spec: TransformerXLSpec) -> np.ndarray:
    """W_R R_d for every distance the artifact accepts, [table_rows, num_heads, head_dim], rounded once to the dtype.

    Row r holds distance r - ``spec.distance_offset``; the product is taken in float64 (module docstring).
    """
    return round_once(_float64_table(spec), spec.dtype)


class TransformerXLScores(nn.Module):
    """Eager Transformer-XL logits in the spec dtype, structured as the original's AC + BD.

    ``forward(query, key, *, query_position_ids, key_position_ids) -> scores``: query [b, h, q_len, d], key
    [b, h, k_len, d], positions int64 [b, q_len] / [b, k_len]; scores [b, h, q_len, k_len]. W_R R_(i-j) comes from
    the table rounded once (``relative_table``); sums and products run in the dtype, as the graph's do.
    """

    r_w_bias: torch.Tensor  # [h, 1, d] (u), buffer
    r_r_bias: torch.Tensor  # [h, 1, d] (v), buffer
    table: torch.Tensor  # [rows, h, d] (W_R R_d), buffer
    scale: torch.Tensor  # 0-d 1/sqrt(head_dim), buffer

    def __init__(self, spec: TransformerXLSpec) -> None:
        super().__init__()
        self.spec = spec
        w = {n: round_once(a, spec.dtype) for n, a in stored_weights(spec).items()}  # exact: already rounded
        self.register_buffer("r_w_bias", to_torch(w["r_w_bias"])[:, None], persistent=False)  # [h, 1, d]
        self.register_buffer("r_r_bias", to_torch(w["r_r_bias"])[:, None], persistent=False)  # [h, 1, d]
        self.register_buffer("table", to_torch(relative_table(spec)), persistent=False)  # [rows, h, d]
        scale = round_once(np.array(1.0 / math.sqrt(spec.head_dim)), spec.dtype)  # as the graph's constant
        self.register_buffer("scale", to_torch(scale), persistent=False)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        *,
        query_position_ids: torch.Tensor,
        key_position_ids: torch.Tensor,
    ) -> torch.Tensor:
        """A^rel / sqrt(head_dim), masked when causal (shapes in the class docstring)."""
        s = self.spec
        for name, x in (("query", query), ("key", key)):
            if x.dim() != 4 or x.shape[1] != s.num_heads or x.shape[3] != s.head_dim:
                raise RuntimeInputError(
                    f"{name}: expected [batch, {s.num_heads}, len, {s.head_dim}], got {list(x.shape)}"
                )
        check_positions(query_position_ids, s.max_positions, "query_position_ids")
        check_positions(key_position_ids, s.max_positions, "key_position_ids")
        distance = query_position_ids[:, :, None] - key_position_ids[:, None, :]  # [b, q, k], i - j
        if s.causal:
            distance = distance.clamp(min=0)  # future keys are masked below; any valid row will do
        r_head_k = self.table[distance + s.distance_offset]  # [b, q, k, h, d]
        ac = (query + self.r_w_bias) @ key.transpose(-1, -2)  # [b, h, q, k]
        bd = torch.einsum("bhid,bijhd->bhij", query + self.r_r_bias, r_head_k)  # [b, h, q, k]
        scores = (ac + bd) * self.scale
        if s.causal:
            future = key_position_ids[:, None, None, :] > query_position_ids[:, None, :, None]  # [b, 1, q, k]
            scores = scores.masked_fill(future, float("-inf"))
        return scores
