"""Sinusoidal positions (Vaswani et al. 2017, section 3.5): the float64 oracle.

Written from the definitions, apart from the reference module and the exporter (tests/layout checks that it
never imports an exporter).
"""

from __future__ import annotations

import numpy as np

from ropeexport.families.sinusoidal.spec import SinusoidalSpec
from ropeexport.recipes import KPOS, QPOS, Feeds


def pe_angles(positions: np.ndarray, width: int, base: float) -> np.ndarray:
    """float64 angles pos / base^(2i/d) [*positions.shape, width], channel c using i = floor(c / 2)."""
    pair = (np.arange(width) // 2) * 2  # the 2i of channel c
    return np.asarray(positions, np.float64)[..., None] / np.power(float(base), pair / width)


def pe_oracle(positions: np.ndarray, width: int, base: float) -> np.ndarray:
    """float64 PE [*positions.shape, width] from the paper's equation, channel by channel (module docstring)."""
    angles = pe_angles(positions, width, base)
    return np.where(np.arange(width) % 2 == 0, np.sin(angles), np.cos(angles))


def apply_float64(spec: SinusoidalSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """float64 y = x (* sqrt(d_model)) + PE(position_ids), PE from the paper's equation."""
    x = np.asarray(feeds["x"], np.float64)
    if spec.scale_input:
        x = x * np.sqrt(spec.d_model)
    return {"y": x + pe_oracle(feeds["position_ids"], spec.d_model, spec.base)}


def scores_float64(spec: SinusoidalSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """float64 (q + PE_i) . (k + PE_j) / sqrt(head_dim), PE from the paper's equation."""
    q = np.asarray(feeds["query"], np.float64) + pe_oracle(feeds[QPOS], spec.head_dim, spec.base)[:, None]
    k = np.asarray(feeds["key"], np.float64) + pe_oracle(feeds[KPOS], spec.head_dim, spec.base)[:, None]
    return {"scores": np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(spec.head_dim)}
