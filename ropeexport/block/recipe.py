"""The ``block`` kind of any encoding whose family offers its positions (``kinds.Positions``).

The block's stages are the same for every family: the attention component's graph with the family's piece called
inside it (``block.export``), the eager reference with the family's eager rotation or bias (``block.reference``), the
float64 oracle with the piece's float64 twin (``block.oracle``), and the probes of a cache (``block.probes``: a bias
whose keys' positions are counted over the real tokens gets the probes that test that count). The catalog adds one
to each family that offers positions; a family never imports the block.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ropeexport.block.export import build_block_graph
from ropeexport.block.oracle import block_float64
from ropeexport.block.probes import (
    block_curve,
    block_feeds,
    block_locate,
    block_probes,
    block_tolerance,
    counted_block_probes,
)
from ropeexport.block.reference import block_eager
from ropeexport.errors import SpecError
from ropeexport.recipes import Feeds, Positions, Recipe

SUMMARY = {False: "an attention layer with a KV cache: hidden in, query and key rotated by the rope piece, output and "
                  "present",
           True: "an attention layer with a KV cache: hidden in, the method's bias piece on the logits, output and "
                 "present"}  # fmt: skip
Weights = Mapping[str, np.ndarray]  # a layer's q/k/v/o projections and biases ([in, out]), as block.export takes them


def block_recipe(encoding: str, positions: Positions[Any]) -> Recipe[Any]:
    """The block kind of ``encoding``, from the positions its family offers."""

    def export(spec: Any) -> Any:
        if getattr(spec, "mrope_section", ()):  # M-RoPE: a decoder's layers only (they read [3, batch, seq] too)
            raise SpecError("artifact", "the block artifact takes [batch, seq] positions; M-RoPE (mrope_section) "
                            "builds as the rope artifact or inside a Qwen-VL decoder")  # fmt: skip
        piece = positions.piece(spec)
        return build_block_graph(spec, piece.rotary, piece.bias)

    # weights / window: a checkpoint layer's (``decoder.layer``); default the seeded projections, no window
    def eager(spec: Any, feeds: Feeds, weights: Weights | None = None, window: int = 0) -> dict[str, np.ndarray]:
        rotate, bias = positions.eager(spec)
        return block_eager(spec, feeds, rotate, bias, weights, window)

    def oracle(spec: Any, feeds: Feeds, weights: Weights | None = None, window: int = 0) -> dict[str, np.ndarray]:
        rotate, bias = positions.float64(spec)
        return block_float64(spec, feeds, rotate, bias, weights, window)

    bias = positions.counted
    return Recipe(encoding=encoding, artifact="block", summary=SUMMARY[bias], export=export,
                        probes=counted_block_probes if bias else block_probes, feeds=block_feeds, eager=eager,
                        oracle=oracle, locate=block_locate, tables=positions.tables, curve=block_curve,
                        tolerance=block_tolerance, piece=positions.piece)  # fmt: skip
