"""ALiBi's planted bugs: wrong slopes, the bias added before the scale, and a causal mask that hides the diagonal.

Every bug here claims an ALiBi spec (``alibi()``: 12 heads, so the slope recipe's non-power-of-two branch) and starts
from its correct export (``core`` module doc). The mask bugs reach the general bias path too, through fp16 scores.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from ropeexport.families.alibi.reference import alibi_slopes
from ropeexport.families.alibi.spec import AlibiSpec
from ropeexport.planted.core import PlantedBug, checks, export, nodes_of, producer, set_initializer


def alibi(**fields: Any) -> AlibiSpec:
    """A causal ALiBi spec with 12 heads (not a power of two: the slope recipe's second branch)."""
    return AlibiSpec(**({"num_heads": 12, "head_dim": 64, "max_positions": 1024} | fields))


# --- the bugs: each takes the claimed spec and returns the wrong model ----------------------------------------------


def alibi_slopes_as(slopes: Callable[[int], np.ndarray]) -> Callable[[AlibiSpec], onnx.ModelProto]:
    """The bias subgraph with other slopes (``slopes(num_heads)``) stored in ``neg_slopes``."""

    def plant(spec: AlibiSpec) -> onnx.ModelProto:
        model = export(spec)
        set_initializer(model, "neg_slopes", -slopes(spec.num_heads).astype(np.float32).reshape(1, -1, 1, 1))
        return model

    return plant


def geometric_slopes(n: int) -> np.ndarray:
    """2^(-8h/n) for h = 1..n, the power-of-two formula applied to any n."""
    return 2.0 ** (-8.0 * np.arange(1, n + 1) / n)


def repeated_slopes(n: int) -> np.ndarray:
    """The closest power of two's slopes, repeated until there are n."""
    closest = 2 ** math.floor(math.log2(n))
    return np.resize(alibi_slopes(closest), n)


def bias_before_scale(spec: AlibiSpec) -> onnx.ModelProto:
    """scores = (q . k + bias) / sqrt(d) instead of q . k / sqrt(d) + bias."""
    model = export(spec)
    add = producer(model, "scores")
    scale = producer(model, add.input[0])  # Mul(MatMul, scale)
    add.input[0], add.output[0] = scale.input[0], "biased_logits"
    scale.input[0], scale.output[0] = "biased_logits", "scores"
    model.graph.node.remove(scale)
    model.graph.node.append(scale)
    return model


def mask_hides_diagonal(spec: AlibiSpec) -> onnx.ModelProto:
    """The causal mask built with ``triu(diagonal=0)``: each query is hidden from its own key (j >= i masked)."""
    model = export(spec)
    # The mask's Where: on the bias (-inf) in the general path, on the distance (+inf) in ALiBi's single pass.
    where = next(n for n in nodes_of(model, "Where") if n.input[1] in ("minus_inf", "plus_inf"))
    producer(model, where.input[0]).op_type = "GreaterOrEqual"
    return model


# --- the list ------------------------------------------------------------------------------------------------------


BUGS: list[PlantedBug] = [
    PlantedBug(
        "alibi-slopes-geometric-12",
        "12 heads: slopes 2^(-8h/12) (the power-of-two formula applied to 12)",
        alibi(artifact="bias"),
        alibi_slopes_as(geometric_slopes),
        checks("attention_bias") | {"table:neg_slopes"},
        {"head": range(8, 12)},  # the largest errors sit in the non-power-of-two tail
    ),
    PlantedBug(
        "alibi-slopes-repeated-12",
        "12 heads: the 8-head slopes repeated (2^-1..2^-8, 2^-1..2^-4)",
        alibi(artifact="bias"),
        alibi_slopes_as(repeated_slopes),
        checks("attention_bias") | {"table:neg_slopes"},
        {"head": range(8, 12)},  # heads 0..7 are right
    ),
    PlantedBug(
        "alibi-bias-before-scale",
        "scores = (q.k + bias) / sqrt(d) instead of q.k / sqrt(d) + bias",
        alibi(artifact="scores"),
        bias_before_scale,
        checks("scores"),
    ),
    PlantedBug(
        "causal-mask-hides-diagonal",
        "causal mask j >= i (triu diagonal 0): each query hidden from itself",
        alibi(artifact="bias"),
        mask_hides_diagonal,
        checks("attention_bias"),
        {"query_position": 0, "key_position": 0, "actual": "-inf"},
    ),
    PlantedBug(
        "causal-mask-hides-diagonal-general-path",
        "the same mask bug in the general bias path (fp16 scores: clamp, Cast, Expand, then the mask)",
        alibi(artifact="scores", dtype="fp16"),
        mask_hides_diagonal,
        checks("scores"),
        {"query_position": 0, "key_position": 0, "actual": "-inf"},
    ),
]
