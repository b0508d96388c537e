"""RoPE's ``block`` kind: the shared block stages (``ropeexport.block``) with RoPE's own pieces.

The graph calls the family's ``rope`` artifact of the same spec (same layout, schedule, dtype and graph style) as its
position piece; the eager reference rotates with the family's reference module and the float64 oracle with its
complex-form oracle, each row with its own L_b = max(position_ids[b]) + 1, as the piece does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ropeexport.block.export import build_block_graph
from ropeexport.block.oracle import Rotate64, block_float64
from ropeexport.block.reference import block_eager
from ropeexport.families.rope.export import build_rope_graph
from ropeexport.families.rope.oracle import rope_oracle
from ropeexport.families.rope.probes import check_tables
from ropeexport.families.rope.reference import reference_module
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.kinds import Feeds, PositionPiece
from ropeexport.specs import BLOCK_FORMS

Weights = Mapping[str, np.ndarray]  # a layer's q/k/v/o projections and biases ([in, out]), as block.export takes them
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
    """The spec's rope artifact and its float64 twin."""
    return PositionPiece(rotary=build_rope_graph(rope_of(spec)), rotate64=rotate64(spec))


def export_block(spec: RopeSpec) -> onnx.ModelProto:
    """The block graph with the spec's rope artifact as its piece."""
    return build_block_graph(spec, piece(spec).rotary)


def eager_block(spec: RopeSpec, feeds: Feeds, weights: Weights | None = None, window: int = 0) -> dict[str, np.ndarray]:
    """The eager block, rotating with the reference module at each row's L (``weights``: a layer's, else seeded)."""
    module = reference_module(rope_of(spec))
    return block_eager(spec, feeds, module.apply_rotation, None, weights, window)


def float64_block(
    spec: RopeSpec, feeds: Feeds, weights: Weights | None = None, window: int = 0
) -> dict[str, np.ndarray]:
    """The float64 block, rotating with the complex-form oracle at each row's L, as the graph computes it."""
    return block_float64(spec, feeds, rotate64(spec), None, weights, window)


def block_tables(spec: RopeSpec, model_path: Path) -> list[dict[str, Any]]:
    """The piece's stored cos/sin tables against float64, as the rope artifact's are checked."""
    return check_tables(rope_of(spec), model_path, prefix=PIECE_PREFIX)
