"""The ``moe`` component (gpt-oss's mixture of experts): each graph against its float64 twin, the twin against
transformers' ``GptOssMLP`` in float64, the routing's near ties, and the spec's refusals.
"""

from __future__ import annotations

import numpy as np
import pytest

from ropeexport.components.mixing import part
from ropeexport.components.mlp import MLPSpec, mlp64
from ropeexport.components.moe import NAMES, MoESpec, expert64, moe, moe64, near_ties, route64, to_graph
from ropeexport.errors import SpecError
from ropeexport.graph.onnx_io import GraphBuilder
from ropeexport.numerics import round_once
from tests.components.test_components import TOL, _run, _stored

pytestmark = pytest.mark.fast  # mixture of experts against its float64 twin

E, K, N, M, T = 6, 2, 16, 12, 10  # experts, chosen, hidden, inner width, tokens


def _weights(dtype: str, seed: int = 1) -> dict[str, np.ndarray]:
    """Canonical weights (stored values, float64) whose gates and ups reach past the clamp of 7 on some tokens."""
    rng = np.random.default_rng(seed)
    shapes = {"router_proj": (N, E), "router_bias": (E,), "experts_gate_proj": (E, N, M), "experts_up_proj": (E, N, M),
              "experts_down_proj": (E, M, N), "experts_gate_bias": (E, M), "experts_up_bias": (E, M),
              "experts_down_bias": (E, N)}  # fmt: skip
    scale = {"router_proj": 0.5, "experts_gate_proj": 1.5, "experts_up_proj": 1.5, "experts_down_proj": 0.3}
    return {k: _stored(scale.get(k, 0.1) * rng.standard_normal(s), dtype) for k, s in shapes.items()}


def _x(dtype: str) -> np.ndarray:
    return _stored(np.random.default_rng(2).standard_normal((2, T // 2, N)), dtype)


# (kernel, dtype, opset): the portable graph in the fused / tensorrt (23) and decomposed (17) opsets, ONNX Runtime's
# MoE kernel (the gqa form)
CASES = [("portable", "fp32", 23), ("portable", "fp16", 17), ("portable", "fp32", 17), ("contrib", "fp32", 23),
         ("contrib", "fp16", 23)]  # fmt: skip


@pytest.mark.parametrize(("kernel", "dtype", "opset"), CASES)
def test_moe_graph_matches_its_twin(kernel: str, dtype: str, opset: int) -> None:
    spec = MoESpec(E, K, M, 1.702, 7.0, dtype, kernel)
    w, x = _weights(dtype), _x(dtype)
    logits = x.reshape(-1, N) @ w["router_proj"] + w["router_bias"]
    assert not near_ties(spec, logits, TOL[dtype] * 20)  # no token the dtype's rounding could route otherwise
    gates = np.einsum("tn,enm->etm", x.reshape(-1, N), w["experts_gate_proj"])
    assert (gates > 7.0).any() and (np.abs(gates) < 7.0).any()  # the clamp is reached, and not everywhere
    g = GraphBuilder()
    names = {n: g.const(n, round_once(v, dtype)) for n, v in to_graph(spec, w).items()}
    got = _run(g, moe(g, spec, "x", names), {"x": round_once(x, dtype)}, dtype, opset,
               {"com.microsoft": 1} if kernel == "contrib" else None)  # fmt: skip
    want = moe64(spec, x, w)
    scale = float(np.abs(want).max())
    assert float(np.abs(got - want).max()) <= TOL[dtype] * scale
    # each part of the definition is seen: the sigmoid's gain, the clamp, the count of experts, the gate | up order
    planted = [MoESpec(E, K, M, 1.0, 7.0), MoESpec(E, K, M, 1.702, 3.0), MoESpec(E, K + 1, M, 1.702, 7.0)]
    swapped = dict(w, experts_gate_proj=w["experts_up_proj"], experts_up_proj=w["experts_gate_proj"])
    for other, weights in [(p, w) for p in planted] + [(spec, swapped)]:
        assert float(np.abs(got - moe64(other, x, weights)).max()) > 10 * TOL[dtype] * scale, other


def test_moe_twin_is_transformers_gpt_oss_mlp() -> None:
    # transformers' GptOssMLP in float64 on the same weights, its checkpoint layout (gate, up interleaved) built by
    # hand here: the twin's definition (top-k, softmax of the k, clamped SwiGLU, up + 1) is transformers' own.
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP

    config = transformers.AutoConfig.for_model("gpt_oss", hidden_size=N, intermediate_size=M, num_local_experts=E,
                                               num_experts_per_tok=K)  # fmt: skip
    module = GptOssMLP(config).double()
    w, x = _weights("fp32"), _x("fp32")
    interleave = lambda a, b: np.stack([a, b], axis=-1).reshape(*a.shape[:-1], 2 * a.shape[-1])  # noqa: E731
    state = {"router.weight": w["router_proj"].T, "router.bias": w["router_bias"],
             "experts.gate_up_proj": interleave(w["experts_gate_proj"], w["experts_up_proj"]),
             "experts.gate_up_proj_bias": interleave(w["experts_gate_bias"], w["experts_up_bias"]),
             "experts.down_proj": w["experts_down_proj"], "experts.down_proj_bias": w["experts_down_bias"]}  # fmt: skip
    module.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()})
    with torch.no_grad():
        theirs = module(torch.from_numpy(x))[0].numpy()
    ours = moe64(MoESpec(E, K, M, config.swiglu_alpha, config.swiglu_limit), x, w)
    assert float(np.abs(theirs - ours).max()) <= 1e-12 * float(np.abs(ours).max())


def test_a_flipped_token_takes_its_next_expert() -> None:
    spec = MoESpec(4, 2, M, 1.702, 7.0)
    logits = np.array([[3.0, 1.0, 0.999, -2.0], [0.0, 5.0, 1.0, 4.0]])
    chosen, weights = route64(spec, logits)
    assert chosen.tolist() == [[0, 1], [1, 3]]
    assert np.allclose(weights.sum(axis=-1), 1.0) and weights[1, 0] == pytest.approx(1 / (1 + np.exp(-1.0)))
    flipped, _ = route64(spec, logits, flips=[0])
    assert flipped.tolist() == [[0, 2], [1, 3]]
    # token 0's 2nd and 3rd are 0.001 apart (1/3000 of its scale 3): a near tie at 1e-3, not at 1e-4
    assert near_ties(spec, logits, 1e-3) == [(0, pytest.approx(0.001))]
    assert near_ties(spec, logits, 1e-4) == []
    assert near_ties(MoESpec(4, 4, M, 1.702, 7.0), logits, 1.0) == []  # every expert chosen: no tie to break


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"top_k": 7}, "experts_per_token: must be"),
        ({"experts": 0}, "num_experts: must be"),
        ({"limit": 0.0}, "swiglu_limit: must be a finite number > 0"),
        ({"alpha": float("inf")}, "swiglu_alpha: must be a finite number > 0"),
        ({"kernel": "sparse"}, "kernel: must be one of portable, contrib"),
    ],
)
def test_moe_spec_refuses_by_field(fields: dict[str, object], words: str) -> None:
    with pytest.raises(SpecError, match=words):
        MoESpec(**({"experts": E, "top_k": K, "inner": M, "alpha": 1.702, "limit": 7.0} | fields))  # type: ignore[arg-type]


