"""What a model takes as positions, typed: ``PositionInputs``. Torch- and onnx-free.

A decoder's position input is ``position_ids`` [batch, seq] (one axis: every model built so far), or
[axes, batch, seq] (multimodal RoPE: Qwen2-VL's, Qwen2.5-VL's and Qwen3-VL's time, height and width, as transformers
feeds them). The 2-D vision RoPE artifact (``families.vision_rope``) takes height and width, [2, batch, seq]. A layer
never reads batch or sequence length from the position input, and never knows how many axes it had: the model hands
every layer the [batch, seq] ``rows`` (the position input itself when it has one axis) and, per distinct encoding,
what its piece reads (``decoder.export``). The runners check a fed position input's rank and range against the
model's declaration (``runtimes.base.FeedChecker``): a multi-axis model fed 1-D positions is refused, never broadcast.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ropeexport.errors import SpecError
from ropeexport.specs import require_int

AXES_NAMES = {1: ("position",), 2: ("height", "width"), 3: ("time", "height", "width")}  # what each axis counts


@dataclass(frozen=True)
class PositionInputs:
    """A model's position input: its graph input's ``name`` and its ``axes`` (1: [batch, seq]; 3: [3, batch, seq])."""

    name: str = "position_ids"
    axes: int = 1

    def __post_init__(self) -> None:
        axes = require_int("axes", self.axes, 1, 8)
        if axes not in AXES_NAMES:
            raise SpecError("axes", f"must be one of {', '.join(map(str, AXES_NAMES))} (position axes a model takes)")
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise SpecError("name", f"must name a graph input, got {self.name!r}")

    @property
    def dims(self) -> list[int | str]:
        """The input's declared shape: ["batch", "seq"], or [axes, "batch", "seq"]."""
        return ["batch", "seq"] if self.axes == 1 else [self.axes, "batch", "seq"]

    @property
    def one_axis(self) -> bool:
        """Whether the input is itself the [batch, seq] rows every layer reads."""
        return self.axes == 1

    def text(self, rows: np.ndarray) -> np.ndarray:
        """What a text-only call feeds for the rows [b, s]: the rows themselves (one axis), or the same row on every
        axis [axes, b, s] (M-RoPE: a text token takes one position on time, height and width, as transformers'
        ``get_rope_index`` gives it). Image positions are fed whole, never made here.
        """  # noqa: D205
        rows = np.asarray(rows)
        if self.one_axis:
            return rows
        return np.ascontiguousarray(np.broadcast_to(rows, (self.axes, *rows.shape)))


ONE_AXIS = PositionInputs()
# What a layer's position piece names the model's [axes, batch, seq] input when it reads more than the rows: the
# layer's own ``position_ids`` stays the [batch, seq] rows (masks, cache placement), taken from the first axis.
AXES_INPUT = "position_axes"
