"""Transformer-XL (Dai et al. 2019): the float64 oracle.

Written from the definitions, apart from the reference module and the exporter (tests/layout checks that it
never imports an exporter).
"""

from __future__ import annotations

import numpy as np

from ropeexport.families.transformer_xl.reference import stored_weights
from ropeexport.families.transformer_xl.spec import TransformerXLSpec
from ropeexport.recipes import KPOS, QPOS, Feeds


def relative_oracle(distances: np.ndarray, d_model: int) -> np.ndarray:
    """float64 R_d [len(distances), d_model] from the formula, channel by channel (module docstring)."""
    half = d_model // 2
    channel = np.arange(d_model)
    pair = np.where(channel < half, channel, channel - half)  # the c of sin(d / 10000^(2c/d_model)) or its cos
    angles = np.asarray(distances, np.float64)[:, None] / np.power(10000.0, 2.0 * pair / d_model)
    return np.where(channel < half, np.sin(angles), np.cos(angles))


def projected_oracle(spec: TransformerXLSpec, distances: np.ndarray) -> np.ndarray:
    """float64 W_R R_d [len(distances), num_heads, head_dim] with the rounded W_R."""
    w_r = stored_weights(spec)["r_net"]  # [H * d, d_model]
    rel = relative_oracle(distances, spec.d_model)  # [n, d_model]
    return np.einsum("om,nm->no", w_r, rel).reshape(len(distances), spec.num_heads, spec.head_dim)


def scores_float64(spec: TransformerXLSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """float64 (A + B + C + D) / sqrt(head_dim), each term on its own (module docstring)."""
    q, k = (np.asarray(feeds[n], np.float64) for n in ("query", "key"))  # [b, H, q, d], [b, H, k, d]
    qpos, kpos = feeds[QPOS], feeds[KPOS]
    w = stored_weights(spec)
    distance = qpos[:, :, None] - kpos[:, None, :]  # [b, q, k]
    unique, inverse = np.unique(distance, return_inverse=True)
    inverse = inverse.reshape(distance.shape)
    w_r_r = projected_oracle(spec, unique)  # [n, H, d]: W_R R_d for each distinct d
    a = np.einsum("bhid,bhjd->bhij", q, k)
    b_terms = np.einsum("bhid,nhd->bhin", q, w_r_r)  # [b, H, q, n]
    b = np.take_along_axis(b_terms, np.broadcast_to(inverse[:, None], a.shape), axis=3)
    c = np.einsum("hd,bhjd->bhj", w["r_w_bias"], k)[:, :, None, :]  # [b, H, 1, k]
    d = np.einsum("hd,nhd->hn", w["r_r_bias"], w_r_r)[:, inverse].transpose(1, 0, 2, 3)  # [b, H, q, k]
    scores = (a + b + c + d) / np.sqrt(spec.head_dim)
    if spec.causal:
        scores = np.where((distance < 0)[:, None], -np.inf, scores)
    return {"scores": scores}
