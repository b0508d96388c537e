"""float64 oracles written from the formulas in plain NumPy, apart from the PyTorch reference modules.

RoPE here uses complex arithmetic (Su et al. 2021, eq. 12: f(q, m) = q e^{i m theta}); the reference modules use the
real rotate-half / interleaved forms. Both share only the schedule functions, which are tested against closed forms.
M-RoPE's axis of each frequency pair is derived here from ``mrope_section`` on its own (``_mrope_axes``), not read
from the spec's ``pair_axes`` that the exporter uses.
"""

from __future__ import annotations

import numpy as np

from ropeexport.families.rope.regimes import row_lengths
from ropeexport.families.rope.schedules import get_schedule
from ropeexport.families.rope.spec import RopeSpec


def _mrope_axes(spec: RopeSpec) -> np.ndarray:
    """The axis index [r/2] of each frequency pair, from the model code's definitions (transformers 5.23):
    Qwen2-VL ``cat([m[i % 3] for i, m in enumerate(freqs.split(mrope_section))])``; Qwen3-VL
    ``freqs_t[..., a:3 * section[a]:3] = freqs[a, ..., same]`` for a = 1, 2 over time's.
    """  # noqa: D205
    half = spec.rotary_dim // 2
    section = list(spec.mrope_section)
    if not spec.mrope_interleaved:
        return np.repeat(np.arange(len(section)) % 3, section)
    axes = np.zeros(half, np.int64)
    for a in (1, 2):
        axes[a : 3 * section[a] : 3] = a
    return axes


def _angles(spec: RopeSpec, position_ids: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """float64 angles [b, s, r/2]: position_ids [b, s] times inv_freq, or per pair its axis's position of [3, b, s]."""
    if not spec.mrope_section:
        return position_ids[..., None] * inv_freq
    every = position_ids[..., None].astype(np.float64) * inv_freq  # [3, b, s, r/2]: each axis at every frequency
    axes = _mrope_axes(spec)
    return np.stack([every[axes[j], ..., j] for j in range(axes.size)], axis=-1)


def rope_oracle(
    spec: RopeSpec, x: np.ndarray, position_ids: np.ndarray, length: int | np.ndarray | None = None
) -> np.ndarray:
    """Rotate x [b, h, s, d] (any float dtype) in float64 by position_ids [b, s] (M-RoPE: [3, b, s]); float64
    [b, h, s, d] out.

    ``length``: L for length-dependent schedules, one for every row or one per row [b] (default each row's own,
    max(position_ids[b]) + 1: ``regimes.row_lengths``). M-RoPE's schedules are static: L plays no part.
    """  # noqa: D205
    schedule = get_schedule(spec.scaling)
    r = spec.rotary_dim
    if spec.mrope_section:  # static: one frequency set for every row
        freqs = schedule.frequencies(r, spec.theta, spec.scaling_params, spec.max_positions)
        rotor = freqs.attention_factor * np.exp(1j * _angles(spec, position_ids, freqs.inv_freq))  # [b, s, r/2]
        return _rotate(spec, x, rotor)
    b = position_ids.shape[0]
    lengths = row_lengths(position_ids) if length is None else np.broadcast_to(np.asarray(length, np.int64), (b,))
    rotor = np.empty((*position_ids.shape, r // 2), np.complex128)  # [b, s, r/2]
    for value in np.unique(lengths):  # each row at its own L
        freqs = schedule.frequencies(r, spec.theta, spec.scaling_params, int(value))
        rows = lengths == value
        rotor[rows] = freqs.attention_factor * np.exp(1j * _angles(spec, position_ids[rows], freqs.inv_freq))
    return _rotate(spec, x, rotor)


def _rotate(spec: RopeSpec, x: np.ndarray, rotor: np.ndarray) -> np.ndarray:
    """x [b, h, s, d] times ``rotor`` [b, s, r/2] as complex pairs, in float64."""
    r = spec.rotary_dim
    rotor = rotor[:, None]  # [b, 1, s, r/2]
    x = np.asarray(x, dtype=np.float64)
    rot = x[..., :r]
    pairs = (rot[..., : r // 2], rot[..., r // 2 :]) if spec.layout == "half" else (rot[..., 0::2], rot[..., 1::2])
    z = (pairs[0] + 1j * pairs[1]) * rotor
    out = x.copy()
    if spec.layout == "half":
        out[..., : r // 2], out[..., r // 2 : r] = z.real, z.imag
    else:
        out[..., 0:r:2], out[..., 1:r:2] = z.real, z.imag
    return out


def rope_table_oracle(spec: RopeSpec) -> list[tuple[np.ndarray, np.ndarray]]:
    """float64 (cos, sin) per regime [max_positions, r/2], attention factor applied, in the artifact's row order."""
    schedule = get_schedule(spec.scaling)
    threshold = schedule.threshold(spec.scaling_params)
    # One call length per stored regime: any L for static schedules; L <= original, then L > original.
    lengths = [spec.max_positions] if threshold is None else [threshold]
    if schedule.regime == "switch" and threshold is not None:
        lengths.append(threshold + 1)
    positions = np.arange(spec.max_positions, dtype=np.float64)
    out = []
    for length in lengths:
        freqs = schedule.frequencies(spec.rotary_dim, spec.theta, spec.scaling_params, length)
        angles = np.outer(positions, freqs.inv_freq)
        out.append((freqs.attention_factor * np.cos(angles), freqs.attention_factor * np.sin(angles)))
    return out


def rope_scores_oracle(
    spec: RopeSpec, query: np.ndarray, key: np.ndarray, query_position_ids: np.ndarray, key_position_ids: np.ndarray
) -> np.ndarray:
    """float64 logits [b, num_heads, q_len, k_len] of the rotated pair, scaled by 1/sqrt(head_dim); row b at its own
    L_b = max over both position inputs' row b + 1.
    """  # noqa: D205
    length = row_lengths(query_position_ids, key_position_ids)
    q = rope_oracle(spec, query, query_position_ids, length)
    k = np.repeat(rope_oracle(spec, key, key_position_ids, length), spec.num_heads // spec.num_kv_heads, axis=1)
    return np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(spec.head_dim)