# Qwen3-MoE's mixture: gated-SiLU experts without biases, routed by the softmax over all E, its k largest either
# renormalized (topk_softmax, norm_topk_prob) or as they are (softmax_topk). (router, kernel, dtype, opset)
QWEN3_CASES = [("softmax_topk", "portable", "fp32", 23), ("softmax_topk", "portable", "fp16", 17),
               ("softmax_topk", "contrib", "fp32", 23), ("softmax_topk", "contrib", "fp16", 23),
               ("topk_softmax", "portable", "fp32", 17), ("topk_softmax", "contrib", "fp32", 23)]  # fmt: skip


def _qwen3(router: str, dtype: str = "fp32", kernel: str = "portable", top_k: int = K) -> MoESpec:
    return MoESpec(E, top_k, M, 0.0, 0.0, dtype, kernel, router=router, expert="gated", act="silu", bias=False)


def _unbiased(dtype: str) -> dict[str, np.ndarray]:
    return {k: v for k, v in _weights(dtype).items() if "bias" not in k}


@pytest.mark.parametrize(("router", "kernel", "dtype", "opset"), QWEN3_CASES)
def test_gated_moe_graph_matches_its_twin(router: str, kernel: str, dtype: str, opset: int) -> None:
    spec = _qwen3(router, dtype, kernel)
    w, x = _unbiased(dtype), _x(dtype)
    assert not near_ties(spec, x.reshape(-1, N) @ w["router_proj"], TOL[dtype] * 20)
    g = GraphBuilder()
    stored = to_graph(spec, w)
    assert not any("bias" in name for name in stored)  # no bias stored where the model has none
    names = {n: g.const(n, round_once(v, dtype)) for n, v in stored.items()}
    got = _run(g, moe(g, spec, "x", names), {"x": round_once(x, dtype)}, dtype, opset,
               {"com.microsoft": 1} if kernel == "contrib" else None)  # fmt: skip
    want = moe64(spec, x, w)
    scale = float(np.abs(want).max())
    assert float(np.abs(got - want).max()) <= TOL[dtype] * scale
    # the other router's weights differ by a factor per token (the k chosen ones' share of the softmax): seen
    other = _qwen3("topk_softmax" if router == "softmax_topk" else "softmax_topk")
    assert float(np.abs(got - moe64(other, x, w)).max()) > 10 * TOL[dtype] * scale


