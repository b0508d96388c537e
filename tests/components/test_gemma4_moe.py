"""Gemma 4's mixture beside its MLP (``components.gemma4_moe``): the graph against its float64 twin, the twin against
transformers' own modules (``Gemma4TextRouter``, ``Gemma4TextExperts``, ``Gemma4TextMLP`` and the layer's norms) in
float64, and the spec's refusals.
"""

from __future__ import annotations

import numpy as np
import pytest

from ropeexport.architectures.base import NORMS
from ropeexport.components.gemma4_moe import Gemma4MoESpec, branch, branch64, route
from ropeexport.components.mlp import activation64, joined
from ropeexport.components.moe import near_ties
from ropeexport.components.norm import NormSpec
from ropeexport.errors import SpecError
from ropeexport.graph.onnx_io import GraphBuilder
from ropeexport.numerics import round_once
from tests.components.test_components import TOL, _run, _stored

pytestmark = pytest.mark.fast  # a component against its float64 twin and transformers' modules

E, K, N, M, D, T = 4, 2, 16, 8, 24, 10  # experts, chosen, hidden, an expert's width, the MLP's, tokens
EPS = 1e-6


def _spec(dtype: str = "fp32", top_k: int = K) -> Gemma4MoESpec:
    kind, offset, wide = NORMS["rms_wide"]  # Gemma4RMSNorm: normed * weight in float32, then cast
    return Gemma4MoESpec(E, top_k, M, D, N, "gelu_tanh", NormSpec(kind, EPS, dtype, offset=offset, wide=wide), dtype)


def _weights(dtype: str, seed: int = 2) -> dict[str, np.ndarray]:
    """Canonical weights (stored values, float64); the per-expert scales far from 1, so that dropping them shows."""
    rng = np.random.default_rng(seed)
    shapes = {"gate_proj": (N, D), "up_proj": (N, D), "down_proj": (D, N), "router_proj": (N, E),
              "experts_gate_proj": (E, N, M), "experts_up_proj": (E, N, M), "experts_down_proj": (E, M, N)}  # fmt: skip
    out = {k: _stored(rng.standard_normal(s) / np.sqrt(s[-2]), dtype) for k, s in shapes.items()}
    out["router_proj"] = _stored(4.0 * rng.standard_normal((N, E)), dtype)  # logits of order 1 after the root
    out["router_scale"] = _stored(1.0 + 0.3 * rng.standard_normal(N), dtype)
    out["router_expert_scale"] = _stored(np.array([0.5, 2.0, 1.5, 0.25]), dtype)
    for name in ("post_mlp_norm", "pre_experts_norm", "post_experts_norm"):
        out[f"{name}.weight"] = _stored(1.0 + 0.2 * rng.standard_normal(N), dtype)
    return out


