"""An additive-bias method's positions for the model-level artifacts (``kinds.Positions``): the ``block`` kind and a
decoder's layers.

The piece of a block spec is the method's own ``bias`` artifact of the same spec (its tables or slopes, its range
guards), called with the queries' ``position_ids`` and each cache slot's position counted over the real tokens
(cumsum(attention_mask) - 1, BLOOM's rule); the bias goes on the scaled logits. The eager reference adds the method's
eager bias and the float64 oracle its float64 bias, with the bias artifact's causal rule by position (-inf where
j > i) when the spec is causal.
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ropeexport.families.bias.export import BiasFn, SinglePassFn, build_bias_graph
from ropeexport.families.bias.probes import EagerBias, OracleBias
from ropeexport.recipes import PositionPiece, Positions
from ropeexport.specs import BLOCK_FORMS

PIECE_PREFIX = "bias/"  # the bias piece's names inside the block (ALiBi's slopes: bias/neg_slopes)


def bias_of(spec: Any) -> Any:
    """The ``bias`` artifact of a block's spec: its position piece (fused in a ``tensorrt`` block)."""
    graph = "fused" if spec.graph in BLOCK_FORMS else spec.graph
    return spec.replace(artifact="bias", graph=graph, name=f"{spec.name}-piece")


def bias_positions(
    graph_bias: BiasFn,
    eager_bias: EagerBias,
    oracle_bias: OracleBias,
    tables: Callable[..., list[dict[str, Any]]] | None = None,
    single_pass: SinglePassFn | None = None,
) -> Positions[Any]:
    """One method's positions, from the same pieces as its bias/scores/attention kinds."""

    def bias64(spec: Any) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        def bias(qpos: np.ndarray, kpos: np.ndarray) -> np.ndarray:
            values = oracle_bias(spec, qpos, kpos)
            if spec.causal:
                values = np.where(kpos[:, None, None, :] > qpos[:, None, :, None], -np.inf, values)
            return values

        return bias

    def piece(spec: Any) -> PositionPiece:
        return PositionPiece(bias=build_bias_graph(bias_of(spec), graph_bias, single_pass), bias64=bias64(spec))

    def eager(spec: Any) -> tuple[None, Callable[..., Any]]:
        method = bias_of(spec)
        return None, lambda q, k: eager_bias(method, q, k)

    checks = None if tables is None else (lambda spec, path: tables(spec, path, prefix=PIECE_PREFIX))
    return Positions(piece=piece, eager=eager, float64=lambda spec: (None, bias64(spec)), tables=checks,
                     counted=True)  # fmt: skip
