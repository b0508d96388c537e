"""2-D vision RoPE's eager reference in PyTorch, and the per-axis tables it and the export share.

Axial RoPE (Su 2024, "Rotary position embedding for ViT", the 2-D extension of Su et al. 2021): a patch at grid
position (h, w) rotates pair j of rotate-half's (x_j, x_{j + d/2}) by h * f_j for j < d/4 and by w * f_j for
j >= d/4. The frequencies f (spec ``axis_frequencies``):
- ``even-odd`` (Pixtral): base_i = theta^(-2i/d), i < d/2; height takes base_0, base_2, ..., width base_1, base_3, ...
- ``shared`` (Qwen2.5-VL's ViT): base_i = theta^(-2i/(d/2)), i < d/4, for height and again for width.

Precision: angles and their cos/sin are computed in float64 and rounded once to the table dtype; each axis stores its
own [max_positions, d/4] tables, so a token's cos/sin are table values gathered unchanged. transformers computes the
angle p * f in float32 (up to p ulps of 1 off); at 64 patches a side that is within 1e-5 rad.

Notation: b batch, h heads, s sequence (patches), d head_dim, P max_positions (patches per side).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ropeexport.errors import RuntimeInputError
from ropeexport.families.vision_rope.spec import VISION_AXES, VisionRopeSpec
from ropeexport.numerics import round_once
from ropeexport.tensors import check_positions, to_torch


def axis_inv_freq(spec: VisionRopeSpec) -> tuple[np.ndarray, np.ndarray]:
    """float64 frequencies [d/4] of the height pairs and of the width pairs (module docstring)."""
    d = spec.head_dim
    if spec.axis_frequencies == "even-odd":
        base = spec.theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # [d/2]
        return base[0::2], base[1::2]
    half = d // 2  # Qwen2.5-VL: Qwen2_5_VisionRotaryEmbedding(head_dim // 2)
    base = spec.theta ** (-np.arange(0, half, 2, dtype=np.float64) / half)  # [d/4]
    return base, base.copy()


def axis_tables(spec: VisionRopeSpec) -> list[tuple[np.ndarray, np.ndarray]]:
    """float64 (cos, sin) [P, d/4] per axis (height, width): row p holds p times that axis's frequencies."""
    positions = np.arange(spec.max_positions, dtype=np.float64)
    out = []
    for inv in axis_inv_freq(spec):
        angles = np.outer(positions, inv)  # [P, d/4] float64
        out.append((np.cos(angles), np.sin(angles)))
    return out


def stored_tables(spec: VisionRopeSpec) -> dict[str, np.ndarray]:
    """The tables as the artifact stores them, by initializer name, rounded once to the dtype: [P, d/4] each."""
    out = {}
    for axis, (cos, sin) in zip(VISION_AXES, axis_tables(spec), strict=True):
        out[f"{axis}_cos_table"] = round_once(cos, spec.dtype)
        out[f"{axis}_sin_table"] = round_once(sin, spec.dtype)
    return out


class VisionRotaryEmbedding(nn.Module):
    """Eager 2-D RoPE: ``forward(query, key, *, position_ids) -> (query_out, key_out)``.

    query and key [b, num_heads, s, d] in the spec dtype, position_ids int64 [2, b, s] (height, width); outputs keep
    the input shapes. cos/sin [b, s, d/2] are the stored tables' rows (height's, then width's); the rotation runs in
    the dtype, as the graph's does.
    """

    def __init__(self, spec: VisionRopeSpec) -> None:
        super().__init__()
        self.spec = spec
        tables = stored_tables(spec)
        self.tables = {name: to_torch(t) for name, t in tables.items()}  # [P, d/4] each

    def cos_sin(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [b, s, d/2] for position_ids [2, b, s]; [b, s] (one axis) is refused, never broadcast."""
        if position_ids.dim() != 3 or position_ids.shape[0] != len(VISION_AXES):
            raise RuntimeInputError(
                f"position_ids: expected [2, batch, seq] (height, width), got {list(position_ids.shape)}"
            )
        check_positions(position_ids, self.spec.max_positions)
        parts = {kind: [self.tables[f"{axis}_{kind}_table"][position_ids[a]] for a, axis in enumerate(VISION_AXES)]
                 for kind in ("cos", "sin")}  # fmt: skip
        return torch.cat(parts["cos"], dim=-1), torch.cat(parts["sin"], dim=-1)

    def rotate(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """x [b, h, s, d] rotated (rotate-half pairs) by position_ids [2, b, s]."""
        cos, sin = (t[:, None] for t in self.cos_sin(position_ids))  # [b, 1, s, d/2]
        half = self.spec.head_dim // 2
        xa, xb = x[..., :half], x[..., half:]
        return torch.cat((xa * cos - xb * sin, xb * cos + xa * sin), dim=-1)

    def forward(
        self, query: torch.Tensor, key: torch.Tensor, *, position_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate query and key by their patches' (height, width) positions (shapes in the class docstring)."""
        s = self.spec
        for name, x in (("query", query), ("key", key)):
            if x.dim() != 4 or x.shape[1] != s.num_heads or x.shape[3] != s.head_dim:
                raise RuntimeInputError(f"{name}: expected [batch, {s.num_heads}, seq, {s.head_dim}], got "
                                        f"{list(x.shape)}")  # fmt: skip
        return self.rotate(query, position_ids), self.rotate(key, position_ids)
