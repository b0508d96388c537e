"""DeepSeek's mixture (transformers 5.23 ``DeepseekV3MoE``): the grouped router (``GroupedRouter``: the k best experts
among the ``topk_group`` best of ``n_group`` groups), its routed experts gated SiLU MLPs beside the shared experts' one
MLP, and its float64 twin.

The router is one router with options (``KINDS``: each kind transformers 5.23 computes, with the lines it is read
from): its scores (``sigmoid``, or ``softmax`` over all experts), whether a correction bias is added to choose by,
how a group is scored (``top2_sum``: its two best choice scores summed; ``max``: its best), whether the k weights are
renormalized (``norm_topk_prob``, + 1e-20), and ``routed_scaling_factor``. DeepSeek V2 and Mistral 4 mask the
experts of the groups not kept to 0 before the top k where DeepSeek V3 masks them to -inf; softmax scores are
positive, so the two choose alike unless a kept expert's float32 softmax underflows to exactly 0 (a logit ~104 below
the largest), where transformers' choice among zeros is torch's and the twin's is the lower index.

Like ``components.moe``'s, the twin chooses by the float64 scores, and a token whose nearest routing tie (a group or
an expert) is within the runtime's rounding may be routed otherwise by a graph (``grouped_near_ties``); the twin can
take it the other way (``flips``). The routed experts in ONNX Runtime's QMoE: ``components.grouped_qmoe``.

Notation: b batch, s tokens, T = b s, n hidden, m a routed expert's inner width, E experts, G groups, k chosen.
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto, helper

from ropeexport.components.linear import linear
from ropeexport.components.mixing import Mixing, mixed
from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.specs import require_choice, require_int

if TYPE_CHECKING:
    from ropeexport.graph.onnx_io import GraphBuilder


# the routed experts' weights, each [E, ...] (``shared_mixing`` reads them one expert at a time)
EXPERTS = ("experts_gate_proj", "experts_up_proj", "experts_down_proj")
SCORES = ("sigmoid", "softmax")
GROUP_RULES = ("top2_sum", "max")
# Each grouped router transformers 5.23 computes: (score, group rule, correction bias, renormalized), the last None
# where ``norm_topk_prob`` says. A layer names its kind (``architectures.feedforward.ROUTERS``).
KINDS: dict[str, tuple[str, str, bool, bool | None]] = {
    # DeepseekV3TopkRouter (modeling_deepseek_v3.py:133-158): sigmoid of float32 logits, + e_score_correction_bias
    "grouped": ("sigmoid", "top2_sum", True, None),
    # DeepseekV2TopkRouter (modular_deepseek_v2.py:172-191): softmax in float32; topk_method greedy is one group,
    # group_limited_greedy scores a group by its max; never renormalized (norm_topk_prob deleted, :166)
    "grouped_softmax_max": ("softmax", "max", False, False),
    # Mistral4TopkRouter (modular_mistral4.py:70-93): softmax, a group by its two best summed, norm_topk_prob read;
    # Mistral Large 4's (modular_mistral_large4.py:520-550) the same in float32 logits, always renormalized
    "grouped_softmax": ("softmax", "top2_sum", False, None),
}


@dataclass(frozen=True)
class GroupedRouter:
    """DeepSeek's grouped router and its kinds (module doc; DeepSeek-V3: arXiv:2412.19437 section 2.1.2).

    Per token: scores s = ``score``(x W_r) [E] (sigmoid, or the softmax over all E; the logits in float32 in the
    graph); the choice scores s, plus ``e_score_correction_bias`` when ``correction``; the ``experts`` split into
    ``groups`` groups, each scored by ``group_rule`` (the sum of its two best choice scores, or its best); the
    ``topk_group`` best groups kept; the ``top_k`` best choice scores among their experts chosen; each chosen expert
    weighted by its s (not the choice score), over their sum when ``norm_topk_prob`` (+ 1e-20), times ``scaling``
    (``routed_scaling_factor``). The defaults are DeepSeek V3's.
    """

    experts: int
    top_k: int
    groups: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = True
    scaling: float = 1.0
    score: str = "sigmoid"
    group_rule: str = "top2_sum"
    correction: bool = True

    @classmethod
    def of(cls, kind: str, experts: int, top_k: int, groups: int = 1, topk_group: int = 1, norm_topk_prob: bool = True,
           scaling: float = 1.0) -> GroupedRouter:  # fmt: skip
        """The router of ``kind`` (``KINDS``); a kind that always or never renormalizes overrides ``norm_topk_prob``."""
        require_choice("router", kind, tuple(KINDS))
        score, rule, correction, renormalized = KINDS[kind]
        norm = norm_topk_prob if renormalized is None else renormalized
        return cls(experts, top_k, groups, topk_group, norm, scaling, score, rule, correction)

    def __post_init__(self) -> None:
        require_choice("router.score", self.score, SCORES)
        require_choice("router.group_rule", self.group_rule, GROUP_RULES)
        if not isinstance(self.correction, bool) or (self.correction and self.score != "sigmoid"):
            raise SpecError("e_score_correction_bias", f"is added to sigmoid scores only (DeepSeek V3's router), "
                            f"got correction={self.correction!r} with {self.score} scores")  # fmt: skip
        require_int("n_routed_experts", self.experts, 1)
        require_int("num_experts_per_tok", self.top_k, 1, self.experts)
        require_int("n_group", self.groups, 1, self.experts)
        if self.experts % self.groups:
            raise SpecError("n_group", f"must divide n_routed_experts ({self.experts}), got {self.groups}")
        if self.group_rule == "top2_sum" and self.experts // self.groups < 2:
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


def scores64(router: GroupedRouter, logits: np.ndarray) -> np.ndarray:
    """float64 [T, E]: the router's scores of its logits [T, E] (sigmoid, or the softmax over the E experts)."""
    if router.score == "sigmoid":
        return 1.0 / (1.0 + np.exp(-logits))
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))  # the largest logit's exp is 1: no overflow
    return shifted / shifted.sum(axis=-1, keepdims=True)


