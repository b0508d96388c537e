"""DeepSeek's grouped router (``components.grouped_moe.GroupedRouter``): its twin against transformers 5.23's
``DeepseekV3TopkRouter`` and ``DeepseekV3MoE`` (float64 modules; the router's logits in float32 inside, as
transformers computes them), its graph in ONNX Runtime against the twin, and its refusals.

Case table: (experts, groups, topk_group, top_k, norm_topk_prob, scaling). A token whose deciding scores are closer
than float32 can separate is a near tie: counted and required to be absent from the seeds used (never broken
silently), so the chosen sets compare exactly.
"""  # noqa: D205

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ropeexport.components.grouped_moe import (
    GroupedRouter,
    grouped_margins,
    grouped_route64,
    grouped_routing,
    scores64,
    shared_moe,
    shared_moe64,
)
from ropeexport.errors import SpecError
from ropeexport.verification.compare import TOLERANCES

pytestmark = pytest.mark.fast  # a router against its twin

N, T = 16, 24  # hidden, tokens
CASES = [
    (8, 4, 2, 3, True, 2.5),
    (8, 2, 1, 2, False, 1.0),
    (16, 8, 4, 6, True, 2.827),  # Kimi K2's scaling; groups of 2: each group's score is both its experts
    (6, 1, 1, 2, True, 1.0),  # one group: plain sigmoid top-k
]
IDS = [f"E{c[0]}-G{c[1]}-kg{c[2]}-k{c[3]}-{'norm' if c[4] else 'raw'}" for c in CASES]