@pytest.mark.parametrize("norm_topk_prob", [False, True])
def test_gated_moe_twin_is_transformers_qwen3_moe_block(norm_topk_prob: bool) -> None:
    # transformers' Qwen3MoeSparseMoeBlock in float64 on the same weights (its checkpoint layout: gate | up rows of
    # each expert in one gate_up_proj [E, 2m, n]): the router and expert definitions are transformers' own.
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    config = transformers.AutoConfig.for_model("qwen3_moe", hidden_size=N, moe_intermediate_size=M, num_experts=E,
                                               num_experts_per_tok=K, norm_topk_prob=norm_topk_prob)  # fmt: skip
    module = Qwen3MoeSparseMoeBlock(config).double()
    w, x = _unbiased("fp32"), _x("fp32")
    gate_up = np.concatenate([w["experts_gate_proj"], w["experts_up_proj"]], axis=-1).transpose(0, 2, 1)
    state = {"gate.weight": w["router_proj"].T, "experts.gate_up_proj": gate_up,
             "experts.down_proj": w["experts_down_proj"].transpose(0, 2, 1)}  # fmt: skip
    module.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()})
    with torch.no_grad():
        theirs = module(torch.from_numpy(x)).numpy()
    ours = moe64(_qwen3("topk_softmax" if norm_topk_prob else "softmax_topk"), x, w)
    # transformers takes the router's softmax in float32 (Qwen3MoeTopKRouter): within float32's rounding of it
    assert float(np.abs(theirs - ours).max()) <= 1e-6 * float(np.abs(ours).max())
    other = moe64(_qwen3("softmax_topk" if norm_topk_prob else "topk_softmax"), x, w)
    assert float(np.abs(theirs - other).max()) > 1e-3 * float(np.abs(ours).max())  # the two routers differ here


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"top_k": E + 1}, "experts_per_token: must be"),
        ({"alpha": 1.702}, "swiglu_alpha: must be 0: a gated expert has no gain or clamp"),
        ({"router": "sigmoid"}, "router: must be one of topk_softmax, softmax_topk"),
        ({"act": "tanh"}, "act: must be one of"),
    ],
)
def test_gated_moe_spec_refuses_by_field(fields: dict[str, object], words: str) -> None:
    base = {"experts": E, "top_k": K, "inner": M, "alpha": 0.0, "limit": 0.0, "expert": "gated",
            "router": "softmax_topk"}  # fmt: skip
    with pytest.raises(SpecError, match=words):
        MoESpec(**(base | fields))  # type: ignore[arg-type]


def test_ort_fp16_moe_without_renormalizing_is_still_zeros() -> None:
    # Why softmax_topk in fp16 takes the portable graph even in the gqa form (MoESpec.contrib): ONNX Runtime 1.31's
    # CPU MoE kernel in fp16 with normalize_routing_weights 0 returns zeros. When this fails, ORT computes it: let
    # the contrib kernel take it again.
    spec = _qwen3("softmax_topk", "fp16", "contrib")
    assert not spec.contrib
    w, x = _unbiased("fp16"), _x("fp16")
    g = GraphBuilder()
    forced = MoESpec(E, K, M, 0.0, 0.0, "fp32", "contrib", router="softmax_topk", expert="gated", bias=False)
    names = {n: g.const(n, round_once(v, "fp16")) for n, v in to_graph(forced, w).items()}  # MoE's layout
    out = g.op("MoE", [g.op("Flatten", ["x"], axis=2), g.op("Flatten", [g.op("MatMul", ["x", names["router_proj"]])],
                                                            axis=2),
                       names["experts_gate_up_proj"], "", names["experts_down_proj"], ""],
               domain="com.microsoft", k=K, activation_type="swiglu", swiglu_fusion=1, activation_alpha=1.0,
               activation_beta=0.0, normalize_routing_weights=0)  # fmt: skip
    got = _run(g, out, {"x": round_once(x, "fp16")}, "fp16", 23, {"com.microsoft": 1})
    assert float(np.abs(got).max()) == 0.0
    assert float(np.abs(moe64(spec, x, w)).max()) > 1.0


# Llama 4's mixture: the k largest router logits (1 in Llama 4), each chosen expert fed the token times the sigmoid
# of its logit (the input scaled, not the output), beside a shared gated expert every token takes. (kernel, dtype,
# opset): the contrib kernel has no such router, so the gqa form computes it portably too.
LLAMA4_CASES = [("portable", "fp32", 23), ("portable", "fp16", 17), ("contrib", "fp32", 23)]
S = 20  # the shared expert's inner width


