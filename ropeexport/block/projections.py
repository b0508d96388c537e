"""A block's projection weights: seeded float64 draws, rounded once to the artifact dtype.

hidden = num_heads x head_dim (the width every model the presets describe uses). Each weight is stored as MatMul
consumes it, [in, out] (a Hugging Face ``nn.Linear`` keeps [out, in]). Draws are normal with std 1/sqrt(in), so
activations stay of order one through every projection, and a wrong rotation or mask shows far above the
tolerance; the seed is fixed (0), so two builds of one spec hold the same bytes. The report says the weights are
seeded.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ropeexport.numerics import round_once

SEED = 0
NAMES = ("q_proj", "k_proj", "v_proj", "o_proj")


def hidden_size(spec: Any) -> int:
    """The block's width: num_heads x head_dim."""
    return int(spec.num_heads * spec.head_dim)


def kv_heads(spec: Any) -> int:
    """Key/value heads: the spec's num_kv_heads where it has one (RoPE), else num_heads (the bias family)."""
    return int(getattr(spec, "num_kv_heads", spec.num_heads))


@functools.lru_cache(maxsize=4)
def _drawn(num_heads: int, num_kv_heads: int, head_dim: int, dtype: str) -> dict[str, np.ndarray]:
    hidden, kv = num_heads * head_dim, num_kv_heads * head_dim
    sizes = {"q_proj": (hidden, hidden), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "o_proj": (hidden, hidden)}
    rng = np.random.default_rng(SEED)
    out = {}
    for name, (fan_in, fan_out) in sizes.items():
        values = rounded_float64(rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in), dtype)
        values.flags.writeable = False  # cached: shared by every caller
        out[name] = values
    return out


def rounded_float64(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values rounded once to ``dtype`` and held in float64 (exact: every dtype value is a float64)."""
    return round_once(values, dtype).astype(np.float64)


def block_weights(spec: Any) -> dict[str, np.ndarray]:
    """The four projections as the artifact stores them, in float64 ({name: [in, out]}); read-only, cached."""
    return _drawn(spec.num_heads, kv_heads(spec), spec.head_dim, spec.dtype)
