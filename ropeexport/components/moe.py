"""The ``moe`` component: a mixture of experts with a top-k router (gpt-oss's, Qwen3-MoE's), and its float64 twin.

Each token's router logits l = x W_r + b_r [E]; its k largest pick the experts, weighted by the ``router``: the
softmax of those k logits (``topk_softmax``: gpt-oss, and Qwen3-MoE with ``norm_topk_prob``), or the softmax over all
E logits taken at those k, not renormalized (``softmax_topk``: Qwen3-MoE without it; ``Qwen3MoeTopKRouter`` takes
the softmax in float32, so the graph does too), or (``topk_sigmoid``: Llama 4's ``Llama4Router``) each chosen
expert fed the token times the sigmoid of its logit (the input scaled, not the output; the sigmoid in float32, as
transformers takes it), the others fed 0 (a gated expert without biases gives 0 for it). A ``shared`` expert (Llama
4's ``shared_expert``, a gated MLP ``shared`` wide) adds its output for every token. Expert e computes gpt-oss's
clamped SwiGLU on its own projections: gate = min(x W_g + b_g, limit), up = clip(x W_u + b_u, -limit, limit),
h = (up + 1) * gate * sigmoid(alpha * gate), y_e = h W_d + b_d; the token's output is sum over its k experts of
weight_e * y_e (transformers' ``GptOssMLP``; the checkpoint interleaves gate and up columns in one ``gate_up_proj``
[E, n, 2m], ``to_graph`` says how each form stores them). A ``gated`` expert is a gated MLP instead,
y_e = (act(x W_g) * x W_u) W_d, biases only where the model has them (``Qwen3MoeExperts``).

Two graphs of the same definition:

- ``portable`` (ONNX ops only, every form TensorRT or any runtime reads): TopK and Softmax pick and weigh the experts,
  ScatterElements spreads the k weights over E (zeros elsewhere); every expert computes every token (one batched
  MatMul [E, T, n] x [E, n, 2m], or in int4 one MatMulNBits per expert, ``linear``), then the down projection), and
  the weighted sum over E keeps the k chosen ones: an unchosen expert's output is multiplied by an exact 0, so the
  result is the sparse sum, at E / k times the arithmetic of it (its weights are read once per call either way).
- ``contrib`` (the gqa form, ONNX Runtime): ``com.microsoft.MoE`` (int4: ``QMoE``, ``qmoe``) computes only the
  chosen experts, with the same clamped SwiGLU (``swiglu_fusion`` 1: interleaved columns, ``activation_beta`` 1: the
  up + 1, ``normalize_routing_weights`` 1: the softmax over all E renormalized over the k chosen, which is the softmax
  of the k chosen logits; 0 for ``softmax_topk``, the softmax over all E as it is). A gated silu expert is its
  SwiGLU with ``activation_alpha`` 1, ``activation_beta`` 0 and no ``swiglu_limit`` (no clamp); other activations of
  a gated expert have no contrib form and take the portable graph.

The twin evaluates only the chosen experts of each token in float64, choosing by the float64 logits. A token whose
k-th and (k + 1)-th router logits are closer than the runtime's rounding of them may be routed otherwise by a graph
(a near tie of the routing, ``near_ties``): the choice jumps, and the output with it (by the weight of the expert
swapped). The twin can take such a token the other way (``flips``), so a verification can find the routing the
runtime took among those the near ties allow (``decoder.verify``).

Notation: b batch, s tokens, T = b s, n hidden, m an expert's inner width (intermediate_size), E experts, k chosen.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import TensorProto, helper

from ropeexport.components.linear import linear, linear64
from ropeexport.components.mixing import Mixing, mixed
from ropeexport.components.mlp import MLPSpec, activation, activation64, mlp, mlp64
from ropeexport.components.qmoe import experts_op
from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.numerics import round_once
from ropeexport.specs import require_choice, require_int

if TYPE_CHECKING:
    from ropeexport.graph.onnx_io import GraphBuilder

KERNELS = ("portable", "contrib")
# A layer's routers (``architectures.feedforward.ROUTERS``): these three, DeepSeek's (``grouped_moe``), Gemma 4's
# (``gemma4_moe``)
ROUTERS = ("topk_softmax", "softmax_topk", "topk_sigmoid")
EXPERTS = ("clamped_swiglu", "gated")
ACTS = ("silu", "relu", "gelu", "gelu_tanh")  # a gated expert's activation (``components.mlp``)
# Canonical weight names of one layer's mixture (``decoder.architectures``), as the twin reads them.
NAMES = ("router_proj", "router_bias", "experts_gate_proj", "experts_up_proj", "experts_down_proj",
         "experts_gate_bias", "experts_up_bias", "experts_down_bias")  # fmt: skip


@dataclass(frozen=True)
class MoESpec:
    """A mixture of ``experts`` experts of inner width ``inner``, ``top_k`` chosen per token by ``router``.

    ``expert``: ``clamped_swiglu`` (gpt-oss) with ``alpha``, the sigmoid's gain (1.702), and ``limit``, the clamp of
    gate (above) and up (both sides), 7.0 in gpt-oss; or ``gated``, a gated MLP of ``act`` (alpha and limit 0).
    ``bias``: the router and experts have biases. ``shared``: the inner width of a shared gated expert every token
    takes (0: none; weights ``shared_gate_proj`` / ``shared_up_proj`` [n, shared], ``shared_down_proj``).
    ``kernel``: ``portable`` or ``contrib`` (module doc); ``dtype``: the activations'. ``int4``: experts in QMoE.
    """

    experts: int
    top_k: int
    inner: int
    alpha: float
    limit: float
    dtype: str = "fp32"
    kernel: str = "portable"
    router: str = "topk_softmax"
    expert: str = "clamped_swiglu"
    act: str = "silu"
    bias: bool = True
    shared: int = 0
    int4: bool = False  # the contrib kernel's experts in int4 (``qmoe``), which fp16 softmax_topk takes (``contrib``)

    def __post_init__(self) -> None:
        require_int("num_experts", self.experts, 1)
        require_int("experts_per_token", self.top_k, 1, self.experts)
        require_int("intermediate_size", self.inner, 1)
        require_choice("router", self.router, ROUTERS)
        require_choice("expert", self.expert, EXPERTS)
        require_choice("act", self.act, ACTS)
        require_int("shared_intermediate_size", self.shared, 0)
        if self.router == "topk_sigmoid" and (self.expert != "gated" or self.bias):
            # an expert fed 0 must give 0: only a gated expert without biases does (transformers' Llama4TextExperts)
            raise SpecError("router", "topk_sigmoid feeds the unchosen experts 0: it takes gated experts without "
                            "biases")  # fmt: skip
        for name, value in (("swiglu_alpha", self.alpha), ("swiglu_limit", self.limit)):
            if self.expert == "gated":
                if value:
                    raise SpecError(name, f"must be 0: a gated expert has no gain or clamp, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise SpecError(name, f"must be a finite number > 0, got {value!r}")
        require_choice("dtype", self.dtype, tuple(DTYPES))
        require_choice("kernel", self.kernel, KERNELS)

    @property
    def contrib(self) -> bool:
        """Whether ONNX Runtime's MoE computes it: the contrib kernel, an expert its SwiGLU can express, and not
        ``softmax_topk`` in fp16 with float experts (ORT 1.31's CPU MoE then returns zeros: measured,
        tests/components/test_moe.py; QMoE, given the weights as router_weights, computes it: test_qmoe.py).
        """  # noqa: D205
        fp16_zeros = self.router == "softmax_topk" and self.dtype == "fp16" and not self.int4
        if fp16_zeros or self.router == "topk_sigmoid" or self.shared:
            return False  # ONNX Runtime's MoE weighs the experts' outputs, and has no shared expert
        return self.kernel == "contrib" and (self.expert == "clamped_swiglu" or self.act == "silu")


def to_graph(spec: MoESpec, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A layer's weights with its experts' as the kernel stores them; the rest as given.

    portable: ``experts_gate_up_proj`` [E, n, 2m] (gate columns, then up: one MatMul, then Split),
    ``experts_gate_up_bias`` [E, 1, 2m], ``experts_down_proj`` [E, m, n], ``experts_down_bias`` [E, 1, n].
    Without ``bias``, no bias is stored. contrib (``com.microsoft.MoE``'s layout, where ``spec.contrib``):
    ``experts_gate_up_proj`` [E, 2m, n] (rows interleaved gate, up, as the checkpoint's columns),
    ``experts_gate_up_bias`` [E, 2m], ``experts_down_proj`` [E, n, m], ``experts_down_bias`` [E, n].
    Only transposes and concatenations: every stored value is the checkpoint's.
    """
    out = {k: v for k, v in arrays.items() if not k.startswith(("experts_", "shared_"))}
    if spec.shared:  # the shared expert's gate | up as one [n, 2s] (``mlp.joined``), then its down [s, n]
        out["shared_gate_up_proj"] = np.concatenate([arrays["shared_gate_proj"], arrays["shared_up_proj"]], axis=1)
        out["shared_down_proj"] = arrays["shared_down_proj"]
    gate, up = arrays["experts_gate_proj"], arrays["experts_up_proj"]  # [E, n, m] each
    # in this order (gate_up, its bias, down, its bias): the model's initializers follow it, so its bytes do
    if not spec.contrib:
        out["experts_gate_up_proj"] = np.concatenate([gate, up], axis=-1)
        if spec.bias:
            both = [arrays["experts_gate_bias"], arrays["experts_up_bias"]]  # [E, m] each
            out["experts_gate_up_bias"] = np.concatenate(both, axis=-1)[:, None, :]
        out["experts_down_proj"] = arrays["experts_down_proj"]
        if spec.bias:
            out["experts_down_bias"] = arrays["experts_down_bias"][:, None, :]
        return out
    E, n, m = gate.shape
    out["experts_gate_up_proj"] = np.stack([gate, up], axis=-1).reshape(E, n, 2 * m).transpose(0, 2, 1)
    if spec.bias:
        gate_bias, up_bias = arrays["experts_gate_bias"], arrays["experts_up_bias"]
        out["experts_gate_up_bias"] = np.stack([gate_bias, up_bias], axis=-1).reshape(E, 2 * m)
    out["experts_down_proj"] = arrays["experts_down_proj"].transpose(0, 2, 1)
    if spec.bias:
        out["experts_down_bias"] = arrays["experts_down_bias"]
    return out


