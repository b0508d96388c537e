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
# ``architectures.layers.ROUTERS`` names the first two for a layer; topk_sigmoid (Llama 4) is a component only so far
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


@dataclass(frozen=True)
class GroupedRouter:
    """DeepSeek-V3's router (transformers 5.23 ``DeepseekV3TopkRouter``; arXiv:2412.19437 section 2.1.2).

    Per token: scores s = sigmoid(x W_r) [E] (the logits in float32, as transformers computes them); the choice
    scores s + ``e_score_correction_bias``; the ``experts`` split into ``groups`` groups, each scored by the sum of its
    two best choice scores; the ``topk_group`` best groups kept; the ``top_k`` best choice scores among their experts
    chosen; each chosen expert weighted by its s (not the choice score), over their sum when ``norm_topk_prob``
    (+ 1e-20), times ``scaling`` (``routed_scaling_factor``).
    """

    experts: int
    top_k: int
    groups: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = True
    scaling: float = 1.0

    def __post_init__(self) -> None:
        require_int("n_routed_experts", self.experts, 1)
        require_int("num_experts_per_tok", self.top_k, 1, self.experts)
        require_int("n_group", self.groups, 1, self.experts)
        if self.experts % self.groups:
            raise SpecError("n_group", f"must divide n_routed_experts ({self.experts}), got {self.groups}")
        if self.experts // self.groups < 2:
            raise SpecError("n_group", f"leaves {self.experts // self.groups} expert per group; a group is scored by "
                            "its two best experts (at most n_routed_experts / 2 groups)")  # fmt: skip
        require_int("topk_group", self.topk_group, 1, self.groups)
        if self.top_k > self.topk_group * (self.experts // self.groups):
            raise SpecError("num_experts_per_tok", f"{self.top_k} exceeds the experts of the topk_group "
                            f"({self.topk_group}) groups kept ({self.topk_group * (self.experts // self.groups)})")
        if not isinstance(self.norm_topk_prob, bool):
            raise SpecError("norm_topk_prob", f"must be true or false, got {self.norm_topk_prob!r}")
        value = self.scaling
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise SpecError("routed_scaling_factor", f"must be a finite number > 0, got {value!r}")


def grouped_route64(router: GroupedRouter, logits: np.ndarray, bias: np.ndarray,
                    flips: Collection[int] = ()) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(chosen [T, k], weights [T, k]) of router logits [T, E] and ``e_score_correction_bias`` [E] (float64; the class
    doc). Ties go to the lower index (group and expert), as ONNX's TopK breaks them. A token in ``flips`` takes the
    other side of its nearest tie (``grouped_margins``): its (topk_group + 1)-th group in place of its last kept one,
    or its (k + 1)-th expert in place of its k-th.
    """  # noqa: D205
    scores = 1.0 / (1.0 + np.exp(-logits))
    choice = scores + bias
    group_order = _group_order(router, choice)
    kept = group_order[:, : router.topk_group].copy()
    group_margin, expert_margin = grouped_margins(router, choice)
    swap_group = [t for t in flips if group_margin[t] <= expert_margin[t]]
    for token in swap_group:
        kept[token, -1] = group_order[token, router.topk_group]
    order = np.argsort(-_open(router, choice, kept), axis=-1, kind="stable")
    chosen = order[:, : router.top_k].copy()
    for token in set(flips) - set(swap_group):
        chosen[token, -1] = order[token, router.top_k]
    weights = np.take_along_axis(scores, chosen, axis=-1)
    if router.norm_topk_prob:
        weights = weights / (weights.sum(axis=-1, keepdims=True) + 1e-20)
    return chosen, weights * router.scaling


def _group_scores(router: GroupedRouter, choice: np.ndarray) -> np.ndarray:
    """[T, G]: each group's score, the sum of its two best choice scores."""
    T, E = choice.shape
    return -np.sort(-choice.reshape(T, router.groups, E // router.groups), axis=-1)[..., :2].sum(axis=-1)


def _group_order(router: GroupedRouter, choice: np.ndarray) -> np.ndarray:
    """[T, G]: each token's groups, best first (ties to the lower index)."""
    return np.argsort(-_group_scores(router, choice), axis=-1, kind="stable")


def _open(router: GroupedRouter, choice: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """The choice scores [T, E] of the experts of the ``kept`` groups [T, topk_group], -inf elsewhere."""
    open_ = np.zeros((choice.shape[0], router.groups), bool)
    np.put_along_axis(open_, kept, True, axis=-1)
    return np.where(np.repeat(open_, router.experts // router.groups, axis=-1), choice, -np.inf)


def grouped_margins(router: GroupedRouter, choice: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per token of choice scores [T, E] (scores + correction): (the margin between its topk_group-th and next group's
    scores, between its k-th and (k + 1)-th open experts' choice scores), inf where there is no next one.
    """  # noqa: D205
    T = choice.shape[0]
    ranked = -np.sort(-_group_scores(router, choice), axis=-1)
    group = (ranked[:, router.topk_group - 1] - ranked[:, router.topk_group] if router.topk_group < router.groups
             else np.full(T, np.inf))  # fmt: skip
    masked = -np.sort(-_open(router, choice, _group_order(router, choice)[:, : router.topk_group]), axis=-1)
    expert = masked[:, router.top_k - 1] - masked[:, router.top_k]  # -inf past the open experts: no next one
    return group, np.where(np.isfinite(expert), expert, np.inf)


def grouped_near_ties(router: GroupedRouter, logits: np.ndarray, bias: np.ndarray,
                      bound: float) -> list[tuple[int, float]]:  # fmt: skip
    """(token, margin) of each token whose nearest routing tie (``grouped_margins``) is within ``bound`` x its largest
    |choice score|: a runtime off by that much may route it either way (``near_ties``' rule for this router).
    """  # noqa: D205
    choice = 1.0 / (1.0 + np.exp(-logits)) + bias
    margin = np.minimum(*grouped_margins(router, choice))
    scale = np.abs(choice).max(axis=-1)
    return [(int(t), float(margin[t])) for t in np.nonzero(margin <= bound * scale)[0]]


def grouped_routing(g: GraphBuilder, router: GroupedRouter, logits: str, bias: str) -> str:
    """Router logits [b, s, E] (float32) and the correction bias [E] (float32) -> each expert's weight [b, s, E]
    (float32, 0 for an expert not chosen): ``grouped_route64`` in ONNX ops (TopK, ScatterElements, GatherElements).
    """  # noqa: D205
    E, G = router.experts, router.groups
    i64 = lambda name, *v: g.shared_const(f"router_{name}", np.array(v, np.int64))  # noqa: E731
    f32 = lambda name, v: g.shared_const(f"router_{name}", np.array(v, np.float32))  # noqa: E731
    scores = g.op("Sigmoid", [logits])
    choice = g.op("Add", [scores, bias])
    grouped = g.op("Reshape", [choice, i64("grouped", 0, 0, G, E // G)])
    best_two = g.op("TopK", [grouped, i64("two", 2)], n_out=2, axis=-1)[0]
    group_scores = g.op("ReduceSum", [best_two, i64("last", -1)], keepdims=0)  # [b, s, G]
    kept = g.op("TopK", [group_scores, i64("topk_group", router.topk_group)], n_out=2, axis=-1)[1]
    filled = lambda like, value: g.op("ConstantOfShape", [g.op("Shape", [like])],  # noqa: E731
                                      value=_scalar(value, TensorProto.FLOAT))  # fmt: skip
    zeros_g, ones_k = filled(group_scores, 0.0), filled(kept, 1.0)
    open_groups = g.op("ScatterElements", [zeros_g, kept, ones_k], axis=-1)  # [b, s, G]: 1 for a kept group
    per_expert = g.op("Expand", [g.op("Unsqueeze", [open_groups, i64("last", -1)]), g.op("Shape", [grouped])])
    open_ = g.op("Cast", [g.op("Reshape", [per_expert, g.op("Shape", [choice])])], to=TensorProto.BOOL)
    masked = g.op("Where", [open_, choice, f32("closed", -np.inf)])
    chosen = g.op("TopK", [masked, i64("k", router.top_k)], n_out=2, axis=-1)[1]
    # axis 2, not -1: onnx.reference 1.23's GatherElements compares the shapes around axis -1 wrongly (dim + 1 = 0)
    weights = g.op("GatherElements", [scores, chosen], axis=2)  # [b, s, k]
    if router.norm_topk_prob:
        total = g.op("Add", [g.op("ReduceSum", [weights, i64("last", -1)], keepdims=1), f32("tiny", 1e-20)])
        weights = g.op("Div", [weights, total])
    weights = g.op("Mul", [weights, f32("scaling", router.scaling)])
    return g.op("ScatterElements", [filled(scores, 0.0), chosen, weights], axis=-1)


def shared_moe64(router: GroupedRouter, x: np.ndarray, w: Mapping[str, np.ndarray], flips: Collection[int] = (),
                 ties: tuple[float, list[tuple[int, float]]] | None = None) -> np.ndarray:  # fmt: skip
    """float64 x [b, s, n] -> [b, s, n]: DeepSeek's mixture (transformers' ``DeepseekV3MoE``): each token through its
    chosen experts (``grouped_route64``), each a SiLU-gated MLP (down(silu(gate x) * up x)), weighted, plus the shared
    experts' MLP (one of inner width n_shared x moe_intermediate_size). Weights: ``router_proj`` [n, E],
    ``router_correction`` [E], ``experts_gate_proj`` / ``experts_up_proj`` [E, n, m], ``experts_down_proj``
    [E, m, n], ``shared_gate_proj`` / ``shared_up_proj`` [n, m_s], ``shared_down_proj`` [m_s, n]. ``flips`` and
    ``ties``: as ``moe64``'s, by this router's near ties (``grouped_near_ties``).
    """  # noqa: D205
    return mixed(shared_mixing(router, x, w, flips, ties), w)


def shared_mixing(router: GroupedRouter, x: np.ndarray, w: Mapping[str, np.ndarray], flips: Collection[int] = (),
                  ties: tuple[float, list[tuple[int, float]]] | None = None) -> Mixing:  # fmt: skip
    """``shared_moe64`` routed, the shared experts' output summed, the routed ones not yet applied (``mixing``)."""
    silu_mlp = lambda y, gate, up, down: (y @ gate) / (1.0 + np.exp(-(y @ gate))) * (y @ up) @ down  # noqa: E731
    tokens = x.reshape(-1, x.shape[-1])
    logits = tokens @ w["router_proj"]
    if ties is not None:
        ties[1].extend(grouped_near_ties(router, logits, w["router_correction"], ties[0]))
    chosen, weights = grouped_route64(router, logits, w["router_correction"], flips)
    out = silu_mlp(tokens, w["shared_gate_proj"], w["shared_up_proj"], w["shared_down_proj"])
    expert = lambda y, one: silu_mlp(y, *(one[f"experts_{p}_proj"] for p in ("gate", "up", "down")))  # noqa: E731
    return Mixing(tokens, chosen, weights, out, expert, NAMES[2:5], lambda out: out.reshape(x.shape))


def shared_moe(g: GraphBuilder, router: GroupedRouter, inner: int, dtype: str, x: str, w: Mapping[str, str]) -> str:
    """x [b, s, n] -> [b, s, n]: ``shared_moe64`` in ONNX ops (the ``portable`` way: every expert on every token, an
    unchosen one weighted by an exact 0). The router reads x and ``router_proj`` [n, E] in float32, as transformers
    computes it (``hidden_states.type(torch.float32)``); the routing weights are rounded once to ``dtype`` before they
    weigh the experts. ``inner``: each routed expert's width m. ``w``: stored names of ``router_proj``,
    ``router_correction`` [E] (float32), ``experts_gate_up_proj`` [E, n, 2m] (gate columns, then up),
    ``experts_down_proj`` [E, m, n] and the shared experts' ``shared_gate_proj`` / ``shared_up_proj`` [n, m_s],
    ``shared_down_proj`` [m_s, n].
    """  # noqa: D205
    wide = lambda v: v if dtype == "fp32" else g.op("Cast", [v], to=TensorProto.FLOAT)  # noqa: E731
    logits = g.op("MatMul", [wide(x), wide(w["router_proj"])])  # [b, s, E] float32
    spread = grouped_routing(g, router, logits, w["router_correction"])
    if dtype != "fp32":
        spread = g.op("Cast", [spread], to=DTYPES[dtype].onnx)
    per_expert = g.op("Unsqueeze", [g.op("Transpose", [g.op("Flatten", [spread], axis=2)], perm=[1, 0]),
                                    g.shared_const("moe_last", np.array([-1], np.int64))])  # [E, T, 1]  # fmt: skip
    tokens = g.op("Reshape", [x, g.shared_const("moe_tokens", np.array([1, -1, 0], np.int64))])  # [1, T, n]
    both = linear(g, tokens, w["experts_gate_up_proj"])  # [E, T, 2m]
    gate, up = g.op("Split", [both, g.shared_const("moe_split", np.array([inner] * 2, np.int64))], n_out=2, axis=-1)
    hidden = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])  # silu(gate) * up
    out = linear(g, hidden, w["experts_down_proj"])  # [E, T, n]
    routed = g.op("ReduceSum", [g.op("Mul", [out, per_expert]), g.shared_const("moe_first", np.array([0], np.int64))],
                  keepdims=0)  # [T, n]  # fmt: skip
    s_gate, s_up = (linear(g, x, w[f"shared_{p}_proj"]) for p in ("gate", "up"))
    shared = linear(g, g.op("Mul", [g.op("Mul", [s_gate, g.op("Sigmoid", [s_gate])]), s_up]), w["shared_down_proj"])
    return g.op("Add", [g.op("Reshape", [routed, g.op("Shape", [x])]), shared])


@dataclass(frozen=True)
class SharedMoESpec:
    """DeepSeek's mixture as a decoder layer holds it (``shared_moe`` / ``shared_moe64``): ``router``, each routed
    expert ``inner`` wide, the shared experts' one gated MLP ``shared`` wide (n_shared_experts x inner), the
    activations in ``dtype``.
    """  # noqa: D205

    router: GroupedRouter
    inner: int
    shared: int
    dtype: str = "fp32"

    def __post_init__(self) -> None:
        require_int("moe_intermediate_size", self.inner, 1)
        require_int("n_shared_experts", self.shared, 1)  # ``shared_moe`` adds the shared experts' MLP always
        require_choice("dtype", self.dtype, tuple(DTYPES))
