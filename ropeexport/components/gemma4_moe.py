"""Gemma 4's feed-forward with its mixture of experts beside the MLP (``enable_moe_block``: 26B-A4B), and its twin.

Read from transformers 5.23 (``models/gemma4/modeling_gemma4.py``, ``Gemma4TextDecoderLayer.forward``). With h the
residual stream after attention and y = norm3(h) (``pre_feedforward_layernorm``), the branch is

    post_mlp_norm(mlp(y)) + post_experts_norm(experts(pre_experts_norm(h), router(h)))

(``post_feedforward_layernorm_1``, ``pre_feedforward_layernorm_2``, ``post_feedforward_layernorm_2``: the model's
RMSNorm), which the layer norms again with norm4 (``post_feedforward_layernorm``) before adding it to h. ``mlp`` is
Gemma's gated MLP (``dense`` wide, ``intermediate_size``). ``Gemma4TextRouter`` reads h itself, not a normed copy:
r = rms(h) * router_scale * hidden ** -0.5 (a weightless RMSNorm normed in float32, then cast), logits l = r W_r [E]
(no bias), the softmax over all E in float32, its k largest, renormalized over them (which is the softmax of the k
chosen logits: ``moe.route64``'s ``topk_softmax``), each times its expert's ``per_expert_scale``. Each expert
(``Gemma4TextExperts``) is a gated MLP of the model's activation, ``inner`` wide, without biases; the checkpoint
stores them [E, 2m, n] (gate rows, then up) and [E, n, m] (``decoder.checkpoint``: ``experts_gate_up_rows``,
``experts_down_rows``).

The graph (every form: ONNX Runtime's MoE and QMoE have no GELU-tanh gated expert, and weigh a softmax they take
themselves, without a per-expert scale) is ``moe``'s portable one: TopK of the float32 logits, Softmax of the k,
times the gathered scales, ScatterElements over E (an exact 0 for an expert not chosen), every expert on every token
(int4: one MatMulNBits per expert, ``linear``), the weighted sum over E. The router's weights ``router_proj`` [n, E],
``router_scale`` [n] and ``router_expert_scale`` [E] stay in the dtype (``linear.is_weight``).

The twin (``branch64``) evaluates each token's chosen experts only, in float64, chosen by the float64 logits; near
ties and flips as ``moe``'s (``moe.near_ties``, ``moe.route64``).

Notation: b batch, s tokens, T = b s, n hidden, m an expert's inner width, E experts, k chosen.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto, helper

from ropeexport.components.linear import linear, linear64
from ropeexport.components.mixing import Mixing, mixed
from ropeexport.components.mlp import MLPSpec, activation, activation64, mlp, mlp64
from ropeexport.components.moe import MoESpec, near_ties, route64
from ropeexport.components.norm import NormSpec, norm, norm64
from ropeexport.dtypes import DTYPES
from ropeexport.numerics import round_once
from ropeexport.specs import require_choice, require_int

if TYPE_CHECKING:
    from ropeexport.graph.onnx_io import GraphBuilder

# A layer's weights this branch reads beyond the dense MLP's (canonical names, ``decoder.weights``)
NAMES = (
    "router_proj", "router_scale", "router_expert_scale", "experts_gate_proj", "experts_up_proj", "experts_down_proj",
    "post_mlp_norm.weight", "pre_experts_norm.weight", "post_experts_norm.weight",
)  # fmt: skip


@dataclass(frozen=True)
class Gemma4MoESpec:
    """Gemma 4's feed-forward branch (module doc): ``experts`` experts ``inner`` wide, ``top_k`` a token, beside a
    gated MLP ``dense`` wide, all of activation ``act``, over a residual stream ``hidden`` wide; ``norm`` the model's
    RMSNorm (its eps and order); the activations in ``dtype``.
    """  # noqa: D205

    experts: int
    top_k: int
    inner: int
    dense: int
    hidden: int
    act: str
    norm: NormSpec
    dtype: str = "fp32"

    def __post_init__(self) -> None:
        require_int("num_experts", self.experts, 1)
        require_int("top_k_experts", self.top_k, 1, self.experts)
        require_int("moe_intermediate_size", self.inner, 1)
        require_int("intermediate_size", self.dense, 1)
        require_int("hidden_size", self.hidden, 1)
        require_choice("dtype", self.dtype, tuple(DTYPES))

    @property
    def mixture(self) -> MoESpec:
        """The routing as ``moe`` computes it (``topk_softmax`` over gated experts without biases): the twin's choice
        and near ties.
        """  # noqa: D205
        return MoESpec(self.experts, self.top_k, self.inner, 0.0, 0.0, self.dtype, router="topk_softmax",
                       expert="gated", act=self.act, bias=False)  # fmt: skip

    @property
    def mlp(self) -> MLPSpec:
        """The dense MLP beside the experts."""
        return MLPSpec("gated", self.act, self.dense, self.dtype)

    @property
    def router_norm(self) -> NormSpec:
        """The router's weightless RMSNorm: normed in float32, then cast (``Gemma4RMSNorm(with_scale=False)``)."""
        return NormSpec("rms", self.norm.eps, self.dtype, wide=True)


