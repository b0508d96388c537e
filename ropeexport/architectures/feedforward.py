"""A decoder layer's feed-forward: ``FeedForward``, a gated or plain MLP or a mixture of experts with its router, as
``LayerSpec.ffn`` holds it (``architectures.layers``). Torch- and onnx-free, validated on construction.
"""  # noqa: D205

from __future__ import annotations

from dataclasses import dataclass

from ropeexport.errors import SpecError
from ropeexport.specs import require_choice, require_flag, require_int, require_number

FEEDFORWARDS = ("gated", "plain", "moe")
FORMULAS = ("silu", "relu", "gelu", "gelu_tanh")  # the activations' formulas (gelu: erf; gelu_tanh: its tanh form)
# A mixture's router, by what it computes: ``topk_softmax`` the k largest router logits, weighed by the softmax of those
# k (gpt-oss; the same as a softmax over all E renormalized over the k chosen: Qwen3-MoE's norm_topk_prob);
# ``softmax_topk`` the k largest of the softmax over all E, weighed by those probabilities as they are (Qwen3-MoE
# without norm_topk_prob: the k weights sum to less than 1); ``grouped`` DeepSeek V3's sigmoid scores with a correction
# bias, the k best among the ``topk_group`` best of ``n_group`` groups (``components.grouped_moe.GroupedRouter``), its
# experts gated SiLU MLPs beside ``n_shared_experts`` shared ones; ``grouped_softmax`` Mistral 4's (and Mistral Large
# 4's) and ``grouped_softmax_max`` DeepSeek V2's: the same grouping over the softmax of all E, no correction bias, a
# group scored by its two best / its best (``components.grouped_moe.KINDS``); ``topk_sigmoid`` Llama 4's: each of the k
# chosen experts fed the token times the sigmoid of its logit (gated experts without biases), beside at most one shared
# gated expert as wide as an expert (``n_shared_experts`` 0 or 1); ``gemma4`` Gemma 4's (``gemma4_moe``): topk_softmax
# of its own norm of the residual, times a per-expert scale, beside the dense MLP (n_shared_experts x m).
ROUTERS = ("topk_softmax", "softmax_topk", "grouped", "topk_sigmoid", "gemma4", "grouped_softmax",
           "grouped_softmax_max")  # fmt: skip
# DeepSeek's grouped router's kinds (``components.grouped_moe.KINDS``, keyed alike): gated experts, shared experts
GROUPED_ROUTERS = ("grouped", "grouped_softmax", "grouped_softmax_max")
# A mixture's experts, by what each computes: ``clamped_swiglu`` gpt-oss's (biases, a gain and a clamp); ``gated``
# the gated MLP down(act(gate x) * up x) of the layer's activation (Qwen3-MoE, DeepSeek V3), biases only with
# ``mlp_bias``.
EXPERTS = ("clamped_swiglu", "gated")
GROUPED = ("n_group", "topk_group", "norm_topk_prob", "routed_scaling_factor", "n_shared_experts")  # wire names


