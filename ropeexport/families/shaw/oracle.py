"""Shaw relative positions: the float64 oracle.

Written from the definitions, apart from the reference module and the exporter (tests/layout checks that it
never imports an exporter).
"""

from __future__ import annotations

import numpy as np

from ropeexport.families.shaw.reference import shaw_weights
from ropeexport.families.shaw.spec import ShawSpec
from ropeexport.recipes import KPOS, QPOS, Feeds


def shaw_oracle(spec: ShawSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """The paper's equations in float64 (module docstring): scores [b, h, q, n] or output [b, h, q, d]."""
    weights = shaw_weights(spec)
    a_key, a_value = weights["relative_key"], weights["relative_value"]  # [2k + 1, d], row r + k
    qpos, kpos = feeds[QPOS], feeds[KPOS]
    r = np.maximum(-spec.clip, np.minimum(spec.clip, kpos[:, None, :] - qpos[:, :, None]))  # clip(j - i), [b, q, n]
    q, k = (np.asarray(feeds[n], np.float64) for n in ("query", "key"))
    # k_j + a^K_r(i,j) for every pair: [b, h, q, n, d]
    keys = k[:, :, None, :, :] + a_key[r + spec.clip][:, None]
    scores = np.einsum("bhid,bhijd->bhij", q, keys) / np.sqrt(spec.head_dim)
    if spec.causal:
        scores = np.where(kpos[:, None, None, :] > qpos[:, None, :, None], -np.inf, scores)
    if spec.artifact == "scores":
        return {"scores": scores}
    alpha = np.exp(scores - scores.max(axis=-1, keepdims=True))
    alpha /= alpha.sum(axis=-1, keepdims=True)
    values = np.asarray(feeds["value"], np.float64)[:, :, None, :, :] + a_value[r + spec.clip][:, None]
    return {"output": np.einsum("bhij,bhijd->bhid", alpha, values)}
