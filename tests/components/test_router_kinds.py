"""The grouped router's kinds (``components.grouped_moe.KINDS``): each twin against the transformers 5.23 router module
it is read from, in float64 (``DeepseekV2TopkRouter`` greedy and group_limited_greedy, ``Mistral4TopkRouter``,
``MistralLarge4TextTopkRouter``), its graph in ONNX Runtime against the twin, and planted ties: a near tie reported
and transformers' choice one of its two sides (the twin's or its flip), never a third.

Case table: (label, config class, router module, transformers' config fields, our router). DeepSeek V3's kind has
its own file (``test_router.py``).
"""  # noqa: D205

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ropeexport.architectures.feedforward import GROUPED_ROUTERS
from ropeexport.components.grouped_moe import (
    KINDS,
    GroupedRouter,
    grouped_margins,
    grouped_near_ties,
    grouped_route64,
    grouped_routing,
    scores64,
)
from ropeexport.errors import SpecError

pytestmark = pytest.mark.fast  # routers against their twins, tiny

N, T, E = 16, 32, 8  # hidden, tokens, experts
_V2 = ("deepseek_v2", "DeepseekV2Config", "DeepseekV2TopkRouter")
_M4 = ("mistral4", "Mistral4Config", "Mistral4TopkRouter")
_L4 = ("mistral_large4", "MistralLarge4TextConfig", "MistralLarge4TextTopkRouter")
# (label, (module, config class, router class), config fields, our router)
CASES: list[tuple[str, tuple[str, str, str], dict[str, Any], GroupedRouter]] = [
    ("v2-greedy", _V2, {"topk_method": "greedy", "n_group": 1, "topk_group": 1, "num_experts_per_tok": 3,
                        "routed_scaling_factor": 1.0},  # DeepSeek-V2-Lite's
     GroupedRouter.of("grouped_softmax_max", E, 3, 1, 1, False, 1.0)),
    ("v2-group-limited", _V2, {"topk_method": "group_limited_greedy", "n_group": 4, "topk_group": 2,
                               "num_experts_per_tok": 3, "routed_scaling_factor": 16.0},  # DeepSeek-V2's 16
     GroupedRouter.of("grouped_softmax_max", E, 3, 4, 2, False, 16.0)),
    ("mistral4-norm", _M4, {"n_group": 2, "topk_group": 1, "num_experts_per_tok": 2, "norm_topk_prob": True,
                            "routed_scaling_factor": 2.0},
     GroupedRouter.of("grouped_softmax", E, 2, 2, 1, True, 2.0)),
    ("mistral4-raw", _M4, {"n_group": 4, "topk_group": 2, "num_experts_per_tok": 3, "norm_topk_prob": False,
                           "routed_scaling_factor": 1.0},
     GroupedRouter.of("grouped_softmax", E, 3, 4, 2, False, 1.0)),
    ("large4", _L4, {"n_group": 2, "topk_group": 1, "num_experts_per_tok": 2, "routed_scaling_factor": 1.5},
     GroupedRouter.of("grouped_softmax", E, 2, 2, 1, True, 1.5)),
]  # fmt: skip
IDS = [c[0] for c in CASES]


def _module(where: tuple[str, str, str], fields: dict[str, Any]) -> Any:
    """transformers' router module of ``where``, float64, with a tiny config."""
    transformers = pytest.importorskip("transformers")
    import importlib

    model_type, config_class, router_class = where
    config = getattr(transformers, config_class)(hidden_size=N, num_attention_heads=2, n_routed_experts=E,
                                                 num_hidden_layers=1,
                                                 vocab_size=16, moe_intermediate_size=8, **fields)  # fmt: skip
    modeling = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    return getattr(modeling, router_class)(config).double()


@pytest.mark.parametrize(("label", "where", "fields", "router"), CASES, ids=IDS)
def test_router_kind_is_transformers_router(label: str, where: tuple[str, str, str], fields: dict[str, Any],
                                            router: GroupedRouter) -> None:  # fmt: skip
    torch = pytest.importorskip("torch")
    module = _module(where, fields)
    rng = np.random.default_rng(len(label))
    proj = rng.standard_normal((N, E)) / np.sqrt(N) * 2
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(proj.T.copy()))
        logits_hf, weights_hf, chosen_hf = module(torch.from_numpy(rng.standard_normal((T, N))))
    logits = logits_hf.double().numpy()  # the logits transformers chose by (float32 for V2 / Large 4: the same inputs)
    assert np.min(np.minimum(*grouped_margins(router, scores64(router, logits)))) > 1e-5, "a near tie in this seed"
    chosen, weights = grouped_route64(router, logits, None)
    order = np.argsort(chosen_hf.numpy(), -1)
    np.testing.assert_array_equal(np.sort(chosen, -1), np.take_along_axis(chosen_hf.numpy(), order, -1))
    mine = np.take_along_axis(weights, np.argsort(chosen, -1), -1)
    # float32 softmax in transformers for V2 and Large 4 (their logits float32): 1e-6 of the weight
    np.testing.assert_allclose(mine, np.take_along_axis(weights_hf.double().numpy(), order, -1), rtol=1e-6)
    if router.groups > 1:  # the grouping changes the choice somewhere: plain top-k of the scores would differ
        plain, _ = grouped_route64(GroupedRouter.of("grouped_softmax_max", E, router.top_k), logits, None)
        assert not np.array_equal(np.sort(plain, -1), np.sort(chosen, -1)), label


