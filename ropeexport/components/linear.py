"""The ``linear`` component: how a projection's weight is stored, MatMul [+ bias], and its float64 twin.

A weight is held as MatMul reads it, [in, out] (transformers' ``nn.Linear`` keeps [out, in]). ``WeightFormat`` is
the one place that decides how a weight is stored in the graph (``store``) and what values the float64 twin
multiplies by (``read64``): the twin reads the stored values exactly, so the truth judges the graph's arithmetic, not
its storage. Today a weight is rounded once to the artifact dtype (fp32 / fp16); int4 (``MatMulNBits``, a packed
weight and its scales) is a new format here, and every model that stores its projections through this module gets it.

Notation: b batch, s tokens, i in features, o out features.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.numerics import round_once

if TYPE_CHECKING:
    from ropeexport.graph.onnx_io import GraphBuilder

FORMATS = tuple(DTYPES)  # a weight rounded once to a float dtype (a decoder takes fp32, fp16); int4 next


def is_weight(name: str) -> bool:
    """True for a canonical name the weight format stores (a projection: ``*_proj``, ``lm_head``); biases, norm
    scales and the embedding are held in the activation dtype.
    """  # noqa: D205
    return name.rpartition(".")[2].endswith("_proj") or name == "lm_head"


@dataclass(frozen=True)
class WeightFormat:
    """How a projection's weight is stored: ``kind`` a float dtype (fp32, fp16, bf16), rounded once from float64."""

    kind: str = "fp32"

    def __post_init__(self) -> None:
        if self.kind not in FORMATS:
            raise SpecError("weight_format", f"must be one of {', '.join(FORMATS)}; got {self.kind!r}")

    def store(self, g: GraphBuilder, name: str, weight: np.ndarray) -> str:
        """weight [i, o] added to ``g`` as the graph holds it; the name ``linear`` reads."""
        return g.const(name, self.stored(weight))

    def stored(self, weight: np.ndarray) -> np.ndarray:
        """The stored values: rounded once to the format's dtype (one rounding: a float32 detour would be a second)."""
        return round_once(weight, self.kind)

    def read64(self, weight: np.ndarray) -> np.ndarray:
        """float64 [i, o]: the stored values, exactly (every fp32 / fp16 value is a float64)."""
        return self.stored(weight).astype(np.float64)


def linear(g: GraphBuilder, x: str, weight: str, bias: str | None = None, name: str | None = None) -> str:
    """x [b, s, i] @ weight [i, o] (+ bias [o]) -> [b, s, o]; ``weight`` as ``WeightFormat.store`` returned it.

    ``name``: the result's value name (the last node's), for a graph output.
    """
    if bias is None:
        return g.op("MatMul", [x, weight], name=name)
    return g.op("Add", [g.op("MatMul", [x, weight]), bias], name=name)


def linear64(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """float64 x [b, s, i] @ weight [i, o] (+ bias [o]); ``weight`` as ``WeightFormat.read64`` returned it."""
    return x @ weight + (bias if bias is not None else 0.0)