@dataclass(frozen=True)
class FeedForward:
    """One layer's feed-forward: ``gated`` (down(act(gate x) * up x)), ``plain`` (down(act(up x))) or ``moe``.

    ``inner``: the inner width (each expert's in a mixture). A mixture (``components.moe``): ``experts`` experts,
    ``top_k`` chosen per token by its ``router`` (``ROUTERS``), each expert an ``expert`` (``EXPERTS``): gpt-oss's
    clamped SwiGLU of gain ``swiglu_alpha`` and clamp ``swiglu_limit``, or a gated MLP of ``act`` (no gain or clamp).
    ``expert`` is read in a mixture only. ``grouped`` and its kinds (``GROUPED_ROUTERS``; gated experts): ``groups``
    groups (n_group), the ``topk_group`` best kept, the weights over their sum when ``norm_topk_prob``, times
    ``scaling`` (routed_scaling_factor); ``shared`` shared experts (n_shared_experts, one gated MLP ``shared`` * inner
    wide) on every token.
    """

    kind: str
    act: str
    inner: int
    bias: bool = False
    experts: int = 0
    top_k: int = 0
    router: str = ""
    swiglu_alpha: float = 0.0
    swiglu_limit: float = 0.0
    expert: str = "clamped_swiglu"
    groups: int = 0
    topk_group: int = 0
    norm_topk_prob: bool = False
    scaling: float = 0.0
    shared: int = 0

    def __post_init__(self) -> None:
        require_choice("mlp", self.kind, FEEDFORWARDS)
        require_choice("act", self.act, FORMULAS)
        object.__setattr__(self, "inner", require_int("intermediate_size", self.inner, 1, 2**20))
        require_flag("mlp_bias", self.bias)
        names = ("num_experts", "experts_per_token", "router", "swiglu_alpha", "swiglu_limit", *GROUPED)
        values = (self.experts, self.top_k, self.router, self.swiglu_alpha, self.swiglu_limit, self.groups,
                  self.topk_group, self.norm_topk_prob, self.scaling, self.shared)  # fmt: skip
        if self.kind != "moe":
            named = next((n for n, v in zip(names, values, strict=True) if v), None)
            if named is not None:
                raise SpecError(named, f"must be 0 (or empty): a {self.kind} MLP is not a mixture of experts")
            return
        experts = require_int("num_experts", self.experts, 1, 2**12)
        object.__setattr__(self, "experts", experts)
        object.__setattr__(self, "top_k", require_int("experts_per_token", self.top_k, 1, experts))
        require_choice("router", self.router, ROUTERS)
        if self.router in GROUPED_ROUTERS:
            self._check_grouped()
            return
        if self.router in ("topk_sigmoid", "gemma4"):
            self._check_sigmoid()
            return
        named = next((n for n, v in zip(GROUPED, values[5:], strict=True) if v), None)
        if named is not None:
            raise SpecError(named, f"must be 0 (or false): a {self.router} router has no groups or shared experts")
        require_choice("expert", self.expert, EXPERTS)
        if self.expert == "gated":  # no gain or clamp: a value would be silently unused
            named = next((n for n in ("swiglu_alpha", "swiglu_limit") if getattr(self, n)), None)
            if named is not None:
                raise SpecError(named, "must be 0: a gated expert has no gain or clamp (clamped_swiglu's)")
            return
        for name in ("swiglu_alpha", "swiglu_limit"):
            value = require_number(name, getattr(self, name), "a mixture's clamped SwiGLU", positive=True)
            object.__setattr__(self, name, value)

    @property
    def moe_bias(self) -> bool:
        """Whether a mixture's router and experts have biases: gpt-oss's clamped experts do, gated ones with bias."""
        return self.expert == "clamped_swiglu" or self.bias

    def _check_sigmoid(self) -> None:
        """Llama 4's router (``components.moe``'s ``topk_sigmoid``): gated experts without biases (an unchosen
        expert is fed 0 and must give 0), no groups, at most one shared expert (``Llama4TextMoe.shared_expert``); Gemma
        4's (``gemma4``) the same, its dense MLP at least one expert's width (``components.gemma4_moe``).
        """  # noqa: D205
        object.__setattr__(self, "expert", "gated")
        if self.bias:
            raise SpecError("mlp_bias", f"must be false: a {self.router} router's experts have no biases (an "
                            "unchosen one must give 0)")  # fmt: skip
        for name, value in (("swiglu_alpha", self.swiglu_alpha), ("swiglu_limit", self.swiglu_limit),
                            ("n_group", self.groups), ("topk_group", self.topk_group),
                            ("norm_topk_prob", self.norm_topk_prob), ("routed_scaling_factor", self.scaling)):
            if value:
                raise SpecError(name, f"must be 0 (or false): a {self.router} router has none, got {value!r}")
        gemma = self.router == "gemma4"  # its dense MLP (n_shared_experts x inner wide) beside the experts, always
        shared = require_int("n_shared_experts", self.shared, int(gemma), 2**10 if gemma else 1)
        object.__setattr__(self, "shared", shared)

    def _check_grouped(self) -> None:
        """DeepSeek's grouped routers (``components.grouped_moe.GroupedRouter``'s checks, under the config's keys).

        Its experts are gated SiLU MLPs: ``expert`` is set so.
        """
        object.__setattr__(self, "expert", "gated")
        for name in ("swiglu_alpha", "swiglu_limit"):
            if getattr(self, name):
                raise SpecError(name, f"must be 0: a grouped router's experts are plain gated SiLU MLPs (no clamped "
                                f"SwiGLU), got {getattr(self, name)!r}")  # fmt: skip
        experts = self.experts
        groups = require_int("n_group", self.groups, 1, experts)
        if experts % groups:
            raise SpecError("n_group", f"must divide n_routed_experts ({experts}), got {groups}")
        if experts // groups < 2 and self.router != "grouped_softmax_max":  # DeepSeek V2's scores a group by its max
            raise SpecError("n_group", f"leaves {experts // groups} expert per group; a group is scored by its two "
                            "best experts (at most n_routed_experts / 2 groups)")  # fmt: skip
        kept = require_int("topk_group", self.topk_group, 1, groups)
        if self.top_k > kept * (experts // groups):
            raise SpecError("experts_per_token", f"{self.top_k} exceeds the experts of the topk_group ({kept}) groups "
                            f"kept ({kept * (experts // groups)})")  # fmt: skip
        object.__setattr__(self, "groups", groups)
        object.__setattr__(self, "topk_group", kept)
        require_flag("norm_topk_prob", self.norm_topk_prob)
        object.__setattr__(self, "scaling", require_number("routed_scaling_factor", self.scaling, "the routed weights' "
                                                    "factor", positive=True))  # fmt: skip
        object.__setattr__(self, "shared", require_int("n_shared_experts", self.shared, 0, 2**10))
