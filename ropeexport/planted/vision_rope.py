"""2-D vision RoPE's planted bugs (position_ids [2, batch, seq]): the axes or their frequencies exported wrong.

Each claims a small spec (16 patches a side, 2 heads of 16) and starts from its correct export (``core`` module doc):
- the two axes read in each other's place (height's positions turning width's pairs): the tables stay right, the
  outputs move wherever a patch's height and width differ;
- Pixtral's even/odd split the other way round (height on the odd frequency indices, width on the even ones): both
  axes' tables are wrong;
- Qwen2.5-VL's shared frequencies exported as Pixtral's even/odd split: the height pairs agree (theta^(-4j/d) in
  both), so only the width tables and the width pairs' outputs are wrong.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from ropeexport.families.vision_rope.spec import VisionRopeSpec
from ropeexport.planted.core import PlantedBug, checks, export, set_initializer

OUT = ("query_out", "key_out")
EVEN_ODD = VisionRopeSpec(axis_frequencies="even-odd", head_dim=16, num_heads=2, max_positions=16)
SHARED = EVEN_ODD.replace(axis_frequencies="shared", name="")


def _tables(*axes: str) -> frozenset[str]:
    return frozenset(f"table:{axis}_{kind}_table" for axis in axes for kind in ("cos", "sin"))


def axes_swapped(spec: VisionRopeSpec) -> onnx.ModelProto:
    """position_ids[1] (width) read as the height axis and position_ids[0] as the width axis."""
    model = export(spec)
    set_initializer(model, "position_ids_height_index", np.array(1, np.int64))
    set_initializer(model, "position_ids_width_index", np.array(0, np.int64))
    return model


def even_odd_swapped(spec: VisionRopeSpec) -> onnx.ModelProto:
    """Height's tables built from the odd frequency indices and width's from the even ones."""
    model = export(spec)
    stored = {t.name: t for t in model.graph.initializer}
    for kind in ("cos", "sin"):
        height, width = (onnx.numpy_helper.to_array(stored[f"{a}_{kind}_table"]) for a in ("height", "width"))
        set_initializer(model, f"height_{kind}_table", width)
        set_initializer(model, f"width_{kind}_table", height)
    return model


def shared_as_even_odd(spec: VisionRopeSpec) -> onnx.ModelProto:
    """Qwen2.5-VL's shared frequencies exported as Pixtral's split, labelled as the spec it claims."""
    model = export(spec.replace(axis_frequencies="even-odd", name=spec.name))
    del model.metadata_props[:]
    model.metadata_props.extend(export(spec).metadata_props)
    return model


def _bug(name: str, summary: str, spec: VisionRopeSpec, plant: Any, tables: frozenset[str]) -> PlantedBug:
    return PlantedBug(name, summary, spec, plant, checks(*OUT) | tables)


BUGS: list[PlantedBug] = [
    _bug("vision-axes-swapped", "height and width positions read in each other's place", EVEN_ODD, axes_swapped,
         frozenset()),
    _bug("vision-even-odd-swapped", "Pixtral's height on the odd frequency indices, width on the even", EVEN_ODD,
         even_odd_swapped, _tables("height", "width")),
    _bug("vision-shared-as-even-odd", "Qwen2.5-VL's shared frequencies exported as Pixtral's even/odd split", SHARED,
         shared_as_even_odd, _tables("width")),
]  # fmt: skip
