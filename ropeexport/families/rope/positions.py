"""RoPE's positions for the model-level artifacts (``kinds.Positions``): the ``block`` kind and a decoder's layers.

The piece of a block spec is the family's ``rope`` artifact of the same spec (same layout, schedule, dtype and graph
style); the eager reference rotates with the family's reference module and the float64 oracle with its complex-form
oracle, each row with its own L_b = max(position_ids[b]) + 1, as the piece does. ``ropeexport.block`` makes the
block kind from ``POSITIONS``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ropeexport.families.rope.export import build_rope_graph
from ropeexport.families.rope.oracle import rope_oracle
from ropeexport.families.rope.probes import check_tables
from ropeexport.families.rope.reference import reference_module
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.positions import AXES_INPUT
from ropeexport.recipes import PositionPiece, Positions
from ropeexport.specs import BLOCK_FORMS

Rotate64 = Callable[[np.ndarray, np.ndarray], np.ndarray]  # x [b, h, s, d], position_ids [b, s] -> float64
PIECE_PREFIX = "rope/"  # the rope piece's names inside the block: its tables are rope/cos_table, rope/sin_table


def rope_of(spec: RopeSpec) -> RopeSpec:
    """The ``rope`` artifact of a block's spec: its position piece (the fused one in a ``tensorrt`` block: TensorRT
    10.15 parses opset-23 RotaryEmbedding).
    """  # noqa: D205
    graph = "fused" if spec.graph in BLOCK_FORMS else spec.graph
    return spec.replace(artifact="rope", graph=graph, name=f"{spec.name}-piece")


def rotate64(spec: RopeSpec, length: int | None = None) -> Rotate64:
    """The complex-form float64 rotation at L = ``length``, else each row's own max(position_ids[b]) + 1."""
    return lambda x, pos: rope_oracle(spec, x, pos, length)


def piece(spec: RopeSpec) -> PositionPiece:
    """The spec's rope artifact and its float64 twin.

    M-RoPE's piece reads the model's [3, b, s] positions by ``positions.AXES_INPUT``: the layer keeps ``position_ids``
    for its [b, s] rows (masks, cache slots), and a piece input beyond query, key and position_ids is the layer's too
    (``components.attention.graph``), wired by the decoder to its own position input.
    """
    graph = build_rope_graph(rope_of(spec))
    if spec.mrope_section:
        _rename_input(graph, "position_ids", AXES_INPUT)
    return PositionPiece(rotary=graph, rotate64=rotate64(spec))


def _rename_input(model: onnx.ModelProto, old: str, new: str) -> None:
    """Input ``old`` of ``model``'s graph renamed ``new``, in place, in every node reading it (M-RoPE's graph is
    static: no subgraph reads it).
    """  # noqa: D205
    for value in model.graph.input:
        if value.name == old:
            value.name = new
    for node in model.graph.node:
        node.input[:] = [new if name == old else name for name in node.input]


def eager(spec: RopeSpec) -> tuple[Any, None]:
    """The eager rotation (the reference module of the spec's rope artifact, at each row's L); no bias."""
    return reference_module(rope_of(spec)).apply_rotation, None


def float64(spec: RopeSpec) -> tuple[Rotate64, None]:
    """The complex-form float64 rotation at each row's L; no bias."""
    return rotate64(spec), None


def block_tables(spec: RopeSpec, model_path: Path) -> list[dict[str, Any]]:
    """The piece's stored cos/sin tables against float64, as the rope artifact's are checked."""
    return check_tables(rope_of(spec), model_path, prefix=PIECE_PREFIX)


POSITIONS = Positions(piece=piece, eager=eager, float64=float64, tables=block_tables)