def branch(g: GraphBuilder, spec: Gemma4MoESpec, h: str, y: str, w: Mapping[str, str], opset: int) -> str:
    """h [b, s, n] (the residual stream), y [b, s, n] (its norm3) -> the branch [b, s, n] before norm4. ``w``: the
    stored names: the MLP's ``gate_up_proj`` / ``down_proj`` (``mlp``), ``experts_gate_up_proj`` [E, n, 2m] (gate
    columns, then up), ``experts_down_proj`` [E, m, n], the router's and the three norms' (``NAMES``).
    """  # noqa: D205
    c = lambda key, value: g.shared_const(f"gemma4_moe_{key}", round_once(np.array(value), spec.dtype))  # noqa: E731
    i64 = lambda key, *v: g.shared_const(f"gemma4_moe_{key}", np.array(v, np.int64))  # noqa: E731
    dense = norm(g, spec.norm, mlp(g, spec.mlp, y, w), w["post_mlp_norm.weight"], None, opset)
    # the router: rms(h) (weightless, in float32, cast) * scale * hidden ** -0.5, in the dtype as transformers has it
    r = norm(g, spec.router_norm, h, c("ones", np.ones(spec.hidden)), None, opset)
    r = g.op("Mul", [g.op("Mul", [r, w["router_scale"]]), c("root", spec.hidden**-0.5)])
    logits = g.op("MatMul", [r, w["router_proj"]])  # [b, s, E]
    wide = logits if spec.dtype == "fp32" else g.op("Cast", [logits], to=TensorProto.FLOAT)
    top, chosen = g.op("TopK", [wide, i64("k", spec.top_k)], n_out=2, axis=-1)  # [b, s, k]
    weights = g.op("Softmax", [top], axis=-1)  # float32: the softmax over E renormalized over the k chosen
    scale = w["router_expert_scale"]
    scale = scale if spec.dtype == "fp32" else g.op("Cast", [scale], to=TensorProto.FLOAT)
    weights = g.op("Mul", [weights, g.op("Gather", [scale, chosen], axis=0)])  # times each expert's scale
    weights = weights if spec.dtype == "fp32" else g.op("Cast", [weights], to=DTYPES[spec.dtype].onnx)
    zeros = g.op("ConstantOfShape", [g.op("Shape", [logits])],
                 value=helper.make_tensor("value", DTYPES[spec.dtype].onnx, [1], [0.0]))  # fmt: skip
    spread = g.op("ScatterElements", [zeros, chosen, weights], axis=-1)  # [b, s, E]: 0 for an expert not chosen
    per_expert = g.op("Unsqueeze", [g.op("Transpose", [g.op("Flatten", [spread], axis=2)], perm=[1, 0]),
                                    i64("last", -1)])  # [E, T, 1]  # fmt: skip
    x = norm(g, spec.norm, h, w["pre_experts_norm.weight"], None, opset)
    tokens = g.op("Reshape", [x, i64("tokens", 1, -1, 0)])  # [1, T, n]
    both = linear(g, tokens, w["experts_gate_up_proj"])  # [E, T, 2m]
    gate, up = g.op("Split", [both, i64("split", spec.inner, spec.inner)], n_out=2, axis=-1)
    hidden = g.op("Mul", [activation(g, spec.act, gate, spec.dtype), up])  # [E, T, m]
    out = linear(g, hidden, w["experts_down_proj"])  # [E, T, n]
    summed = g.op("ReduceSum", [g.op("Mul", [out, per_expert]), i64("first", 0)], keepdims=0)  # [T, n]
    mixed = g.op("Reshape", [summed, g.op("Shape", [h])])
    experts = norm(g, spec.norm, mixed, w["post_experts_norm.weight"], None, opset)
    return g.op("Add", [dense, experts])


def route(spec: Gemma4MoESpec, h: np.ndarray, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """float64 router logits [T, E] of the residual stream h [b, s, n] (module doc)."""
    tokens = h.reshape(-1, h.shape[-1])
    r = norm64(spec.router_norm, tokens, np.ones(spec.hidden)) * w["router_scale"] * spec.hidden**-0.5
    return linear64(r, w["router_proj"])


def branch64(
    spec: Gemma4MoESpec,
    h: np.ndarray,
    y: np.ndarray,
    w: Mapping[str, np.ndarray],
    flips: Collection[int] = (),
    ties: tuple[float, list[tuple[int, float]]] | None = None,
) -> np.ndarray:
    """float64 ``branch``: h [b, s, n], y [b, s, n] -> [b, s, n], each token through its k experts only. ``w``: the
    stored weights in float64 (the MLP's ``gate_proj`` / ``up_proj`` [n, dense] apart, the experts' ``NAMES``).
    ``flips`` and ``ties``: as ``moe.moe64``'s (tokens are flat indices into b x s).
    """  # noqa: D205
    return mixed(branch_mixing(spec, h, y, w, flips, ties), w)


def branch_mixing(
    spec: Gemma4MoESpec,
    h: np.ndarray,
    y: np.ndarray,
    w: Mapping[str, np.ndarray],
    flips: Collection[int] = (),
    ties: tuple[float, list[tuple[int, float]]] | None = None,
) -> Mixing:
    """``branch64`` routed, its dense MLP computed, its experts not yet applied (``mixing``)."""
    dense = norm64(spec.norm, mlp64(spec.mlp, y, w), w["post_mlp_norm.weight"])
    logits = route(spec, h, w)
    if ties is not None:
        ties[1].extend(near_ties(spec.mixture, logits, ties[0]))
    chosen, weights = route64(spec.mixture, logits, flips)
    weights = weights * w["router_expert_scale"][chosen]  # [T, k]
    tokens = norm64(spec.norm, h, w["pre_experts_norm.weight"]).reshape(-1, h.shape[-1])

    def expert(x: np.ndarray, one: Mapping[str, np.ndarray]) -> np.ndarray:
        gate, up = x @ one["experts_gate_proj"], x @ one["experts_up_proj"]
        return (activation64(spec.act, gate) * up) @ one["experts_down_proj"]

    finish = lambda out: dense + norm64(spec.norm, out.reshape(h.shape), w["post_experts_norm.weight"])  # noqa: E731
    return Mixing(tokens, chosen, weights, np.zeros_like(tokens), expert, NAMES[3:6], finish)  # its projections
