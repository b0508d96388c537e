"""TUPE (Ke et al. 2021): the float64 oracle.

Written from the definitions, apart from the reference module and the exporter (tests/layout checks that it
never imports an exporter).
"""

from __future__ import annotations

import math

import numpy as np

from ropeexport.families.tupe.reference import tupe_weights
from ropeexport.families.tupe.spec import TupeSpec
from ropeexport.recipes import KPOS, QPOS, Feeds


def t5_bucket_float64(relative_position: np.ndarray, num_buckets: int, max_distance: int, bidir: bool) -> np.ndarray:
    """T5's bucket of j - i from the logarithm formula (Raffel et al. 2020; HF ``_relative_position_bucket``)."""
    rel = np.asarray(relative_position, np.int64)
    if bidir:
        num_buckets //= 2
        bucket = (rel > 0).astype(np.int64) * num_buckets
        n = np.abs(rel)
    else:
        bucket = np.zeros_like(rel)
        n = -np.minimum(rel, 0)
    max_exact = num_buckets // 2
    with np.errstate(divide="ignore"):  # log(0) where n = 0; that n takes the exact branch
        large = max_exact + np.floor(
            np.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
        )
    large = np.minimum(np.where(n < max_exact, 0, large), num_buckets - 1).astype(np.int64)
    return bucket + np.where(n < max_exact, n, large)


def tupe_oracle(spec: TupeSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """alpha_ij = q.k / sqrt(2d) + (p_i U^Q)(p_j U^K)^T / sqrt(2d) + b_(j-i) per head, float64 [b, h, q, n]."""
    w = tupe_weights(spec)
    H, d = spec.num_heads, spec.head_dim
    qpos, kpos = feeds[QPOS], feeds[KPOS]
    p = w["position_embeddings"]
    pq = (p[qpos] @ w["pos_query"]).reshape(*qpos.shape, H, d)  # p_i U^Q, [b, q, h, d]
    pk = (p[kpos] @ w["pos_key"]).reshape(*kpos.shape, H, d)  # p_j U^K, [b, n, h, d]
    q, k = (np.asarray(feeds[n], np.float64) for n in ("query", "key"))
    content = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(2 * d)
    untied = np.einsum("bihd,bjhd->bhij", pq, pk) / np.sqrt(2 * d)
    buckets = t5_bucket_float64(
        kpos[:, None, :] - qpos[:, :, None], spec.num_buckets, spec.max_distance, spec.bidirectional
    )  # [b, q, n]
    relative = np.moveaxis(w["relative_bias"][buckets], -1, 1)  # b_h(j - i), [b, h, q, n]
    scores = content + untied + relative
    if spec.causal:
        scores = np.where(kpos[:, None, None, :] > qpos[:, None, :, None], -np.inf, scores)
    return {"scores": scores}