def _llama4(dtype: str = "fp32", kernel: str = "portable", top_k: int = 1, shared: int = S) -> MoESpec:
    return MoESpec(E, top_k, M, 0.0, 0.0, dtype, kernel, router="topk_sigmoid", expert="gated", act="silu",
                   bias=False, shared=shared)  # fmt: skip


def _with_shared(dtype: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    shared = {"shared_gate_proj": (N, S), "shared_up_proj": (N, S), "shared_down_proj": (S, N)}
    return _unbiased(dtype) | {k: _stored(0.5 * rng.standard_normal(s), dtype) for k, s in shared.items()}


@pytest.mark.parametrize(("kernel", "dtype", "opset"), LLAMA4_CASES)
def test_sigmoid_routed_moe_graph_matches_its_twin(kernel: str, dtype: str, opset: int) -> None:
    spec = _llama4(dtype, kernel)
    assert not spec.contrib  # ONNX Runtime's MoE weighs outputs; Llama 4 scales inputs
    w, x = _with_shared(dtype), _x(dtype)
    assert not near_ties(spec, x.reshape(-1, N) @ w["router_proj"], TOL[dtype] * 20)
    g = GraphBuilder()
    names = {n: g.const(n, round_once(v, dtype)) for n, v in to_graph(spec, w).items()}
    got = _run(g, moe(g, spec, "x", names), {"x": round_once(x, dtype)}, dtype, opset)
    want = moe64(spec, x, w)
    scale = float(np.abs(want).max())
    assert float(np.abs(got - want).max()) <= TOL[dtype] * scale
    # seen: the shared expert, and the sigmoid applied to the input rather than to the output
    without = moe64(_llama4(shared=0), x, {k: v for k, v in w.items() if not k.startswith("shared_")})
    assert float(np.abs(got - without).max()) > 10 * TOL[dtype] * scale
    tokens = x.reshape(-1, N)
    chosen, weights = route64(spec, tokens @ w["router_proj"])
    assert np.allclose(weights, 1 / (1 + np.exp(-np.take_along_axis(tokens @ w["router_proj"], chosen, axis=-1))))
    shared = mlp64(MLPSpec("gated", "silu", S), tokens, {"gate_proj": w["shared_gate_proj"],
                                                          "up_proj": w["shared_up_proj"],
                                                          "down_proj": w["shared_down_proj"]})  # fmt: skip
    outputs_weighed = shared + np.concatenate([weights[t, 0] * expert64(spec, tokens[t : t + 1],
                                                                        part(w, NAMES, int(chosen[t, 0])))
                                               for t in range(T)])  # fmt: skip
    assert float(np.abs(got - outputs_weighed.reshape(want.shape)).max()) > 10 * TOL[dtype] * scale


@pytest.mark.parametrize("top_k", [1, 2])
def test_sigmoid_routed_moe_twin_is_transformers_llama4_text_moe(top_k: int) -> None:
    # transformers' Llama4TextMoe in float64 on the same weights (its experts' gate_up_proj [E, n, 2m], gate | up
    # columns; down_proj [E, m, n]; the shared expert a Llama4TextMLP): router, input scaling and shared expert are
    # transformers' own.
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama4.modeling_llama4 import Llama4TextMoe

    config = transformers.AutoConfig.for_model("llama4_text", hidden_size=N, intermediate_size=M,
                                               num_local_experts=E, num_experts_per_tok=top_k)  # fmt: skip
    module = Llama4TextMoe(config).double()
    module.shared_expert = type(module.shared_expert)(config, intermediate_size=S).double()
    w, x = _with_shared("fp32"), _x("fp32")
    state = {"router.weight": w["router_proj"].T,
             "experts.gate_up_proj": np.concatenate([w["experts_gate_proj"], w["experts_up_proj"]], axis=-1),
             "experts.down_proj": w["experts_down_proj"], "shared_expert.gate_proj.weight": w["shared_gate_proj"].T,
             "shared_expert.up_proj.weight": w["shared_up_proj"].T,
             "shared_expert.down_proj.weight": w["shared_down_proj"].T}  # fmt: skip
    module.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()})
    with torch.no_grad():
        theirs = module(torch.from_numpy(x))[0].numpy().reshape(x.shape)
    ours = moe64(_llama4(top_k=top_k), x, w)
    # transformers takes the sigmoid in float32 (Llama4Router): within float32's rounding of it
    assert float(np.abs(theirs - ours).max()) <= 1e-6 * float(np.abs(ours).max())
