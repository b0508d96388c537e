"""Shaw et al. 2018, "Self-Attention with Relative Position Representations" (NAACL): clipped relative positions.

The relative position of key j seen from query i is clipped, r(i, j) = clip(j - i, -k, k) = max(-k, min(k, j - i)),
and two learned tables of 2k + 1 vectors, a^K and a^V [2k + 1, head_dim] (row r + k), enter the key and value sides
(eqs. 3-5 of the paper):

    e_ij = q_i . (k_j + a^K_r(i,j)) / sqrt(d)             (the ``scores`` artifact)
    z_i  = sum_j softmax_j(e_ij) (v_j + a^V_r(i,j))       (the ``attention`` artifact)

As in the paper the two tables are shared across heads (section 3.3: it saves storage, and the heads still differ
through their own q, k, v). Past distance k every key uses the end rows: the paper's hypothesis is that precise
relative position is not useful beyond a certain distance, and it is what lets the method run at any length.
With ``causal`` (the default, a decoder) keys after the query (j > i) get e_ij = -inf.

Learned tensors (seeded, or from ``weights``, a .safetensors file): ``relative_key`` [2k + 1, head_dim] (a^K) and
``relative_value`` [2k + 1, head_dim] (a^V), row r + k for clipped distance r.

Notation: b batch, h heads, i query position (q queries), j key position (n keys), d head_dim, R = 2k + 1.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ropeexport.dtypes import DTYPES
from ropeexport.families.shaw.spec import ShawSpec, shaw_tensors
from ropeexport.learned import load_weights, rounded
from ropeexport.numerics import round_once
from ropeexport.tensors import to_torch


def shaw_weights(spec: ShawSpec) -> dict[str, np.ndarray]:
    """a^K and a^V as the artifact stores them: rounded once to the spec dtype, returned as float64 [R, d]."""
    raw = load_weights(tuple(shaw_tensors(spec.head_dim, spec.clip)), spec.weights, spec.seed)
    return rounded(raw, spec.dtype)


def relative_rows(spec: ShawSpec, query_position_ids: torch.Tensor, key_position_ids: torch.Tensor) -> torch.Tensor:
    """Table row of each (i, j): clip(j - i, -k, k) + k, int64 [b, q, n]."""
    distance = key_position_ids[:, None, :] - query_position_ids[:, :, None]  # j - i, [b, q, n]
    return distance.clamp(-spec.clip, spec.clip) + spec.clip


def _table(spec: ShawSpec, name: str) -> torch.Tensor:
    return to_torch(round_once(shaw_weights(spec)[name], spec.dtype))  # [R, d] in the spec dtype


def shaw_scores(
    spec: ShawSpec,
    query: torch.Tensor,
    key: torch.Tensor,
    query_position_ids: torch.Tensor,
    key_position_ids: torch.Tensor,
) -> torch.Tensor:
    """e_ij = q_i . (k_j + a^K_r) / sqrt(d), -inf for j > i when causal; query [b, h, q, d], key [b, h, n, d].

    Computed as the graph does, in the spec dtype: q . k for every pair plus q . a^K_r for the R rows, picked per
    pair, then one multiply by the scale (rounded to the dtype). Returns [b, h, q, n].
    """
    b, h, q, n = query.shape[0], spec.num_heads, query.shape[2], key.shape[2]
    logits = query @ key.transpose(-1, -2)  # [b, h, q, n]
    per_row = query @ _table(spec, "relative_key").transpose(0, 1)  # q . a^K_r for every r, [b, h, q, R]
    rows = relative_rows(spec, query_position_ids, key_position_ids)[:, None].expand(b, h, q, n)
    scale = to_torch(round_once(np.array(1.0 / math.sqrt(spec.head_dim)), spec.dtype))
    scores = (logits + per_row.gather(-1, rows)) * scale
    if spec.causal:
        future = key_position_ids[:, None, None, :] > query_position_ids[:, None, :, None]  # [b, 1, q, n]
        scores = scores.masked_fill(future, float("-inf"))
    return scores


def shaw_attention(
    spec: ShawSpec,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    query_position_ids: torch.Tensor,
    key_position_ids: torch.Tensor,
) -> torch.Tensor:
    """z_i = sum_j softmax_j(e_ij) (v_j + a^V_r): value [b, h, n, d] -> [b, h, q, d].

    The value term is sum_r (sum of the weights whose pair has clipped distance r) a^V_r. The per-row sums run in
    float32: at fp16 a running sum near 0.5 has spacing 2.4e-4, so thousands of small weights would stop adding.
    """
    weights = torch.softmax(shaw_scores(spec, query, key, query_position_ids, key_position_ids), dim=-1)
    b, h, q, n = weights.shape
    rows = relative_rows(spec, query_position_ids, key_position_ids)[:, None].expand(b, h, q, n)
    per_row = torch.zeros(b, h, q, 2 * spec.clip + 1, dtype=torch.float32)
    per_row.scatter_add_(-1, rows, weights.float())  # [b, h, q, R]
    value_term = per_row @ _table(spec, "relative_value").float()  # [b, h, q, d]
    return weights @ value + value_term.to(DTYPES[spec.dtype].torch)