def moe(g: GraphBuilder, spec: MoESpec, x: str, w: Mapping[str, str]) -> str:
    """x [b, s, n] -> [b, s, n]; ``w``: the stored names of ``to_graph``'s weights and the router's."""
    logits = linear(g, x, w["router_proj"], w.get("router_bias"))  # [b, s, E]
    if spec.contrib:
        flat = g.op("Flatten", [x], axis=2)  # [T, n]
        gated = spec.expert == "gated"  # silu(gate) * up: SwiGLU at gain 1, up + 0, no clamp (module doc)
        clamp: dict[str, Any] = {} if gated else {"swiglu_limit": float(spec.limit)}
        mixed = experts_op(g, [flat, g.op("Flatten", [logits], axis=2), w["experts_gate_up_proj"],
                               w.get("experts_gate_up_bias", ""), w["experts_down_proj"],
                               w.get("experts_down_bias", "")], spec.dtype,
                     k=spec.top_k, activation_type="swiglu", swiglu_fusion=1,
                     activation_alpha=1.0 if gated else float(spec.alpha), activation_beta=0.0 if gated else 1.0,
                     normalize_routing_weights=int(spec.router == "topk_softmax"), **clamp)  # fmt: skip
        return g.op("Reshape", [mixed, g.op("Shape", [x])])
    c = lambda key, value: g.shared_const(f"moe_{key}", round_once(np.array(value), spec.dtype))  # noqa: E731
    k = g.shared_const("moe_k", np.array([spec.top_k], np.int64))
    if spec.router == "topk_softmax":
        top, chosen = g.op("TopK", [logits, k], n_out=2, axis=-1)
        weights = g.op("Softmax", [top], axis=-1)  # [b, s, k]: the softmax of the k chosen logits
    elif spec.router == "topk_sigmoid":  # the sigmoid of each chosen logit in float32 (as Llama4Router takes it)
        top, chosen = g.op("TopK", [logits, k], n_out=2, axis=-1)
        weights = g.op("Sigmoid", [g.op("Cast", [top], to=TensorProto.FLOAT)])
        weights = g.op("Cast", [weights], to=DTYPES[spec.dtype].onnx) if spec.dtype != "fp32" else weights
    else:  # softmax_topk: the softmax over all E in float32 (as transformers takes it), its k largest as they are
        probs = g.op("Softmax", [g.op("Cast", [logits], to=TensorProto.FLOAT)], axis=-1)  # [b, s, E]
        top, chosen = g.op("TopK", [probs, k], n_out=2, axis=-1)
        weights = g.op("Cast", [top], to=DTYPES[spec.dtype].onnx) if spec.dtype != "fp32" else top
    zeros = g.op("ConstantOfShape", [g.op("Shape", [logits])],
                 value=_scalar(0.0, DTYPES[spec.dtype].onnx))  # fmt: skip
    spread = g.op("ScatterElements", [zeros, chosen, weights], axis=-1)  # [b, s, E]: 0 for an expert not chosen
    per_expert = g.op("Unsqueeze", [g.op("Transpose", [g.op("Flatten", [spread], axis=2)], perm=[1, 0]),
                                    g.shared_const("moe_last", np.array([-1], np.int64))])  # [E, T, 1]  # fmt: skip
    tokens = g.op("Reshape", [x, g.shared_const("moe_tokens", np.array([1, -1, 0], np.int64))])  # [1, T, n]
    if spec.router == "topk_sigmoid":  # each expert's input scaled by its weight (0 where not chosen): [E, T, n]
        tokens = g.op("Mul", [tokens, per_expert])
    both = linear(g, tokens, w["experts_gate_up_proj"], w.get("experts_gate_up_bias"))  # [E, T, 2m]
    half = g.shared_const("moe_split", np.array([spec.inner] * 2, np.int64))
    gate, up = g.op("Split", [both, half], n_out=2, axis=-1)
    if spec.expert == "gated":
        hidden = g.op("Mul", [activation(g, spec.act, gate, spec.dtype), up])  # [E, T, m]
    else:
        gate = g.op("Min", [gate, c("limit", spec.limit)])
        up = g.op("Clip", [up, c("low", -spec.limit), c("limit", spec.limit)])
        glu = g.op("Mul", [gate, g.op("Sigmoid", [g.op("Mul", [gate, c("alpha", spec.alpha)])])])
        hidden = g.op("Mul", [g.op("Add", [up, c("one", 1.0)]), glu])  # [E, T, m]
    out = linear(g, hidden, w["experts_down_proj"], w.get("experts_down_bias"))  # [E, T, n]
    weighed = out if spec.router == "topk_sigmoid" else g.op("Mul", [out, per_expert])  # inputs already scaled
    summed = g.op("ReduceSum", [weighed, g.shared_const("moe_first", np.array([0], np.int64))], keepdims=0)  # [T, n]
    mixed = g.op("Reshape", [summed, g.op("Shape", [x])])
    if not spec.shared:
        return mixed
    shared = mlp(g, MLPSpec("gated", spec.act, spec.shared, spec.dtype), x,
                 {"gate_up_proj": w["shared_gate_up_proj"], "down_proj": w["shared_down_proj"]})  # fmt: skip
    return g.op("Add", [shared, mixed])


