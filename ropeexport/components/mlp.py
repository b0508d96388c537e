"""The ``mlp`` component: gated (down(act(gate x) * up x)) or plain (down(act(up x))), and its float64 twin.

The activations are written out from their formulas in the graph (no fused op whose approximation would differ by
runtime) and in float64 in the twin. A gated MLP's gate and up projections are one MatMul in the graph (``joined``),
then a Split: a decode step is a row times each weight matrix, and ONNX Runtime's per-node cost is a visible share
of two small ones; each output column is the same dot product either way.

Notation: b batch, s tokens, n hidden, m the MLP's inner width (intermediate_size).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ropeexport.components.linear import linear, linear64
from ropeexport.dtypes import DTYPES
from ropeexport.numerics import round_once
from ropeexport.specs import require_choice, require_int

if TYPE_CHECKING:
    from ropeexport.graph.onnx_io import GraphBuilder

RECIPES = ("gated", "plain")
ACTIVATIONS = ("silu", "relu", "gelu", "gelu_tanh")  # gelu: the erf form; gelu_tanh: the tanh approximation


@dataclass(frozen=True)
class MLPSpec:
    """One MLP: ``kind`` gated or plain, its activation ``act``, inner width ``inner`` (m), the activations' dtype."""

    kind: str
    act: str
    inner: int
    dtype: str = "fp32"

    def __post_init__(self) -> None:
        require_choice("mlp", self.kind, RECIPES)
        require_choice("act", self.act, ACTIVATIONS)
        require_int("intermediate_size", self.inner, 1)
        require_choice("dtype", self.dtype, tuple(DTYPES))


def activation(g: GraphBuilder, name: str, x: str, dtype: str) -> str:
    """The activation ``name`` of x, written out from its formula (coefficients rounded once to the dtype)."""
    c = lambda key, value: g.shared_const(f"act_{key}", round_once(np.array(value), dtype))  # noqa: E731
    if name == "silu":
        return g.op("Mul", [x, g.op("Sigmoid", [x])])
    if name == "relu":
        return g.op("Relu", [x])
    if name == "gelu":  # 0.5 x (1 + erf(x / sqrt 2))
        inner = g.op("Erf", [g.op("Mul", [x, c("rsqrt2", 1 / math.sqrt(2))])])
    else:  # gelu_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = g.op("Mul", [g.op("Mul", [x, x]), x])
        poly = g.op("Add", [x, g.op("Mul", [cube, c("cubic", 0.044715)])])
        inner = g.op("Tanh", [g.op("Mul", [poly, c("sqrt2pi", math.sqrt(2 / math.pi))])])
    return g.op("Mul", [g.op("Mul", [x, c("half", 0.5)]), g.op("Add", [inner, c("one", 1.0)])])


def _erf(x: np.ndarray) -> np.ndarray:
    import torch  # float64 erf (numpy has none); torch.special.erf is accurate to the last bits of a double

    return torch.special.erf(torch.from_numpy(np.ascontiguousarray(x))).numpy()


def activation64(name: str, x: np.ndarray) -> np.ndarray:
    """The activation's formula in float64."""
    if name == "silu":
        # exp(-x) overflows to inf for x < -709 (a checkpoint with large weights): x / inf is -0.0, silu's limit, so
        # numpy's overflow warning would only be noise on the user's stderr mid-build.
        with np.errstate(over="ignore"):
            return x / (1.0 + np.exp(-x))
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "gelu":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))  # gelu_tanh


def joined(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A layer's weights with gate_proj | up_proj as one gate_up_proj [n, 2m] (biases alike): how a gated MLP's
    graph stores them (absent biases as zeros, when only one exists).
    """  # noqa: D205
    out = {n: v for n, v in arrays.items() if n not in ("gate_proj", "up_proj", "gate_bias", "up_bias")}
    out["gate_up_proj"] = np.concatenate([arrays["gate_proj"], arrays["up_proj"]], axis=1)
    if "gate_bias" in arrays or "up_bias" in arrays:
        inner = arrays["up_proj"].shape[1]
        out["gate_up_bias"] = np.concatenate([arrays.get(n, np.zeros(inner)) for n in ("gate_bias", "up_bias")])
    return out


def mlp(g: GraphBuilder, spec: MLPSpec, x: str, w: Mapping[str, str]) -> str:
    """x [b, s, n] -> [b, s, n]; ``w``: the stored names (gated: gate_up_proj [n, 2m] as ``joined`` gives it,
    plain: up_proj [n, m]; down_proj [m, n]; the biases of the same names with _bias, where the layer has them).
    """  # noqa: D205
    if spec.kind == "gated":  # gate | up as one MatMul, then Split (module doc)
        both = linear(g, x, w["gate_up_proj"], w.get("gate_up_bias"))
        half = g.shared_const("gate_up_split", np.array([spec.inner] * 2, np.int64))
        gate, up = g.op("Split", [both, half], n_out=2, axis=-1)
        up = g.op("Mul", [activation(g, spec.act, gate, spec.dtype), up])
    else:
        up = activation(g, spec.act, linear(g, x, w["up_proj"], w.get("up_bias")), spec.dtype)
    return linear(g, up, w["down_proj"], w.get("down_bias"))


def mlp64(spec: MLPSpec, x: np.ndarray, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """float64 x [b, s, n] -> [b, s, n] from the stored weights (gate_proj and up_proj apart, [n, m] each)."""
    up = linear64(x, w["up_proj"], w.get("up_bias"))
    if spec.kind == "gated":
        up = activation64(spec.act, linear64(x, w["gate_proj"], w.get("gate_bias"))) * up
    else:
        up = activation64(spec.act, up)
    return linear64(up, w["down_proj"], w.get("down_bias"))
