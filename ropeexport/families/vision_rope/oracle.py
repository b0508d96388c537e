"""2-D vision RoPE's float64 oracle, written from the models' definitions in plain NumPy.

Complex form (Su et al. 2021, eq. 12, per axis): pair j of rotate-half's (x_j, x_{j + d/2}) is the complex number
x_j + i x_{j + d/2}, multiplied by e^{i p f_j}, where p is the patch's height position for j < d/4 and its width
position otherwise. f_j is derived here from each model's code, apart from the reference module's ``axis_inv_freq``:
- Pixtral (``even-odd``): ``inv_freq = 1 / theta^(arange(0, d, 2) / d)``, then ``cat([inv_freq[0::2],
  inv_freq[1::2]])``: f_j = theta^(-4j/d) for the height pairs, theta^(-(4(j - d/4) + 2)/d) for the width pairs.
- Qwen2.5-VL (``shared``): ``1 / theta^(arange(0, d/2, 2) / (d/2))`` for the height pairs and again for the width
  pairs: f_j = theta^(-4 (j mod d/4) / d).
It never imports the exporter or the reference module.
"""

from __future__ import annotations

import numpy as np

from ropeexport.families.vision_rope.spec import VisionRopeSpec


def pair_frequencies(spec: VisionRopeSpec) -> tuple[np.ndarray, np.ndarray]:
    """(axis [d/2], frequency [d/2] float64) of every pair j, from the module docstring's formulas."""
    d = spec.head_dim
    j = np.arange(d // 2)
    quarter = d // 4
    axis = (j >= quarter).astype(np.int64)
    within = j % quarter  # the pair's index inside its axis's block
    if spec.axis_frequencies == "even-odd":
        exponent = (4 * within + 2 * axis) / d  # height: 2 (2 within) / d; width: 2 (2 within + 1) / d
    else:
        exponent = 4 * within / d
    return axis, np.power(float(spec.theta), -exponent)


def vision_rope_oracle(spec: VisionRopeSpec, x: np.ndarray, position_ids: np.ndarray) -> np.ndarray:
    """x [b, h, s, d] rotated in float64 by position_ids [2, b, s] (height, width): float64 [b, h, s, d]."""
    axis, freq = pair_frequencies(spec)
    pos = np.asarray(position_ids, np.float64)  # [2, b, s]
    angles = np.stack([pos[axis[j]] * freq[j] for j in range(freq.size)], axis=-1)  # [b, s, d/2]
    rotor = np.exp(1j * angles)[:, None]  # [b, 1, s, d/2]
    x = np.asarray(x, np.float64)
    half = spec.head_dim // 2
    z = (x[..., :half] + 1j * x[..., half:]) * rotor
    return np.concatenate([z.real, z.imag], axis=-1)


def table_oracle(spec: VisionRopeSpec) -> dict[str, np.ndarray]:
    """float64 cos/sin [P, d/4] of each axis's pairs, by the artifact's initializer names."""
    axis, freq = pair_frequencies(spec)
    positions = np.arange(spec.max_positions, dtype=np.float64)[:, None]
    out = {}
    for a, name in enumerate(("height", "width")):
        angles = positions * freq[axis == a]  # [P, d/4]
        out[f"{name}_cos_table"], out[f"{name}_sin_table"] = np.cos(angles), np.sin(angles)
    return out
