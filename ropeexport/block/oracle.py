"""The ``block`` in float64: the stored (dtype-rounded) weights and inputs, every operation exact to float64.

The positions come from the family's float64 oracle (RoPE: ``families.rope.oracle.rope_oracle``, the complex form),
never from its exporter or its eager module. Attention is written from the definition: logits q k^T / sqrt(d) over
the cache and the new keys, the causal rule bottom-right aligned, padded keys hidden, softmax, a row that sees no
key set to zeros.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ropeexport.block.static import is_static, per_row
from ropeexport.block.projections import block_weights
from ropeexport.kinds import Feeds

# rotate(x [b, heads, s, d] float64, position_ids [b, s]) -> float64
Rotate64 = Callable[[np.ndarray, np.ndarray], np.ndarray]
# bias(query positions [b, s], key positions [b, t]) -> float64 [b, H, s, t] (-inf where the method masks)
Bias64 = Callable[[np.ndarray, np.ndarray], np.ndarray]


def visible(query_count: int, past: int, attention_mask: np.ndarray, window: int = 0) -> np.ndarray:
    """bool [b, 1, s, t]: key slot j visible to query slot i iff j <= i + past (and i + past - j < window, when
    given) and attention_mask marks j real.
    """  # noqa: D205
    t = attention_mask.shape[1]
    distance = (np.arange(query_count) + past)[:, None] - np.arange(t)[None, :]  # [s, t]: query slot - key slot
    causal = (distance >= 0) & ((distance < window) if window else True)
    return causal[None, None] & (attention_mask[:, None, None, :] != 0)  # any nonzero value is a real token


def block_float64(
    spec: Any,
    feeds: Feeds,
    rotate: Rotate64 | None = None,
    bias: Bias64 | None = None,
    weights: Mapping[str, np.ndarray] | None = None,
    window: int = 0,
) -> dict[str, np.ndarray]:
    """float64 output [b, s, hidden] and present_key / present_value [b, KV, t, d].

    ``weights`` and ``window`` as ``block.export.build_block_graph`` takes them (default: the seeded projections).

    ``bias`` is added to the scaled logits with each slot's position counted over the real tokens (padding at 0).
    A static-cache call is evaluated row by row as the dynamic calls it stands for (``block.static``).
    """
    if is_static(feeds):
        return per_row(feeds, lambda row: block_float64(spec, row, rotate, bias, weights, window))
    w = {k: np.asarray(v, np.float64) for k, v in (block_weights(spec) if weights is None else weights).items()}
    project = lambda y, name: y @ w[f"{name}_proj"] + w.get(f"{name}_bias", 0.0)  # noqa: E731
    H, KV, d = spec.num_heads, getattr(spec, "num_kv_heads", spec.num_heads), spec.head_dim
    x = np.asarray(feeds["hidden"], np.float64)
    b, s, _ = x.shape
    pos = feeds["position_ids"]
    heads = lambda y, n: y.reshape(b, s, n, d).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = heads(project(x, "q"), H), heads(project(x, "k"), KV), heads(project(x, "v"), KV)
    if rotate is not None:
        q, k = rotate(q, pos), rotate(k, pos)
    keys = np.concatenate([np.asarray(feeds["past_key"], np.float64), k], axis=2)
    values = np.concatenate([np.asarray(feeds["past_value"], np.float64), v], axis=2)
    mask = visible(s, feeds["past_key"].shape[2], feeds["attention_mask"], window)  # [b, 1, s, t]
    group = H // KV
    logits = np.einsum("bhid,bhjd->bhij", q, np.repeat(keys, group, axis=1)) / np.sqrt(d)
    if bias is not None:
        slots = np.maximum(np.cumsum(feeds["attention_mask"] != 0, axis=1) - 1, 0)
        logits = logits + bias(pos, slots)
    logits = np.where(mask, logits, -np.inf)
    top = np.max(logits, axis=-1, keepdims=True)
    sees = np.isfinite(top)
    e = np.where(mask, np.exp(logits - np.where(sees, top, 0.0)), 0.0)
    weights = e / np.where(sees, e.sum(axis=-1, keepdims=True), 1.0)
    attended = weights @ np.repeat(values, group, axis=1)
    output = project(attended.transpose(0, 2, 1, 3).reshape(b, s, H * d), "o")
    return {"output": output, "present_key": keys, "present_value": values}
