"""The ``block`` kind of an additive-bias method: the shared block stages with the method's bias as the piece.

The graph calls the method's own ``bias`` artifact of the same spec (its tables or slopes, its range guards) with the
queries' ``position_ids`` and each cache slot's position counted over the real tokens (cumsum(attention_mask) - 1,
BLOOM's rule); the bias goes on the scaled logits. The eager reference adds the method's eager bias and the float64
oracle its float64 bias, with the bias artifact's causal rule by position (-inf where j > i) when the spec is causal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ropeexport.block.export import build_block_graph
from ropeexport.block.oracle import Bias64, block_float64
from ropeexport.block.probes import block_curve, block_feeds, block_locate, block_tolerance, counted_block_probes
from ropeexport.block.reference import block_eager
from ropeexport.families.bias.export import BiasFn, SinglePassFn, build_bias_graph
from ropeexport.families.bias.probes import EagerBias, OracleBias
from ropeexport.kinds import ArtifactKind, Feeds, PositionPiece
from ropeexport.specs import BLOCK_FORMS

SUMMARY = "an attention layer with a KV cache: hidden in, the method's bias piece on the logits, output and present"
PIECE_PREFIX = "bias/"  # the bias piece's names inside the block (ALiBi's slopes: bias/neg_slopes)


def bias_of(spec: Any) -> Any:
    """The ``bias`` artifact of a block's spec: its position piece (fused in a ``tensorrt`` block)."""
    graph = "fused" if spec.graph in BLOCK_FORMS else spec.graph
    return spec.replace(artifact="bias", graph=graph, name=f"{spec.name}-piece")


def block_kind(
    encoding: str,
    graph_bias: BiasFn,
    eager_bias: EagerBias,
    oracle_bias: OracleBias,
    tables: Callable[..., list[dict[str, Any]]] | None = None,
    single_pass: SinglePassFn | None = None,
) -> ArtifactKind:
    """The block kind of one method, from the same pieces as its bias/scores/attention kinds."""

    def bias64(spec: Any) -> Bias64:
        def bias(qpos: np.ndarray, kpos: np.ndarray) -> np.ndarray:
            values = oracle_bias(spec, qpos, kpos)
            if spec.causal:
                values = np.where(kpos[:, None, None, :] > qpos[:, None, :, None], -np.inf, values)
            return values

        return bias

    def piece(spec: Any) -> PositionPiece:
        return PositionPiece(bias=build_bias_graph(bias_of(spec), graph_bias, single_pass), bias64=bias64(spec))

    def export(spec: Any) -> Any:
        return build_block_graph(spec, bias=piece(spec).bias)

    # weights / window: a checkpoint layer's (``decoder.layer``); default the seeded projections, no window
    def eager(spec: Any, feeds: Feeds, weights: Any = None, window: int = 0) -> dict[str, np.ndarray]:
        piece = bias_of(spec)
        return block_eager(spec, feeds, None, lambda q, k: eager_bias(piece, q, k), weights, window)

    def oracle(spec: Any, feeds: Feeds, weights: Any = None, window: int = 0) -> dict[str, np.ndarray]:
        return block_float64(spec, feeds, None, bias64(spec), weights, window)

    checks = None if tables is None else (lambda spec, path: tables(spec, path, prefix=PIECE_PREFIX))
    return ArtifactKind(
        encoding=encoding,
        artifact="block",
        summary=SUMMARY,
        export=export,
        probes=counted_block_probes,
        feeds=block_feeds,
        eager=eager,
        oracle=oracle,
        locate=block_locate,
        tables=checks,
        curve=block_curve,
        tolerance=block_tolerance,
        piece=piece,
    )