def _hy(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    return _stored(rng.standard_normal((2, T // 2, N)), dtype), _stored(rng.standard_normal((2, T // 2, N)), dtype)


# (dtype, opset): the fused / gqa / tensorrt forms' opset and the decomposed form's
CASES = [("fp32", 23), ("fp16", 17)]


@pytest.mark.parametrize(("dtype", "opset"), CASES)
def test_gemma4_moe_graph_matches_its_twin(dtype: str, opset: int) -> None:
    spec, w, (h, y) = _spec(dtype), _weights(dtype), _hy(dtype)
    assert not near_ties(spec.mixture, route(spec, h, w), TOL[dtype] * 20)  # one routing for graph and twin
    g = GraphBuilder()
    stored = {n: v for n, v in w.items() if n not in ("experts_gate_proj", "experts_up_proj")}
    stored["experts_gate_up_proj"] = np.concatenate([w["experts_gate_proj"], w["experts_up_proj"]], axis=-1)
    names = {n: g.const(n, round_once(v, dtype)) for n, v in joined(stored).items()}
    got = _run(g, branch(g, spec, "h", "x", names, opset), {"h": round_once(h, dtype), "x": round_once(y, dtype)},
               dtype, opset)  # fmt: skip
    want = branch64(spec, h, y, w)
    scale = float(np.abs(want).max())
    assert float(np.abs(got - want).max()) <= TOL[dtype] * scale
    # seen: the per-expert scale, and the mixture reading the residual stream h (not the MLP's normed input y)
    unscaled = branch64(spec, h, y, w | {"router_expert_scale": np.ones(E)})
    assert float(np.abs(got - unscaled).max()) > 10 * TOL[dtype] * scale
    assert float(np.abs(got - branch64(spec, y, y, w)).max()) > 10 * TOL[dtype] * scale


def test_a_flipped_token_takes_its_next_expert_and_near_ties_are_reported() -> None:
    # the twin's routing as the other mixtures' (``moe.route64``, ``moe.near_ties``): what a verification reads
    spec, w, (h, y) = _spec(), _weights("fp32"), _hy("fp32")
    found: list[tuple[int, float]] = []
    base = branch64(spec, h, y, w, ties=(10.0, found))  # bound 10: every token's margin is within it
    assert sorted(t for t, _ in found) == list(range(T))
    flipped = branch64(spec, h, y, w, flips=[3]).reshape(T, N)
    moved = np.abs(flipped - base.reshape(T, N)).max(axis=-1)
    assert moved[3] > 1e-3 and np.delete(moved, 3).max() <= 1e-12  # the others as they were (summation order aside)


@pytest.mark.parametrize("top_k", [1, 2])
def test_gemma4_moe_twin_is_transformers_modules(top_k: int) -> None:
    # transformers' Gemma4TextRouter, Gemma4TextExperts (gate_up_proj [E, 2m, n]: gate rows, then up; down_proj
    # [E, n, m]) and Gemma4TextMLP with the layer's three norms, in float64, composed as
    # Gemma4TextDecoderLayer.forward composes them
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.gemma4 import modeling_gemma4 as gemma4

    config = transformers.AutoConfig.for_model("gemma4_text", hidden_size=N, intermediate_size=D, num_experts=E,
                                               top_k_experts=top_k, moe_intermediate_size=M, enable_moe_block=True,
                                               rms_norm_eps=EPS, hidden_size_per_layer_input=0)  # fmt: skip
    router, experts = gemma4.Gemma4TextRouter(config).double(), gemma4.Gemma4TextExperts(config).double()
    dense = gemma4.Gemma4TextMLP(config, 0).double()
    norms = {n: gemma4.Gemma4RMSNorm(N, eps=EPS).double() for n in ("post_mlp", "pre_experts", "post_experts")}
    w, (h, y) = _weights("fp32"), _hy("fp32")
    t = lambda v: torch.from_numpy(np.ascontiguousarray(v))  # noqa: E731
    router.load_state_dict({"proj.weight": t(w["router_proj"].T), "scale": t(w["router_scale"]),
                            "per_expert_scale": t(w["router_expert_scale"])})  # fmt: skip
    both = np.concatenate([w["experts_gate_proj"], w["experts_up_proj"]], axis=-1).transpose(0, 2, 1)
    experts.load_state_dict({"gate_up_proj": t(both), "down_proj": t(w["experts_down_proj"].transpose(0, 2, 1))})
    dense.load_state_dict({f"{p}_proj.weight": t(w[f"{p}_proj"].T) for p in ("gate", "up", "down")})
    for name, module in norms.items():
        module.load_state_dict({"weight": t(w[f"{name}_norm.weight"])})
    with torch.no_grad():
        flat = t(h).reshape(-1, N)
        _, weights, index = router(flat)
        mixed = norms["post_experts"](experts(norms["pre_experts"](flat), index, weights).reshape(h.shape))
        theirs = (norms["post_mlp"](dense(t(y))) + mixed).numpy()
    ours = branch64(_spec(top_k=top_k), h, y, w)
    # transformers takes the router's softmax and renormalization in float32: within float32's rounding of them
    assert float(np.abs(theirs - ours).max()) <= 1e-6 * float(np.abs(ours).max())


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"top_k": 5}, "top_k_experts"),
        ({"dense": 0}, "intermediate_size"),
        ({"dtype": "int8"}, "dtype"),
    ],
)
def test_gemma4_moe_spec_refuses_by_field(fields: dict[str, object], words: str) -> None:
    base = {"experts": E, "top_k": K, "inner": M, "dense": D, "hidden": N, "act": "gelu_tanh",
            "norm": NormSpec("rms", EPS, "fp32"), "dtype": "fp32"}  # fmt: skip
    with pytest.raises(SpecError) as error:
        Gemma4MoESpec(**(base | fields))  # type: ignore[arg-type]
    assert error.value.field == words


