"""2-D vision RoPE: the spec, validated on construction.

Torch-free: importing it loads neither torch nor onnx (the catalog and the CLI read every spec class).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ropeexport.errors import SpecError
from ropeexport.positions import AXES_NAMES
from ropeexport.specs import SpecBase, require_choice, require_float, require_int

# How the head_dim / 2 frequency pairs are shared between the two axes (both: the first head_dim / 4 pairs turn by
# the height position, the last head_dim / 4 by the width position, rotate-half pairing over the whole head):
# - "even-odd": Pixtral's axial RoPE (transformers' PixtralVisionRotaryEmbedding): the head_dim / 2 frequencies
#   theta^(-2i / head_dim); height takes the even indices i, width the odd ones.
# - "shared": Qwen2.5-VL's ViT rotary (Qwen2_5_VLVisionRotaryEmbedding, rot_pos_emb): a RoPE of head_dim / 2,
#   frequencies theta^(-2i / (head_dim / 2)) for i < head_dim / 4, the same set for height and for width.
AXIS_FREQUENCIES = ("even-odd", "shared")
VISION_AXES = AXES_NAMES[2]  # position_ids [2, batch, seq]: height, width


@dataclass(frozen=True)
class VisionRopeSpec(SpecBase):
    """2-D (axial) rotary position embedding of a vision transformer's patches, applied to query and key.

    Shapes: query [batch, num_heads, seq, head_dim], key [batch, num_heads, seq, head_dim], position_ids int64
    [2, batch, seq] (row 0 each patch's height index, row 1 its width index; transformers builds them [seq, 2]:
    ``position_ids.T[:, None]`` is this input). ``max_positions`` bounds each axis: patches per side
    (Pixtral: image_size // patch_size). Every channel rotates (no partial rotation in either model); pairs are
    rotate-half's (i, i + head_dim / 2). Pair j < head_dim / 4 turns by the height position, the others by the
    width position, at the frequencies ``axis_frequencies`` names (``AXIS_FREQUENCIES``). Artifact: ``rope``.
    """

    encoding: ClassVar[str] = "vision_rope"
    artifacts: ClassVar[tuple[str, ...]] = ("rope",)
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"axis_frequencies": AXIS_FREQUENCIES}

    axis_frequencies: str = "even-odd"
    head_dim: int = 64
    num_heads: int = 16
    theta: float = 10000.0
    max_positions: int = 64

    def _validate(self) -> None:
        self._put("axis_frequencies", require_choice("axis_frequencies", self.axis_frequencies, AXIS_FREQUENCIES))
        head_dim = require_int("head_dim", self.head_dim, 4, 65536)
        if head_dim % 4:
            raise SpecError(
                "head_dim", f"must be a multiple of 4 (height and width each take head_dim / 4 pairs), got {head_dim}"
            )
        self._put("head_dim", head_dim)
        num_heads = require_int("num_heads", self.num_heads, 1, 4096)
        if 2 * num_heads * head_dim > 2**21:
            raise SpecError(
                "num_heads",
                f"2 x num_heads x head_dim = {2 * num_heads * head_dim} is over the limit of 2^21: verification "
                "feeds would not fit in memory",
            )
        self._put("num_heads", num_heads)
        theta = require_float("theta", self.theta, 1.0, strict=True)  # <= 1: frequencies that grow with i
        self._put("theta", theta)
        if self.max_positions > 2**16:
            raise SpecError(
                "max_positions",
                f"must be at most 65536 patches per side, got {self.max_positions}",
            )

    def pair_axes(self) -> tuple[int, ...]:
        """The axis (0 height, 1 width) each of the head_dim / 2 frequency pairs turns by."""
        quarter = self.head_dim // 4
        return (0,) * quarter + (1,) * quarter

    def name_tags(self) -> list[str]:
        """The frequency split: ``vision_rope-rope-even-odd-h16x64-p64-fp32-fused``."""
        return [self.axis_frequencies]


SPEC = VisionRopeSpec  # what the catalog reads
