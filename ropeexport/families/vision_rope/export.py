"""2-D vision RoPE as an ONNX graph, fused (opset-23 ``RotaryEmbedding``) or decomposed (opset-17 primitives).

Artifact contract: inputs ``query`` and ``key`` [batch, num_heads, seq, head_dim] (table dtype), ``position_ids``
int64 [2, batch, seq] (height, width); outputs ``query_out`` and ``key_out`` with the input shapes.

Tables: initializers ``height_cos_table``, ``height_sin_table``, ``width_cos_table``, ``width_sin_table``
[max_positions, head_dim / 4], computed in float64 and rounded once (``reference.stored_tables``). Each axis gathers
its rows [b, s, d/4]; height's and width's are concatenated into the token's cos/sin [b, s, d/2], which the fused
RotaryEmbedding takes per token (3-D caches, no position_ids) and the decomposed graph multiplies by hand. Nothing
trigonometric runs in the graph.
Positions outside [0, max_positions) on either axis are mapped to a row past the table, so the lookup itself fails at
run time: ONNX ``Gather`` would otherwise wrap a negative index to the end of the table.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from ropeexport.dtypes import DTYPES
from ropeexport.families.vision_rope.reference import stored_tables
from ropeexport.families.vision_rope.spec import VISION_AXES, VisionRopeSpec
from ropeexport.forms import FORMS
from ropeexport.graph.onnx_io import GraphBuilder, artifact_metadata, make_model


def _rows(g: GraphBuilder, spec: VisionRopeSpec, pos: str) -> str:
    """Table rows for ``pos`` [b, s]: the position itself, or max_positions (past the table) where it is invalid."""
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    below = g.op("Less", [pos, g.const(f"{pos}_zero", i64(0))])
    beyond = g.op("Not", [g.op("Less", [pos, g.const(f"{pos}_max_positions", i64(spec.max_positions))])])
    bad = g.op("Or", [below, beyond])
    return g.op("Where", [bad, g.const(f"{pos}_past_table", i64(spec.max_positions)), pos], name=f"{pos}_rows")


def vision_cos_sin(g: GraphBuilder, spec: VisionRopeSpec, pos: str) -> tuple[str, str]:
    """cos and sin [b, s, d/2] for ``pos`` [2, b, s]: height's rows, then width's (module docstring)."""
    tables = {name: g.const(name, table) for name, table in stored_tables(spec).items()}
    parts: dict[str, list[str]] = {"cos": [], "sin": []}
    for a, axis in enumerate(VISION_AXES):
        row = g.op("Gather", [pos, g.const(f"{pos}_{axis}_index", np.array(a, np.int64))], axis=0, name=f"{axis}_ids")
        rows = _rows(g, spec, row)  # [b, s]
        for kind in ("cos", "sin"):
            parts[kind].append(g.op("Gather", [tables[f"{axis}_{kind}_table"], rows], name=f"{axis}_{kind}"))
    cos = g.op("Concat", parts["cos"], axis=-1, name="patch_cos")  # [b, s, d/2]
    return cos, g.op("Concat", parts["sin"], axis=-1, name="patch_sin")


def _rotate(g: GraphBuilder, spec: VisionRopeSpec, x: str, cos: str, sin: str, out: str) -> None:
    """x [b, h, s, d] rotated by cos/sin [b, s, d/2] (rotate-half pairs), written to ``out``."""
    if FORMS[spec.graph].fused_ops:
        g.op("RotaryEmbedding", [x, cos, sin], name=out, interleaved=0, num_heads=spec.num_heads,
             rotary_embedding_dim=spec.head_dim)  # fmt: skip
        return
    half = spec.head_dim // 2
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    cos4 = g.op("Unsqueeze", [cos, g.const(f"{x}_head_axis", i64(1))])  # [b, 1, s, d/2]
    sin4 = g.op("Unsqueeze", [sin, g.const(f"{x}_head_axis2", i64(1))])
    xa, xb = g.op("Split", [x, g.const(f"{x}_split_half", i64(half, half))], n_out=2, axis=-1)
    ya = g.op("Sub", [g.op("Mul", [xa, cos4]), g.op("Mul", [xb, sin4])])
    yb = g.op("Add", [g.op("Mul", [xb, cos4]), g.op("Mul", [xa, sin4])])
    g.op("Concat", [ya, yb], axis=-1, name=out)


def build_vision_rope_graph(spec: VisionRopeSpec) -> onnx.ModelProto:
    """The ``rope`` artifact: query and key rotated by their patches' (height, width) (module docstring)."""
    g = GraphBuilder()
    cos, sin = vision_cos_sin(g, spec, "position_ids")  # shared by query and key
    for x in ("query", "key"):
        _rotate(g, spec, x, cos, sin, f"{x}_out")
    dtype, H, d = DTYPES[spec.dtype].onnx, spec.num_heads, spec.head_dim
    io = helper.make_tensor_value_info
    graph = helper.make_graph(
        g.nodes,
        spec.name,
        [io("query", dtype, ["batch", H, "seq", d]), io("key", dtype, ["batch", H, "seq", d]),
         io("position_ids", TensorProto.INT64, [len(VISION_AXES), "batch", "seq"])],
        [io("query_out", dtype, ["batch", H, "seq", d]), io("key_out", dtype, ["batch", H, "seq", d])],
        g.initializers,
    )  # fmt: skip
    return make_model(graph, FORMS[spec.graph].opset, metadata=artifact_metadata(spec, ["position_ids"]))