def test_ort_cpu_moe_has_no_gated_gelu_expert() -> None:
    # Why Gemma 4's experts take the portable graph in every form, int4 included (a MatMulNBits per expert, not QMoE):
    # ONNX Runtime 1.31.1's CPU MoE computes its "gelu" (the tanh form) on fc1 alone, gelu(x W1) W2, and refuses the
    # fc3 that would gate it (gelu(x W1) * (x W3): Gemma4TextExperts). When this fails, ORT may compute it: measure
    # it against the twin and let the gqa form take it.
    onnxruntime = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    x, logits = rng.standard_normal((T, N)).astype(np.float32), rng.standard_normal((T, E)).astype(np.float32)
    w1, w3 = ((rng.standard_normal((E, M, N)) / 4).astype(np.float32) for _ in range(2))  # [E, m, n]: rows out
    w2 = (rng.standard_normal((E, N, M)) / 3).astype(np.float32)

    def run(fc3: bool) -> np.ndarray | str:
        node = helper.make_node("MoE", ["x", "r", "w1", "", "w2", "", *(["w3"] if fc3 else [])], ["y"],
                                domain="com.microsoft", k=K, activation_type="gelu", normalize_routing_weights=1)
        weights = [helper.make_tensor(n, TensorProto.FLOAT, v.shape, v.ravel()) for n, v in
                   (("w1", w1), ("w2", w2), ("w3", w3)) if fc3 or n != "w3"]  # fmt: skip
        io = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
        graph = helper.make_graph([node], "moe", [io("x", [T, N]), io("r", [T, E])], [io("y", None)], weights)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                        helper.make_opsetid("com.microsoft", 1)], ir_version=10)
        try:
            session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            return session.run(None, {"x": x, "r": logits})[0].astype(np.float64)
        except Exception as error:  # noqa: BLE001 (the kernel's refusal is what is measured)
            return str(error)

    def plain64(gated: bool) -> np.ndarray:  # softmax of the k chosen logits, gelu_tanh(x W1) (* x W3) W2
        out = np.zeros((T, N))
        for t in range(T):
            top = np.argsort(-logits[t], kind="stable")[:K]
            weights = np.exp(logits[t, top] - logits[t, top].max())
            for e, weight in zip(top, weights / weights.sum(), strict=True):
                h = activation64("gelu_tanh", x[t] @ w1[e].T.astype(np.float64))
                h = h * (x[t] @ w3[e].T.astype(np.float64)) if gated else h
                out[t] += weight * (h @ w2[e].T.astype(np.float64))
        return out

    plain = run(fc3=False)
    assert isinstance(plain, np.ndarray)
    scale = float(np.abs(plain64(False)).max())
    assert float(np.abs(plain - plain64(False)).max()) <= 1e-6 * scale  # ungated, in GELU's tanh form
    assert float(np.abs(plain - plain64(True)).max()) > 0.1 * scale
    gated = run(fc3=True)
    assert isinstance(gated, str) and "FC3 is not implemented for CPU MoE" in gated, gated
