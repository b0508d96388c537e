"""ALiBi's ``block`` kind: the shared block stages (``ropeexport.block``) with ALiBi's bias as the piece.

The graph calls the family's ``bias`` artifact of the same spec (its float32 slopes, its range guards) with the
queries' ``position_ids`` and each cache slot's position counted over the real tokens (cumsum(attention_mask) - 1,
BLOOM's rule); the bias goes on the scaled logits. The eager reference adds the family's eager bias and the float64
oracle its float64 bias, each with the bias artifact's causal rule by position (-inf where j > i).
"""

from __future__ import annotations

import numpy as np
import onnx

from ropeexport.block.export import build_block_graph
from ropeexport.block.oracle import block_float64
from ropeexport.block.reference import block_eager
from ropeexport.families.alibi.export import alibi_bias_nodes, alibi_single_pass
from ropeexport.families.alibi.oracle import alibi_oracle
from ropeexport.families.alibi.reference import alibi_bias
from ropeexport.families.alibi.spec import AlibiSpec
from ropeexport.families.bias.export import build_bias_graph
from ropeexport.kinds import Feeds


def bias_of(spec: AlibiSpec) -> AlibiSpec:
    """The ``bias`` artifact of a block's spec: its position piece."""
    graph = "fused" if spec.graph == "tensorrt" else spec.graph
    return spec.replace(artifact="bias", graph=graph, name=f"{spec.name}-piece")


def export_block(spec: AlibiSpec) -> onnx.ModelProto:
    """The block graph with the spec's bias artifact as its piece."""
    return build_block_graph(spec, bias=build_bias_graph(bias_of(spec), alibi_bias_nodes, alibi_single_pass))


def eager_block(spec: AlibiSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """The eager block with the family's eager bias (float32, rounded once, -inf past the query's position)."""
    piece = bias_of(spec)
    return block_eager(spec, feeds, bias=lambda q, k: alibi_bias(piece, q, k))


def float64_block(spec: AlibiSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """The float64 block with the family's float64 bias and the causal rule by position."""

    def bias(qpos: np.ndarray, kpos: np.ndarray) -> np.ndarray:
        values = alibi_oracle(spec, qpos, kpos)
        if spec.causal:
            values = np.where(kpos[:, None, None, :] > qpos[:, None, :, None], -np.inf, values)
        return values

    return block_float64(spec, feeds, bias=bias)