def _scalar(value: float, onnx_dtype: int) -> TensorProto:
    return helper.make_tensor("value", onnx_dtype, [1], [value])


def route64(spec: MoESpec, logits: np.ndarray, flips: Collection[int] = ()) -> tuple[np.ndarray, np.ndarray]:
    """(chosen [T, k], weights [T, k]) of float64 router logits [T, E]: the k largest, ties to the lower index; the
    softmax of their logits (``topk_softmax``) or of all E logits at them (``softmax_topk``). A token in ``flips``
    takes its (k + 1)-th expert in place of its k-th (the other side of a near tie, ``near_ties``).
    """  # noqa: D205
    order = np.argsort(-logits, axis=-1, kind="stable")
    chosen = order[:, : spec.top_k].copy()
    for token in flips:
        chosen[token, -1] = order[token, spec.top_k]
    top = np.take_along_axis(logits, chosen, axis=-1)
    if spec.router == "topk_sigmoid":
        return chosen, 1.0 / (1.0 + np.exp(-top))
    if spec.router == "softmax_topk":
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return chosen, np.take_along_axis(e, chosen, axis=-1) / e.sum(axis=-1, keepdims=True)
    e = np.exp(top - top.max(axis=-1, keepdims=True))
    return chosen, e / e.sum(axis=-1, keepdims=True)


