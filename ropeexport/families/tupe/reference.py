"""TUPE (Ke, He and Liu 2021, "Rethinking Positional Encoding in Language Pre-training", ICLR): untied positions.

TUPE removes the position embedding from the input and gives positions their own projections, added to the content
logits (eq. 7 of the paper) together with a T5 relative bias (eq. 8):

    alpha_ij = (x_i W^Q)(x_j W^K)^T / sqrt(2d) + (p_i U^Q)(p_j U^K)^T / sqrt(2d) + b_(j-i)

Our inputs are the already-projected query and key of each head, so per head h
``scores = q_i . k_j / sqrt(2d) + (p_i U^Q_h) . (p_j U^K_h) / sqrt(2d) + b_h(bucket(j - i))`` with d = head_dim.
The scale is TUPE's own 1/sqrt(2d), not 1/sqrt(d): the paper halves each term's variance so that the sum of the
content and positional correlations keeps the magnitude of one standard logit. (The paper also unties [CLS] from
the positions; that concerns a model's first token, not the encoding, and is left to the model.)

Learned tensors (seeded, or from ``weights``, a .safetensors file):
- ``position_embeddings`` [max_positions, d_model]: p, absolute and learned (BERT-style);
- ``pos_query``, ``pos_key`` [d_model, num_heads * head_dim]: U^Q and U^K, head h in columns h*d .. (h+1)*d - 1;
- ``relative_bias`` [num_buckets, num_heads]: b, one scalar per T5 bucket and head.
The artifact stores p U^Q and p U^K [max_positions, num_heads * head_dim], computed in float64 from the weights and
rounded once (a fp16 product p U would round every partial sum), gathered by position; a position outside
[0, max_positions) makes the lookup itself fail. The positional part of the logits is computed in float32 and rounded
once to the dtype, as for every additive bias (``families.bias.reference``).

Buckets follow T5 (Raffel et al. 2020, section 2.1; the Hugging Face ``_relative_position_bucket``), for the
relative position j - i: bidirectional specs give half the buckets to keys after the query (offset B = num_buckets/2)
and measure n = |j - i|; unidirectional ones use all B = num_buckets for n = max(i - j, 0). With max_exact = B // 2,
distances n < max_exact each have their own bucket; larger ones share logarithmically wider buckets,
max_exact + floor(log(n / max_exact) / log(max_distance / max_exact) * (B - max_exact)), capped at B - 1.

Notation: b batch, h heads, i query position (q queries), j key position (n keys), d head_dim, P max_positions.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from ropeexport.families.bias.reference import finish_bias
from ropeexport.families.t5.buckets import direction_buckets, relative_buckets
from ropeexport.families.tupe.spec import TupeSpec, tupe_tensors
from ropeexport.learned import load_weights, rounded
from ropeexport.numerics import round_once
from ropeexport.tensors import to_torch


def tupe_weights(spec: TupeSpec) -> dict[str, np.ndarray]:
    """The learned tensors as the model holds them: rounded once to the spec dtype, returned as float64."""
    return rounded(load_weights(tuple(tupe_tensors(spec)), spec.weights, spec.seed), spec.dtype)


@functools.lru_cache(maxsize=8)
def tupe_tables(spec: TupeSpec) -> tuple[np.ndarray, np.ndarray]:
    """p U^Q and p U^K [P, num_heads * head_dim] in float64 from the rounded weights (the graph rounds them once)."""
    w = tupe_weights(spec)
    query, key = w["position_embeddings"] @ w["pos_query"], w["position_embeddings"] @ w["pos_key"]
    query.flags.writeable = key.flags.writeable = False  # cached: shared by every caller
    return query, key


def bucket_span(spec: TupeSpec) -> int:
    """S: relative positions are clipped to [-S, S] before the bucket lookup without changing any bucket.

    Past max_distance every bucket is the last of its direction; and with valid positions |j - i| < P anyway.
    """
    return min(spec.max_distance, spec.max_positions - 1)


def bucket_map(spec: TupeSpec) -> np.ndarray:
    """Bucket of every clipped relative position -S .. S (row r + S), int64 [2S + 1]: what the graph stores."""
    S = bucket_span(spec)
    return relative_buckets(np.arange(-S, S + 1), spec.num_buckets, spec.max_distance, spec.bidirectional)


def t5_bucket_torch(relative_position: torch.Tensor, spec: TupeSpec) -> torch.Tensor:
    """The same buckets as PyTorch T5 code computes them (float32 logarithm, truncation), int64 like the input."""
    B = direction_buckets(spec.num_buckets, spec.bidirectional)
    if spec.bidirectional:
        offset, n = (relative_position > 0).long() * B, relative_position.abs()
    else:
        offset, n = torch.zeros_like(relative_position), (-relative_position).clamp(min=0)
    max_exact = B // 2
    scaled = torch.log(n.float().clamp(min=1) / max_exact) / math.log(spec.max_distance / max_exact)
    far = (max_exact + (scaled * (B - max_exact)).long()).clamp(max=B - 1)
    return offset + torch.where(n < max_exact, n, far)


def tupe_scores(
    spec: TupeSpec,
    query: torch.Tensor,
    key: torch.Tensor,
    query_position_ids: torch.Tensor,
    key_position_ids: torch.Tensor,
) -> torch.Tensor:
    """TUPE logits [b, h, q, n] in the spec dtype; query [b, h, q, d], key [b, h, n, d], positions int64 [b, q|n].

    As the graph: content q . k times 1/sqrt(2d) rounded to the dtype; the positional part (untied term plus
    relative bias) in float32 from the stored tables, rounded once, then added; -inf after the query when causal.
    """
    P, H, d = spec.max_positions, spec.num_heads, spec.head_dim
    for name, ids in (("query_position_ids", query_position_ids), ("key_position_ids", key_position_ids)):
        if bool(((ids < 0) | (ids >= P)).any()):  # indexing would wrap a negative position to the end
            raise IndexError(f"{name}: positions must be in [0, {P}), got {ids.min().item()}..{ids.max().item()}")
    q_table, k_table = (to_torch(round_once(t, spec.dtype)).float() for t in tupe_tables(spec))  # [P, H * d]
    b, q, n = query.shape[0], query_position_ids.shape[1], key_position_ids.shape[1]
    pq = q_table[query_position_ids].view(b, q, H, d).transpose(1, 2)  # p_i U^Q_h, [b, h, q, d]
    pk = k_table[key_position_ids].view(b, n, H, d).transpose(1, 2)  # p_j U^K_h, [b, h, n, d]
    scale32 = float(np.float32(1.0 / math.sqrt(2 * d)))
    untied = (pq @ pk.transpose(-1, -2)) * scale32  # [b, h, q, n]
    relative_bias = to_torch(round_once(tupe_weights(spec)["relative_bias"], spec.dtype)).float()  # [buckets, h]
    buckets = t5_bucket_torch(key_position_ids[:, None, :] - query_position_ids[:, :, None], spec)  # [b, q, n]
    relative = relative_bias[buckets].permute(0, 3, 1, 2)  # [b, h, q, n]
    bias = finish_bias(spec, untied + relative, query_position_ids, key_position_ids)
    scale = to_torch(round_once(np.array(1.0 / math.sqrt(2 * d)), spec.dtype))
    return (query @ key.transpose(-1, -2)) * scale + bias
