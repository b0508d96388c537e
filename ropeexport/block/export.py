"""The ``block`` graph: the ``attention`` component as an artifact of its own, with the family's position piece.

Contract in ``ropeexport.block``; the forms and the graph in ``components.attention.graph``. The block adds what an
artifact carries: its spec's name, its metadata (spec, positions, weights) and the range guard on position_ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from ropeexport.block.projections import block_weights, kv_heads
from ropeexport.components import MICROSOFT
from ropeexport.components.attention import OPSETS, AttentionSpec
from ropeexport.components.attention.graph import INPUTS, OUTPUTS, attention_model
from ropeexport.graph.onnx_io import artifact_metadata
from ropeexport.recipes import PositionPiece

__all__ = ["INPUTS", "MICROSOFT", "OPSETS", "OUTPUTS", "block_attention", "build_block_graph"]


def block_attention(spec: Any, piece: PositionPiece | None = None, window: int = 0) -> AttentionSpec:
    """The attention a block spec (an encoding's, artifact ``block``) stands for, with ``piece`` encoding positions."""
    return AttentionSpec(num_heads=spec.num_heads, num_kv_heads=kv_heads(spec), head_dim=spec.head_dim,
                         dtype=spec.dtype, graph=spec.graph, window=window, position=piece)  # fmt: skip


def build_block_graph(
    spec: Any,
    rotary: onnx.ModelProto | None = None,
    bias: onnx.ModelProto | None = None,
    weights: Mapping[str, np.ndarray] | None = None,
    window: int = 0,
) -> onnx.ModelProto:
    """The ``block`` artifact with the family's piece: ``rotary`` (a rope artifact: query, key, position_ids in; RoPE)
    or ``bias`` (a bias artifact: query and key position ids in, attention_bias out; ALiBi and the bias family).

    ``weights`` (a decoder layer's; default the seeded ``block_weights``): q_proj [hidden, H*d], k_proj / v_proj
    [hidden, KV*d], o_proj [H*d, hidden], and optionally q_bias, k_bias, v_bias, o_bias, in float64 holding dtype
    values (stored rounded once). ``window`` > 0: sliding-window attention (a key at most window - 1 slots back).
    """  # noqa: D205
    piece = PositionPiece(rotary=rotary, bias=bias) if rotary is not None or bias is not None else None
    arrays = block_weights(spec) if weights is None else weights
    metadata = artifact_metadata(spec, ["position_ids"]) | {"ropeexport.weights": "seeded (numpy default_rng(0))"}
    return attention_model(block_attention(spec, piece, window), arrays, name=spec.name, metadata=metadata)