def near_ties(spec: MoESpec, logits: np.ndarray, bound: float) -> list[tuple[int, float]]:
    """(token, margin) of each token of router logits [T, E] whose k-th and (k + 1)-th logits are within ``bound`` x
    its largest |logit|: a runtime whose logits are off by that much may route it either way. None with k = E.
    """  # noqa: D205
    if spec.top_k == spec.experts:
        return []
    ordered = -np.sort(-logits, axis=-1)
    margins = ordered[:, spec.top_k - 1] - ordered[:, spec.top_k]
    scale = np.abs(logits).max(axis=-1)
    return [(int(t), float(margins[t])) for t in np.nonzero(margins <= bound * scale)[0]]


def expert64(spec: MoESpec, x: np.ndarray, one: Mapping[str, np.ndarray]) -> np.ndarray:
    """float64 [t, n] -> [t, n]: an expert's clamped SwiGLU or gated MLP (module doc) from its weights ``one``."""
    if spec.expert == "gated":
        hidden = activation64(spec.act, linear64(x, one["experts_gate_proj"], one.get("experts_gate_bias")))
        hidden = hidden * linear64(x, one["experts_up_proj"], one.get("experts_up_bias"))
        return linear64(hidden, one["experts_down_proj"], one.get("experts_down_bias"))
    gate = np.minimum(linear64(x, one["experts_gate_proj"], one["experts_gate_bias"]), spec.limit)
    up = np.clip(linear64(x, one["experts_up_proj"], one["experts_up_bias"]), -spec.limit, spec.limit)
    glu = gate / (1.0 + np.exp(-spec.alpha * gate))
    return linear64((up + 1.0) * glu, one["experts_down_proj"], one["experts_down_bias"])


