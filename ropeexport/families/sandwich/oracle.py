"""Sandwich (Chi et al. 2023): the float64 oracle.

Written from the definitions, apart from the reference module and the exporter (tests/layout checks that it
never imports an exporter).
"""

from __future__ import annotations

import numpy as np

from ropeexport.families.sandwich.spec import SandwichSpec


def sandwich_oracle(spec: SandwichSpec, qpos: np.ndarray, kpos: np.ndarray) -> np.ndarray:
    """float64 bias [b, heads, q, k] from the formula, per pair (no table): (sum_k cos((i-j) w_k) - d'/2) H / 8h."""
    d, H = spec.embedding_dim, spec.num_heads
    omega = spec.theta ** (-2.0 * np.arange(1, d // 2 + 1) / d)  # w_k, k = 1..d'/2
    relative = qpos[:, :, None].astype(np.float64) - kpos[:, None, :]  # [b, q, k]
    values, inverse = np.unique(relative, return_inverse=True)  # the sum depends on i - j alone
    inner = np.cos(values[:, None] * omega).sum(axis=1) - d / 2
    per_pair = inner[inverse.reshape(relative.shape)]  # [b, q, k]
    heads = np.arange(1, H + 1, dtype=np.float64)
    return per_pair[:, None, :, :] / (8.0 * heads / H)[None, :, None, None]