def choice64(router: GroupedRouter, logits: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """float64 [T, E]: the scores the router chooses by, its scores plus the correction ``bias`` [E] if it has one."""
    scores = scores64(router, logits)
    return scores + bias if router.correction else scores


def grouped_route64(router: GroupedRouter, logits: np.ndarray, bias: np.ndarray | None,
                    flips: Collection[int] = ()) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(chosen [T, k], weights [T, k]) of router logits [T, E] and ``e_score_correction_bias`` [E] (float64; the class
    doc; ``bias`` unread by a router without correction). Ties go to the lower index (group and expert), as ONNX's
    TopK breaks them. A token in ``flips`` takes the other side of its nearest tie (``grouped_margins``): its
    (topk_group + 1)-th group in place of its last kept one, or its (k + 1)-th expert in place of its k-th.
    """  # noqa: D205
    scores = scores64(router, logits)
    choice = scores + bias if router.correction else scores
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
    """[T, G]: each group's score, the sum of its two best choice scores (``top2_sum``) or its best (``max``)."""
    T, E = choice.shape
    grouped = choice.reshape(T, router.groups, E // router.groups)
    if router.group_rule == "max":
        return grouped.max(axis=-1)
    return -np.sort(-grouped, axis=-1)[..., :2].sum(axis=-1)


def _group_order(router: GroupedRouter, choice: np.ndarray) -> np.ndarray:
    """[T, G]: each token's groups, best first (ties to the lower index)."""
    return np.argsort(-_group_scores(router, choice), axis=-1, kind="stable")


def _open(router: GroupedRouter, choice: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """The choice scores [T, E] of the experts of the ``kept`` groups [T, topk_group], -inf elsewhere."""
    open_ = np.zeros((choice.shape[0], router.groups), bool)
    np.put_along_axis(open_, kept, True, axis=-1)
    return np.where(np.repeat(open_, router.experts // router.groups, axis=-1), choice, -np.inf)


def grouped_margins(router: GroupedRouter, choice: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per token of choice scores [T, E] (``choice64``): (the margin between its topk_group-th and next group's
    scores, between its k-th and (k + 1)-th open experts' choice scores), inf where there is no next one.
    """  # noqa: D205
    T = choice.shape[0]
    ranked = -np.sort(-_group_scores(router, choice), axis=-1)
    group = (ranked[:, router.topk_group - 1] - ranked[:, router.topk_group] if router.topk_group < router.groups
             else np.full(T, np.inf))  # fmt: skip
    masked = -np.sort(-_open(router, choice, _group_order(router, choice)[:, : router.topk_group]), axis=-1)
    expert = masked[:, router.top_k - 1] - masked[:, router.top_k]  # -inf past the open experts: no next one
    return group, np.where(np.isfinite(expert), expert, np.inf)


def grouped_near_ties(router: GroupedRouter, logits: np.ndarray, bias: np.ndarray | None,
                      bound: float) -> list[tuple[int, float]]:  # fmt: skip
    """(token, margin) of each token whose nearest routing tie (``grouped_margins``) is within ``bound`` x its largest
    |choice score|: a runtime off by that much may route it either way (``near_ties``' rule for this router).
    """  # noqa: D205
    choice = choice64(router, logits, bias)
    margin = np.minimum(*grouped_margins(router, choice))
    scale = np.abs(choice).max(axis=-1)
    return [(int(t), float(margin[t])) for t in np.nonzero(margin <= bound * scale)[0]]


def grouped_routing(g: GraphBuilder, router: GroupedRouter, logits: str, bias: str | None) -> str:
    """Router logits [b, s, E] (float32) and the correction bias [E] (float32; None without correction) -> each
    expert's weight [b, s, E] (float32, 0 for an expert not chosen): ``grouped_route64`` in ONNX ops (TopK,
    ScatterElements, GatherElements).
    """  # noqa: D205
    E, G = router.experts, router.groups
    i64 = lambda name, *v: g.shared_const(f"router_{name}", np.array(v, np.int64))  # noqa: E731
    f32 = lambda name, v: g.shared_const(f"router_{name}", np.array(v, np.float32))  # noqa: E731
    scores = g.op("Sigmoid", [logits]) if router.score == "sigmoid" else g.op("Softmax", [logits], axis=-1)
    if router.correction:
        if bias is None:
            raise SpecError("router_correction", "is missing: this router adds e_score_correction_bias to its scores")
        choice = g.op("Add", [scores, bias])
    else:
        choice = scores
    grouped = g.op("Reshape", [choice, i64("grouped", 0, 0, G, E // G)])
    # a group's best (``max``) as its top 1 summed: TopK and ReduceSum read the same inputs in every opset a form
    # uses, where ReduceMax took its axes as an attribute before opset 18
    best = i64("one", 1) if router.group_rule == "max" else i64("two", 2)
    best_two = g.op("TopK", [grouped, best], n_out=2, axis=-1)[0]
    group_scores = g.op("ReduceSum", [best_two, i64("last", -1)], keepdims=0)  # [b, s, G]
    kept = g.op("TopK", [group_scores, i64("topk_group", router.topk_group)], n_out=2, axis=-1)[1]
    filled = lambda like, value: g.op("ConstantOfShape", [g.op("Shape", [like])],  # noqa: E731
                                      value=helper.make_tensor("value", TensorProto.FLOAT, [1], [value]))  # fmt: skip
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
    ``router_correction`` [E] (a router with correction only), ``experts_gate_proj`` / ``experts_up_proj`` [E, n, m],
    ``experts_down_proj`` [E, m, n], ``shared_gate_proj`` / ``shared_up_proj`` [n, m_s], ``shared_down_proj`` [m_s, n].
    ``flips`` and ``ties``: as ``moe64``'s, by this router's near ties (``grouped_near_ties``).
    """  # noqa: D205
    return mixed(shared_mixing(router, x, w, flips, ties), w)


def shared_mixing(router: GroupedRouter, x: np.ndarray, w: Mapping[str, np.ndarray], flips: Collection[int] = (),
                  ties: tuple[float, list[tuple[int, float]]] | None = None) -> Mixing:  # fmt: skip
    """``shared_moe64`` routed, the shared experts' output summed, the routed ones not yet applied (``mixing``)."""
    silu_mlp = lambda y, gate, up, down: (y @ gate) / (1.0 + np.exp(-(y @ gate))) * (y @ up) @ down  # noqa: E731
    tokens = x.reshape(-1, x.shape[-1])
    logits = tokens @ w["router_proj"]
    bias = w["router_correction"] if router.correction else None
    if ties is not None:
        ties[1].extend(grouped_near_ties(router, logits, bias, ties[0]))
    chosen, weights = grouped_route64(router, logits, bias, flips)
    out = silu_mlp(tokens, w["shared_gate_proj"], w["shared_up_proj"], w["shared_down_proj"])
    expert = lambda y, one: silu_mlp(y, *(one[f"experts_{p}_proj"] for p in ("gate", "up", "down")))  # noqa: E731
    return Mixing(tokens, chosen, weights, out, expert, EXPERTS, lambda out: out.reshape(x.shape))


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
    spread = grouped_routing(g, router, logits, w.get("router_correction"))
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
