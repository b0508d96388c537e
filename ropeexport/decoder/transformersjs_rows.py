"""A multi-axis decoder fed one row of positions: how a Qwen-VL text decoder runs under transformers.js's plain class.

A Qwen-VL text decoder (multimodal RoPE) takes ``position_ids`` [3, b, s]: time, height and width. For text, every
token takes one position on all three axes (transformers' ``get_rope_index`` on a prompt without images, and
``positions.PositionInputs.text``): the three rows are equal. transformers.js's plain decoder class (the one it runs
qwen2 and qwen3 with) feeds ``position_ids`` [b, s] counted from 0 (``decoder_forward``,
``src/models/modeling_utils.js:1355-1384``). ``prefix_rows`` puts one node in front of the decoder: the model's
``position_ids`` becomes that [b, s] input, and an ``Expand`` to [3, 1, 1] gives the decoder the three equal rows
[3, b, s] it read before, under a name of its own. Nothing after it changes: fed the same rows, the prefixed model
computes what the decoder computes fed those rows three times (the same int64 values reach the same nodes).

What is lost is the image positions: an image's tokens take distinct height and width positions, which one row
cannot say. ropeexport builds no vision tower, so its text decoder has no image tokens to place.

Shapes: position_ids [b, s] -> Expand -> [axes, b, s] (the decoder's own input, renamed).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ropeexport.errors import SpecError

POSITIONS = "position_ids"
AXES = "position_ids_axes"  # the decoder's [axes, b, s] input, now made inside the graph
SHAPE = "position_ids_axes_shape"


def prefix_rows(model: onnx.ModelProto, axes: int) -> None:
    """``model``'s ``position_ids`` [axes, b, s] input made from a [b, s] one by an Expand (module doc); in place."""
    graph = model.graph
    given = next((v for v in graph.input if v.name == POSITIONS), None)
    dims = [] if given is None else list(given.type.tensor_type.shape.dim)
    if given is None or len(dims) != 3 or dims[0].dim_value != axes:
        raise SpecError("decoder", f"its graph has no {POSITIONS} input of {axes} axes [{axes}, batch, seq] to feed "
                        "from one row")  # fmt: skip
    taken = {name for node in graph.node for name in (*node.input, *node.output)} | {t.name for t in graph.initializer}
    if AXES in taken or SHAPE in taken:
        raise SpecError("decoder", f"its graph already names {AXES!r} or {SHAPE!r}")
    for node in graph.node:  # every reader of the [axes, b, s] input reads the Expand's output instead
        node.input[:] = [AXES if name == POSITIONS else name for name in node.input]
    del given.type.tensor_type.shape.dim[0]  # [b, s]: the batch and sequence dimensions kept, named as they were
    graph.initializer.append(numpy_helper.from_array(np.array([axes, 1, 1], np.int64), SHAPE))
    # [b, s] broadcast against [axes, 1, 1]: the same row on every axis, as a text-only prompt's positions are
    graph.node.insert(0, helper.make_node("Expand", [POSITIONS, SHAPE], [AXES], name="position_rows_to_axes"))