def _router_weights(experts: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """router_proj [n, E] and a correction bias [E] large enough to change choices (DeepSeek's are ~ scores' size)."""
    return rng.standard_normal((N, experts)) / np.sqrt(N), 0.3 * rng.standard_normal(experts)


def _margin(router: GroupedRouter, logits: np.ndarray, bias: np.ndarray) -> float:
    """The smallest gap, over tokens, between the last kept and the first dropped group score, and between the last
    chosen and the first unchosen choice score within the kept groups: below float32's reach, a near tie.
    """  # noqa: D205
    choice = 1.0 / (1.0 + np.exp(-logits)) + bias
    E, G = router.experts, router.groups
    group = -np.sort(-choice.reshape(len(choice), G, E // G), -1)[..., :2].sum(-1)  # [T, G]
    ordered = -np.sort(-group, -1)
    gaps = [ordered[:, router.topk_group - 1] - ordered[:, router.topk_group]] if router.topk_group < G else []
    kept = np.argsort(-group, -1, kind="stable")[:, : router.topk_group]
    open_ = np.zeros_like(group, bool)
    np.put_along_axis(open_, kept, True, -1)
    inside = -np.sort(-np.where(np.repeat(open_, E // G, -1), choice, -np.inf), -1)
    if router.top_k < router.topk_group * (E // G):
        gaps.append(inside[:, router.top_k - 1] - inside[:, router.top_k])
    return float(np.min(gaps)) if gaps else float("inf")


@pytest.mark.parametrize(("experts", "groups", "topk_group", "top_k", "norm", "scaling"), CASES, ids=IDS)
def test_grouped_router_is_transformers_router(experts: int, groups: int, topk_group: int, top_k: int, norm: bool,
                                               scaling: float) -> None:  # fmt: skip
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as modeling

    cfg = transformers.DeepseekV3Config(hidden_size=N, n_routed_experts=experts, n_group=groups, topk_group=topk_group,
                                        num_experts_per_tok=top_k, norm_topk_prob=norm, routed_scaling_factor=scaling,
                                        moe_intermediate_size=8, n_shared_experts=1, num_hidden_layers=1,
                                        vocab_size=16)  # fmt: skip
    router = GroupedRouter(experts, top_k, groups, topk_group, norm, scaling)
    rng = np.random.default_rng(experts + groups)
    proj, bias = _router_weights(experts, rng)
    module = modeling.DeepseekV3TopkRouter(cfg).double()
    x = rng.standard_normal((T, N))
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(proj.T.copy()))
        module.e_score_correction_bias.copy_(torch.from_numpy(bias))
        logits32, weights_hf, chosen_hf = module(torch.from_numpy(x))
    logits = logits32.double().numpy()  # transformers' float32 logits: the same inputs to both choices
    assert _margin(router, logits, bias) > 1e-5, "a near tie in this seed: the comparison would not be exact"
    chosen, weights = grouped_route64(router, logits, bias)
    order = np.argsort(chosen_hf.numpy(), -1)
    np.testing.assert_array_equal(np.sort(chosen, -1), np.take_along_axis(chosen_hf.numpy(), order, -1))
    mine = np.take_along_axis(weights, np.argsort(chosen, -1), -1)
    np.testing.assert_allclose(mine, np.take_along_axis(weights_hf.double().numpy(), order, -1), rtol=1e-6)
    # the choice really is group-limited and biased: plain top-k of the scores would choose otherwise somewhere
    plain, _ = grouped_route64(GroupedRouter(experts, top_k, 1, 1, norm, scaling), logits, np.zeros(experts))
    assert groups == 1 or not np.array_equal(np.sort(plain, -1), np.sort(chosen, -1))


def test_shared_moe_twin_is_transformers_moe() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as modeling

    E, M, S = 8, 8, 2  # experts, their inner width, shared experts
    cfg = transformers.DeepseekV3Config(hidden_size=N, n_routed_experts=E, n_group=4, topk_group=2,
                                        num_experts_per_tok=3, moe_intermediate_size=M, n_shared_experts=S,
                                        routed_scaling_factor=2.5, num_hidden_layers=1, vocab_size=16)  # fmt: skip
    module = modeling.DeepseekV3MoE(cfg).double().eval()
    rng = np.random.default_rng(21)
    proj, bias = _router_weights(E, rng)
    w: dict[str, Any] = {"router_proj": proj, "router_correction": bias,
                         "experts_gate_proj": rng.standard_normal((E, N, M)) / 4,
                         "experts_up_proj": rng.standard_normal((E, N, M)) / 4,
                         "experts_down_proj": rng.standard_normal((E, M, N)) / 3,
                         "shared_gate_proj": rng.standard_normal((N, M * S)) / 4,
                         "shared_up_proj": rng.standard_normal((N, M * S)) / 4,
                         "shared_down_proj": rng.standard_normal((M * S, N)) / 4}  # fmt: skip
    with torch.no_grad():
        module.gate.weight.copy_(torch.from_numpy(proj.T.copy()))
        module.gate.e_score_correction_bias.copy_(torch.from_numpy(bias))
        gate_up = np.concatenate([w["experts_gate_proj"], w["experts_up_proj"]], -1).transpose(0, 2, 1)  # [E, 2m, n]
        module.experts.gate_up_proj.copy_(torch.from_numpy(gate_up.copy()))
        module.experts.down_proj.copy_(torch.from_numpy(w["experts_down_proj"].transpose(0, 2, 1).copy()))
        for part in ("gate", "up", "down"):
            getattr(module.shared_experts, f"{part}_proj").weight.copy_(
                torch.from_numpy(w[f"shared_{part}_proj"].T.copy())
            )
        x = rng.standard_normal((2, T // 2, N))
        got = module(torch.from_numpy(x)).numpy()
    # the router's logits are float32 in transformers: the twin is handed the same rounding of them
    w32 = dict(w, router_proj=w["router_proj"])
    logits32 = (x.reshape(-1, N).astype(np.float32) @ proj.astype(np.float32)).astype(np.float64)
    assert _margin(GroupedRouter(E, 3, 4, 2, True, 2.5), logits32, bias) > 1e-5
    want = shared_moe64(GroupedRouter(E, 3, 4, 2, True, 2.5), x, w32)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # the routing weights carry float32 logits
    without_shared = want - shared_moe64(
        GroupedRouter(E, 3, 4, 2, True, 2.5), x, w32 | {"experts_down_proj": 0 * w["experts_down_proj"]}
    )
    assert not np.allclose(got, without_shared, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(("experts", "groups", "topk_group", "top_k", "norm", "scaling"), CASES, ids=IDS)
def test_grouped_routing_graph_matches_its_twin(experts: int, groups: int, topk_group: int, top_k: int, norm: bool,
                                                scaling: float) -> None:  # fmt: skip
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from ropeexport.graph.onnx_io import GraphBuilder, make_model

    router = GroupedRouter(experts, top_k, groups, topk_group, norm, scaling)
    rng = np.random.default_rng(3 * experts + groups)
    _, bias = _router_weights(experts, rng)
    g = GraphBuilder(prefix="moe/")
    out = grouped_routing(g, router, "logits", g.const("correction", bias.astype(np.float32)))
    g.op("Identity", [out], name="routing")
    io = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", "s", experts])  # noqa: E731
    model = make_model(helper.make_graph(g.nodes, "router", [io("logits")], [io("routing")], g.initializers), 17, {})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    logits = rng.standard_normal((2, T // 2, experts)).astype(np.float32)
    (got,) = session.run(None, {"logits": logits})
    flat = logits.reshape(-1, experts).astype(np.float64)
    assert _margin(router, flat, bias.astype(np.float32).astype(np.float64)) > 1e-5
    chosen, weights = grouped_route64(router, flat, bias.astype(np.float32).astype(np.float64))
    want = np.zeros_like(flat)
    np.put_along_axis(want, chosen, weights, -1)
    np.testing.assert_array_equal(got.reshape(-1, experts) != 0, want != 0)  # the same experts chosen
    np.testing.assert_allclose(got.reshape(-1, experts), want, rtol=2e-6, atol=1e-7)


# (fields, the field the SpecError names): the bad input among them.
BAD = [
    ({"experts": 8, "top_k": 2, "groups": 3, "topk_group": 1}, "n_group"),  # a group count that does not divide
    ({"experts": 8, "top_k": 9}, "num_experts_per_tok"),  # a top-k above the expert count
    ({"experts": 8, "top_k": 2, "groups": 8, "topk_group": 1}, "n_group"),  # one expert per group
    ({"experts": 8, "top_k": 2, "groups": 4, "topk_group": 5}, "topk_group"),
    ({"experts": 8, "top_k": 5, "groups": 4, "topk_group": 2}, "num_experts_per_tok"),  # more than the kept groups hold
    ({"experts": 8, "top_k": 2, "scaling": 0.0}, "routed_scaling_factor"),
    ({"experts": 8, "top_k": 2, "norm_topk_prob": 1}, "norm_topk_prob"),
]


@pytest.mark.parametrize(("fields", "field"), BAD, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD)])
def test_grouped_router_refuses_by_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as error:
        GroupedRouter(**fields)
    assert error.value.field == field and "\n" not in str(error.value)


@pytest.mark.parametrize(("dtype", "kind"), [("fp32", "grouped"), ("fp16", "grouped"), ("fp16", "grouped_softmax"),
                                            ("fp32", "grouped_softmax_max")])  # fmt: skip
def test_shared_moe_graph_matches_its_twin(dtype: str, kind: str) -> None:
    # The portable graph of DeepSeek's mixture in ONNX Runtime against shared_moe64 on the same stored weights (the
    # router's logits float32 in both: the twin is handed the graph's own float32 rounding of them, near ties checked
    # absent). The twin without its shared experts, or routed without the correction bias, falls outside.
    import onnxruntime as ort
    from onnx import helper

    from ropeexport.dtypes import DTYPES
    from ropeexport.graph.onnx_io import GraphBuilder, make_model
    from ropeexport.numerics import round_once

    E, M, MS = 8, 8, 16
    router = GroupedRouter.of(kind, E, 3, 4, 2, True, 2.5)  # each kind (components.grouped_moe.KINDS)
    rng = np.random.default_rng(31)
    proj, bias = _router_weights(E, rng)
    w = {"router_proj": proj, "experts_gate_proj": rng.standard_normal((E, N, M)) / 4,
         "experts_up_proj": rng.standard_normal((E, N, M)) / 4, "experts_down_proj": rng.standard_normal((E, M, N)) / 3,
         "shared_gate_proj": rng.standard_normal((N, MS)) / 4, "shared_up_proj": rng.standard_normal((N, MS)) / 4,
         "shared_down_proj": rng.standard_normal((MS, N)) / 4}  # fmt: skip
    w = {n: round_once(v, dtype).astype(np.float64) for n, v in w.items()}
    w["router_correction"] = bias.astype(np.float32).astype(np.float64)
    g = GraphBuilder(prefix="moe/")
    stored = {n: g.const(n, round_once(v, dtype)) for n, v in w.items() if n.startswith(("router_proj", "shared_"))}
    stored["router_correction"] = g.const("router_correction", w["router_correction"].astype(np.float32))
    gate_up = np.concatenate([w["experts_gate_proj"], w["experts_up_proj"]], -1)
    stored["experts_gate_up_proj"] = g.const("experts_gate_up_proj", round_once(gate_up, dtype))
    stored["experts_down_proj"] = g.const("experts_down_proj", round_once(w["experts_down_proj"], dtype))
    g.op("Identity", [shared_moe(g, router, M, dtype, "x", stored)], name="y")
    io = lambda n: helper.make_tensor_value_info(n, DTYPES[dtype].onnx, ["b", "s", N])  # noqa: E731
    model = make_model(helper.make_graph(g.nodes, "moe", [io("x")], [io("y")], g.initializers), 17, {})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((2, T // 2, N)).astype(DTYPES[dtype].np_dtype)
    (got,) = session.run(None, {"x": x})
    logits = (x.reshape(-1, N).astype(np.float32) @ w["router_proj"].astype(np.float32)).astype(np.float64)
    if router.correction:
        assert _margin(router, logits, w["router_correction"]) > 1e-4
    else:
        assert np.min(np.minimum(*grouped_margins(router, scores64(router, logits)))) > 1e-4
    want = shared_moe64(router, x.astype(np.float64), w)
    # the dtype's tolerance, rtol of each row's largest |value| (the experts' sums round at that size)
    tolerance = TOLERANCES[dtype]
    bound = tolerance.atol + tolerance.rtol * np.abs(want).max(-1, keepdims=True)
    assert np.all(np.abs(got - want) <= bound), float(np.abs(got - want).max())
    wrongs = {"no shared experts": want - shared_moe64(router, x.astype(np.float64), w | {"experts_down_proj": 0 * w[
        "experts_down_proj"]}), "no correction bias": shared_moe64(router, x.astype(np.float64),
                                                                  w | {"router_correction": 0 * bias}),
              "another kind's scores": shared_moe64(GroupedRouter.of("grouped_softmax_max" if router.correction else
                                                                     "grouped", E, 3, 4, 2, True, 2.5),
                                                    x.astype(np.float64), w)}  # fmt: skip
    if not router.correction:
        del wrongs["no correction bias"]
    for mistake, wrong in wrongs.items():
        assert not np.all(np.abs(got - wrong) <= bound), mistake


# (label, router (experts, groups, topk_group, top_k), token 0's router logits' sigmoid scores [E] (the correction 0),
# the tie flipped (group or expert), what token 0 chooses after the flip)
TIES = [
    ("two groups 2e-9 apart: the flip keeps the other group", (8, 2, 1, 2),
     [0.9, 0.5, 0.1, 0.1, 0.8, 0.6 - 2e-9, 0.1, 0.1], "group", {4, 5}),
    ("the 2nd and 3rd experts of the kept group 3e-9 apart: the flip takes the 3rd", (8, 2, 1, 2),
     [0.9, 0.5, 0.5 - 3e-9, 0.1, 0.2, 0.2, 0.1, 0.1], "expert", {0, 2}),
    ("one group: plain top-k's k-th and next 1e-9 apart", (6, 1, 1, 2),
     [0.2, 0.7, 0.6, 0.6 - 1e-9, 0.1, 0.1], "expert", {1, 3}),
]  # fmt: skip


@pytest.mark.parametrize(("label", "shape", "scores", "kind", "flipped"), TIES, ids=[t[0] for t in TIES])
def test_a_near_tie_is_found_and_its_flip_takes_the_other_side(label: str, shape: tuple[int, int, int, int],
                                                               scores: list[float], kind: str,
                                                               flipped: set[int]) -> None:  # fmt: skip
    # Token 1 has no tie (well-separated scores): never reported, never moved by token 0's flip.
    from ropeexport.components.grouped_moe import grouped_margins, grouped_near_ties

    experts, groups, topk_group, top_k = shape
    router = GroupedRouter(experts, top_k, groups, topk_group)
    first = np.array(scores)
    second = np.linspace(0.95, 0.05, shape[0])
    logits = np.log(np.stack([first, second]) / (1 - np.stack([first, second])))  # the sigmoid's inverse
    bias = np.zeros(shape[0])
    ties = grouped_near_ties(router, logits, bias, 1e-6)
    assert [t for t, _ in ties] == [0], (label, ties)
    group, expert = grouped_margins(router, 1 / (1 + np.exp(-logits)))
    assert (group[0] < expert[0]) == (kind == "group"), (label, group, expert)
    assert ties[0][1] == pytest.approx(min(group[0], expert[0]))
    plain, _ = grouped_route64(router, logits, bias)
    taken, weights = grouped_route64(router, logits, bias, flips=[0])
    assert set(taken[0].tolist()) == flipped and set(plain[0].tolist()) != flipped, label
    assert (taken[1] == plain[1]).all()
    # the flip is the routing of the scores with the tie broken the other way
    nudged = first.copy()
    lower = {"group": 5, "expert": 2 if shape[0] == 8 else 3}[kind]
    nudged[lower] += 1e-6
    other, _ = grouped_route64(router, np.log(nudged / (1 - nudged))[None], bias)
    assert set(other[0].tolist()) == flipped, label
