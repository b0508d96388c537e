"""The ``norm`` component: RMSNorm or LayerNorm over the last axis, its fused residual form, and its float64 twin.

RMSNorm is written as transformers computes it: in float32 inside (x / sqrt(mean(x^2) + eps)), cast back to the
dtype, then scaled by the weight (Llama's ``weight * normed.to(dtype)``); with ``offset`` 1, Gemma's order instead:
scaled by (1 + weight) in float32, then cast (``Gemma3RMSNorm``: ``(normed * (1.0 + weight.float())).type_as(x)``);
``wide``, gpt-oss's order: scaled by the weight in float32, then cast (``GptOssRMSNorm``, its weight kept in float32).
LayerNorm is ONNX ``LayerNormalization`` with a float32 stash. The twin computes each from its formula in float64 on
the stored weights.

Notation: b batch, s tokens, n the normalized width (hidden; head_dim for an attention layer's q/k norm).
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

RECIPES = ("rms", "layer")
# offset 0: Llama's RMSNorm (weight * normed, the normed cast to the dtype first); 1: Gemma's (normed * (1 + weight),
# multiplied in float32 and cast after). Gemma's checkpoints store w with 1 + w the gain, so its weight is near 0.
OFFSETS = (0.0, 1.0)


@dataclass(frozen=True)
class NormSpec:
    """One norm: ``kind`` rms or layer (a LayerNorm has a bias), ``eps``, the activations' ``dtype``, and an RMSNorm's
    ``offset`` (0: Llama's weight * normed; 1: Gemma's normed * (1 + weight), see ``OFFSETS``).
    """  # noqa: D205

    kind: str
    eps: float
    dtype: str = "fp32"
    offset: float = 0.0
    wide: bool = False  # the weight's product in float32, then cast (gpt-oss); always so with an offset

    def __post_init__(self) -> None:
        require_choice("norm", self.kind, RECIPES)
        require_choice("dtype", self.dtype, tuple(DTYPES))
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not 0 < self.eps < 1:
            raise SpecError("norm_eps", f"must be a number in (0, 1), got {self.eps!r}")
        if isinstance(self.offset, bool) or self.offset not in OFFSETS:
            raise SpecError("norm_offset", f"must be 0 (Llama: weight * normed) or 1 (Gemma: normed * (1 + weight)), "
                            f"got {self.offset!r}")  # fmt: skip
        if not isinstance(self.wide, bool):
            raise SpecError("norm_wide", f"must be True or False, got {self.wide!r}")
        if (self.offset or self.wide) and self.kind != "rms":
            raise SpecError("norm_offset", f"applies to an RMSNorm only (kind 'rms'), got kind {self.kind!r}")


def _mean_last(g: GraphBuilder, x: str, opset: int) -> str:
    if opset >= 18:  # ReduceMean reads its axes from an input since opset 18
        return g.op("ReduceMean", [x, g.shared_const("last_axis", np.array([-1], np.int64))], keepdims=1)
    return g.op("ReduceMean", [x], axes=[-1], keepdims=1)


def norm(g: GraphBuilder, spec: NormSpec, x: str, weight: str, bias: str | None, opset: int) -> str:
    """x [b, s, n] (or any [..., n]) normalized over n and scaled (``weight`` [n], a LayerNorm's ``bias`` [n])."""
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
    if spec.offset or spec.wide:  # Gemma, gpt-oss: the gain and the product in float32, one rounding at the end
        product = g.op("Mul", [scaled, _gain(g, spec, weight)])
        return product if spec.dtype == "fp32" else g.op("Cast", [product], to=DTYPES[spec.dtype].onnx)
    narrow = scaled if spec.dtype == "fp32" else g.op("Cast", [scaled], to=DTYPES[spec.dtype].onnx)
    return g.op("Mul", [narrow, weight])


def _gain(g: GraphBuilder, spec: NormSpec, weight: str) -> str:
    """float32 [n]: offset + weight, as Gemma computes it (``1.0 + self.weight.float()``).

    Computed in the graph, not stored folded: the weight is held in the activation dtype, as every norm weight is, and
    fl32(1 + w) is not a value of that dtype in fp16 or bf16, so storing the gain in the dtype would round it a second
    time, and storing it in float32 would make this norm's weight the only one not in the dtype. The Add reads only
    initializers: ONNX Runtime folds it at session creation, to the same float32 sum, so it costs nothing per call.
    """
    wide = weight if spec.dtype == "fp32" else g.op("Cast", [weight], to=TensorProto.FLOAT)
    if not spec.offset:  # gpt-oss: the weight itself, widened
        return wide
    return g.op("Add", [wide, g.shared_const("norm_offset", np.array(spec.offset, np.float32))])


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
    With an ``offset`` (Gemma), the kernel's gain is offset + weight computed in float32 (``_gain``): in fp32 that is
    Gemma's own order (normed * (1 + w), all in float32), so the fused node computes the same thing.
    """
    if delta is None:
        return h, norm(g, spec, h, weight, bias, opset)
    if not fused:
        added = g.op("Add", [h, delta])
        return added, norm(g, spec, added, weight, bias, opset)
    gain = _gain(g, spec, weight) if spec.offset else weight
    normed, _, _, added = g.op(
        "SkipSimplifiedLayerNormalization", [h, delta, gain], n_out=4, epsilon=spec.eps, domain=MICROSOFT
    )
    g.nodes[-1].output[1:3] = ["", ""]  # mean and inverse std: not computed when not asked for
    return added, normed


def fusable(spec: NormSpec) -> bool:
    """Whether ``add_norm`` can fuse: an RMSNorm in fp32 (ONNX Runtime's kernel computes in the input dtype)."""
    return spec.kind == "rms" and spec.dtype == "fp32"


def norm64(spec: NormSpec, x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """float64 x [..., n] normalized over n: RMSNorm x / sqrt(mean(x^2) + eps) * (offset + weight), or LayerNorm."""
    if spec.kind == "layer":
        centred = x - x.mean(axis=-1, keepdims=True)
        scaled = centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + spec.eps)
        return scaled * weight + (bias if bias is not None else 0.0)
    return x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + spec.eps) * (spec.offset + weight)
