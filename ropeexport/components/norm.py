"""The ``norm`` component: RMSNorm or LayerNorm over the last axis, its fused residual form, and its float64 twin.

RMSNorm is written as transformers computes it: in float32 inside (x / sqrt(mean(x^2) + eps)), cast back to the
dtype, then scaled by the weight. LayerNorm is ONNX ``LayerNormalization`` with a float32 stash. The twin computes
both from their formulas in float64 on the stored weights.

Notation: b batch, s tokens, n the normalized width (hidden).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto

from ropeexport.components import MICROSOFT
from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.specs import require_choice

if TYPE_CHECKING:
    from ropeexport.graph.onnx_io import GraphBuilder

KINDS = ("rms", "layer")


@dataclass(frozen=True)
class NormSpec:
    """One norm: ``kind`` rms or layer (a LayerNorm has a bias), ``eps``, the activations' ``dtype``."""

    kind: str
    eps: float
    dtype: str = "fp32"

    def __post_init__(self) -> None:
        require_choice("norm", self.kind, KINDS)
        require_choice("dtype", self.dtype, tuple(DTYPES))
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not 0 < self.eps < 1:
            raise SpecError("norm_eps", f"must be a number in (0, 1), got {self.eps!r}")


def _mean_last(g: GraphBuilder, x: str, opset: int) -> str:
    if opset >= 18:  # ReduceMean reads its axes from an input since opset 18
        return g.op("ReduceMean", [x, g.shared_const("last_axis", np.array([-1], np.int64))], keepdims=1)
    return g.op("ReduceMean", [x], axes=[-1], keepdims=1)


def norm(g: GraphBuilder, spec: NormSpec, x: str, weight: str, bias: str | None, opset: int) -> str:
    """x [b, s, n] normalized over n and scaled (``weight`` [n], a LayerNorm's ``bias`` [n]); [b, s, n]."""
    if spec.kind == "layer":
        inputs = [x, weight] if bias is None else [x, weight, bias]  # ONNX's bias is optional (zeros)
        return g.op("LayerNormalization", inputs, axis=-1, epsilon=spec.eps, stash_type=1)
    wide = x if spec.dtype == "fp32" else g.op("Cast", [x], to=TensorProto.FLOAT)
    eps = g.shared_const("norm_eps", np.array(spec.eps, np.float32))
    # Pow, not Mul(x, x): ONNX Runtime fuses Pow -> ReduceMean -> Add -> Sqrt -> Div -> Mul into one
    # SimplifiedLayerNormalization only from Pow (one node instead of six, per norm, per call).
    squared = g.op("Pow", [wide, g.shared_const("norm_two", np.array(2.0, np.float32))])
    variance = _mean_last(g, squared, opset)
    scaled = g.op("Div", [wide, g.op("Sqrt", [g.op("Add", [variance, eps])])])
    narrow = scaled if spec.dtype == "fp32" else g.op("Cast", [scaled], to=DTYPES[spec.dtype].onnx)
    return g.op("Mul", [narrow, weight])


def add_norm(
    g: GraphBuilder,
    spec: NormSpec,
    h: str,
    delta: str | None,
    weight: str,
    bias: str | None,
    opset: int,
    fused: bool = False,
) -> tuple[str, str]:
    """(h + delta, its norm), each [b, s, n]; ``delta`` None: (h, norm of h).

    ``fused`` (an RMSNorm in fp32, ONNX Runtime only): the add and the norm as one
    ``com.microsoft.SkipSimplifiedLayerNormalization``, as onnxruntime-genai's builder writes them: ONNX Runtime does
    not fuse them itself when the sum has a second reader (the next residual add always is one), and a decode step
    pays per node. The sum is the same float32 addition; the norm is computed in float32 as ``norm`` computes it.
    """
    if delta is None:
        return h, norm(g, spec, h, weight, bias, opset)
    if not fused:
        added = g.op("Add", [h, delta])
        return added, norm(g, spec, added, weight, bias, opset)
    normed, _, _, added = g.op(
        "SkipSimplifiedLayerNormalization", [h, delta, weight], n_out=4, epsilon=spec.eps, domain=MICROSOFT
    )
    g.nodes[-1].output[1:3] = ["", ""]  # mean and inverse std: not computed when not asked for
    return added, normed


def fusable(spec: NormSpec) -> bool:
    """Whether ``add_norm`` can fuse: an RMSNorm in fp32 (ONNX Runtime's kernel computes in the input dtype)."""
    return spec.kind == "rms" and spec.dtype == "fp32"


def norm64(spec: NormSpec, x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """float64 x [b, s, n] normalized over n: RMSNorm x / sqrt(mean(x^2) + eps) * weight, or LayerNorm."""
    if spec.kind == "layer":
        centred = x - x.mean(axis=-1, keepdims=True)
        scaled = centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + spec.eps)
        return scaled * weight + (bias if bias is not None else 0.0)
    return x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + spec.eps) * weight