def moe64(spec: MoESpec, x: np.ndarray, w: Mapping[str, np.ndarray], flips: Collection[int] = (),
          ties: tuple[float, list[tuple[int, float]]] | None = None) -> np.ndarray:  # fmt: skip
    """float64 x [b, s, n] -> [b, s, n] from the stored weights under their canonical names (``NAMES``): each token
    through its k experts only, chosen and weighed by its float64 router logits. ``flips``: tokens (flat indices into
    b x s) routed the other way at their near tie (``route64``). ``ties``: (bound, a list) to which the (token,
    margin) of every near tie within that bound is appended (``near_ties``).
    """  # noqa: D205
    return mixed(moe_mixing(spec, x, w, flips, ties), w)


def moe_mixing(spec: MoESpec, x: np.ndarray, w: Mapping[str, np.ndarray], flips: Collection[int] = (),
               ties: tuple[float, list[tuple[int, float]]] | None = None) -> Mixing:  # fmt: skip
    """``moe64`` routed, its experts not yet applied (``mixing``): ``mixed`` of it is ``moe64``."""
    needed = NAMES if spec.bias else tuple(name for name in NAMES if "bias" not in name)
    if (missing := next((name for name in needed if name not in w), None)) is not None:
        raise SpecError("weights", f"a mixture of experts needs {missing!r}, which the weights do not hold")
    tokens = x.reshape(-1, x.shape[-1])
    logits = linear64(tokens, w["router_proj"], w.get("router_bias"))
    if ties is not None:
        ties[1].extend(near_ties(spec, logits, ties[0]))
    chosen, weights = route64(spec, logits, flips)
    shared = {name: w[f"shared_{name}"] for name in ("gate_proj", "up_proj", "down_proj")} if spec.shared else {}
    extra = mlp64(MLPSpec("gated", spec.act, spec.shared), tokens, shared) if shared else None  # after the k
    finish = lambda out: (out if extra is None else out + extra).reshape(x.shape)  # noqa: E731
    return Mixing(tokens, chosen, weights, np.zeros_like(tokens), lambda y, one: expert64(spec, y, one),
                  tuple(n for n in needed if n.startswith("experts_")), finish, spec.router == "topk_sigmoid")