@pytest.mark.parametrize(("label", "where", "fields", "router"), CASES, ids=IDS)
def test_router_kind_graph_matches_its_twin(label: str, where: tuple[str, str, str], fields: dict[str, Any],
                                            router: GroupedRouter) -> None:  # fmt: skip
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from ropeexport.graph.onnx_io import GraphBuilder, make_model

    g = GraphBuilder(prefix="moe/")
    g.op("Identity", [grouped_routing(g, router, "logits", None)], name="routing")
    io = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", "s", E])  # noqa: E731
    model = make_model(helper.make_graph(g.nodes, "router", [io("logits")], [io("routing")], g.initializers), 17, {})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    logits = (2 * np.random.default_rng(len(label) + 7).standard_normal((2, T // 2, E))).astype(np.float32)
    (got,) = session.run(None, {"logits": logits})
    flat = logits.reshape(-1, E).astype(np.float64)
    assert np.min(np.minimum(*grouped_margins(router, scores64(router, flat)))) > 1e-5
    chosen, weights = grouped_route64(router, flat, None)
    want = np.zeros_like(flat)
    np.put_along_axis(want, chosen, weights, -1)
    np.testing.assert_array_equal(got.reshape(-1, E) != 0, want != 0)  # the same experts chosen
    np.testing.assert_allclose(got.reshape(-1, E), want, rtol=2e-6, atol=1e-7)


# (label, case, token 0's softmax scores [E] (the rest of the mass elsewhere is irrelevant: softmax of log p is p
# over its sum), the tie (group or expert))
TIES = [
    ("v2: the 2nd and 3rd groups' maxima 2e-9 apart", "v2-group-limited",
     [0.30, 0.01, 0.20, 0.02, 0.20 - 2e-9, 0.05, 0.04, 0.03], "group"),
    ("v2 greedy: the 3rd and 4th experts 3e-9 apart", "v2-greedy",
     [0.30, 0.20, 0.10, 0.10 - 3e-9, 0.05, 0.05, 0.04, 0.03], "expert"),
    ("mistral4: two groups' top-2 sums 2e-9 apart", "mistral4-norm",
     [0.30, 0.10, 0.05, 0.05, 0.20, 0.20 - 2e-9, 0.05, 0.05], "group"),
    ("large4: the kept group's 2nd and 3rd 1e-9 apart", "large4",
     [0.40, 0.20, 0.20 - 1e-9, 0.02, 0.05, 0.05, 0.04, 0.04], "expert"),
]  # fmt: skip


@pytest.mark.parametrize(("label", "case", "scores", "kind"), TIES, ids=[t[0] for t in TIES])
def test_a_planted_near_tie_is_reported_and_transformers_takes_one_side(label: str, case: str, scores: list[float],
                                                                        kind: str) -> None:  # fmt: skip
    # Token 1 has no tie: never reported, never moved by token 0's flip. transformers (float64 logits into the same
    # router module) chooses the twin's side or its flip's, never a third set.
    torch = pytest.importorskip("torch")
    _, where, fields, router = next(c for c in CASES if c[0] == case)
    logits = np.log(np.stack([np.array(scores), np.linspace(0.4, 0.01, E)]))
    ties = grouped_near_ties(router, logits, None, 1e-6)
    assert [t for t, _ in ties] == [0], (label, ties)
    group, expert = grouped_margins(router, scores64(router, logits))
    assert (group[0] < expert[0]) == (kind == "group"), (label, group, expert)
    plain, _ = grouped_route64(router, logits, None)
    flipped, _ = grouped_route64(router, logits, None, flips=[0])
    assert set(plain[0].tolist()) != set(flipped[0].tolist()) and (plain[1] == flipped[1]).all(), label
    module = _module(where, fields)
    with torch.no_grad():  # hidden states that give these logits exactly: x = logits, W = identity (N = E here)
        module.hidden_dim = E
        module.weight = torch.nn.Parameter(torch.eye(E, dtype=torch.float64))
        _, _, chosen_hf = module(torch.from_numpy(logits))
    sides = ({int(e) for e in plain[0]}, {int(e) for e in flipped[0]})
    assert {int(e) for e in chosen_hf[0]} in sides, (label, chosen_hf[0], sides)
    assert {int(e) for e in chosen_hf[1]} == {int(e) for e in plain[1]}


def test_kinds_are_the_layer_routers() -> None:
    # a kind a layer can name and the component cannot build, or the other way, would fail at build time only
    assert set(KINDS) == set(GROUPED_ROUTERS)


# (fields, the field the SpecError names)
BAD = [
    ({"experts": 8, "top_k": 2, "groups": 3, "score": "softmax", "group_rule": "max", "correction": False}, "n_group"),
    ({"experts": 8, "top_k": 2, "score": "softmax", "correction": True}, "e_score_correction_bias"),
    ({"experts": 8, "top_k": 2, "score": "tanh"}, "router.score"),
    ({"experts": 8, "top_k": 2, "group_rule": "mean"}, "router.group_rule"),
]


@pytest.mark.parametrize(("fields", "field"), BAD, ids=[b[1] for b in BAD])
def test_router_kind_refuses_by_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as error:
        GroupedRouter(**fields)
    assert error.value.field == field and "\n" not in str(error.value)


def test_max_rule_takes_groups_of_one() -> None:
    # DeepSeek V2 scores a group by its max: a group of one expert is its expert (top2_sum would refuse it)
    router = GroupedRouter.of("grouped_softmax_max", 4, 2, 4, 2)
    logits = np.log(np.array([[0.1, 0.4, 0.3, 0.2]]))
    chosen, weights = grouped_route64(router, logits, None)
    assert set(chosen[0].tolist()) == {1, 2} and weights[0].sum() == pytest.approx(0.7)
    with pytest.raises(SpecError):
        GroupedRouter.of("grouped_softmax", 4, 2, 4, 2)
