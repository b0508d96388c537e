"""The ``deepseek_v2`` architecture (DeepSeek-V2, V2-Lite): its config read as transformers reads it, its layers.

Each row is a tiny config (keys left out fall back to DeepseekV2Config's defaults, not DeepSeek V3's); every field
read is compared with transformers' own ``DeepseekV2Config`` of the same keys and its ``DeepseekV2TopkRouter``'s
attributes (``topk_method`` greedy: one group), the logit scale with ``DeepseekV2Attention.scaling``, and each
layer's MLP with ``first_k_dense_replace``. Bad keys are one SpecError naming the key.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.architectures.reading import assert_refused, read_both

transformers = pytest.importorskip("transformers")

# DeepSeek-V2-Lite's rope_scaling as its config.json says it (the 4.x key "type"), shrunk
YARN = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "mscale": 0.707,
        "mscale_all_dim": 0.707, "beta_fast": 32, "beta_slow": 1, "rope_theta": 10000.0}  # fmt: skip
TINY = {"model_type": "deepseek_v2", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
        "moe_intermediate_size": 16, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
        "n_routed_experts": 8, "num_experts_per_tok": 3, "n_group": 4, "topk_group": 2,
        "topk_method": "group_limited_greedy", "routed_scaling_factor": 16.0, "first_k_dense_replace": 1,
        "q_lora_rank": None, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
        "max_position_embeddings": 256, "rope_scaling": YARN}  # fmt: skip

# (label, the config's changes to TINY (None: the key left out))
CASES: list[tuple[str, dict[str, Any]]] = [
    ("DeepSeek-V2's router (group_limited_greedy, x16), V2-Lite's plain q_proj, YaRN under 'type'", {}),
    ("V2-Lite's router: greedy over every expert (n_group said but not read), defaults for the rest",
     {"topk_method": "greedy", "routed_scaling_factor": None, "n_shared_experts": None,
      "first_k_dense_replace": None}),
    ("a query LoRA, topk_method left out (greedy), no scaling", {"q_lora_rank": 16, "topk_method": None,
                                                                 "n_group": None, "topk_group": None,
                                                                 "rope_scaling": None}),
]  # fmt: skip


def _config(changes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (TINY | changes).items() if v is not None or k == "q_lora_rank"}


@pytest.mark.fast
@pytest.mark.parametrize(("label", "changes"), CASES, ids=[c[0] for c in CASES])
def test_the_config_reads_as_transformers_reads_it(label: str, changes: dict[str, Any]) -> None:
    from transformers.models.deepseek_v2 import modeling_deepseek_v2 as modeling

    config = _config(changes)
    arch, fields, _, theirs = read_both(config, transformers.DeepseekV2Config)
    router = modeling.DeepseekV2TopkRouter(theirs)
    greedy = router.topk_method == "greedy"
    for name, want in (("kv_lora_rank", theirs.kv_lora_rank), ("qk_nope_head_dim", theirs.qk_nope_head_dim),
                       ("v_head_dim", theirs.v_head_dim), ("num_experts", router.num_experts),
                       ("experts_per_token", router.top_k), ("routed_scaling_factor", router.routed_scaling_factor),
                       ("n_shared_experts", theirs.n_shared_experts),
                       ("intermediate_size", theirs.moe_intermediate_size),
                       ("n_group", 1 if greedy else router.num_group),
                       ("topk_group", 1 if greedy else router.topk_group)):  # fmt: skip
        assert fields[name] == want, f"{label}: {name}"
    assert fields["q_lora_rank"] == (theirs.q_lora_rank or 0), label
    assert not hasattr(router, "norm_topk_prob") and fields["norm_topk_prob"] is False  # never renormalized
    attention = modeling.DeepseekV2Attention(theirs, 0)
    assert fields["attn_scale"] == pytest.approx(attention.scaling, rel=1e-15), label
    fields["position"] = {"num_heads": 4, "num_kv_heads": 1, "head_dim": 8}  # the encoding's, as ``hf`` reads it
    layer = arch.default_layer(fields)
    assert (layer.attention.kind, layer.ffn.router, layer.query_scale) == ("latent", "grouped_softmax_max", None)
    assert arch.changes is not None
    per_layer, _ = arch.changes(config, "config.json", {"num_layers": config["num_hidden_layers"]})
    kinds = [layer.with_fields(c).ffn.kind for c in per_layer]
    model = modeling.DeepseekV2Model(theirs)
    assert kinds == ["moe" if type(m.mlp).__name__ == "DeepseekV2Moe" else "gated" for m in model.layers], label


# (label, the config's changes, the key the one-line error names)
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("an unknown topk_method (V3's noaux_tc: transformers' V2 router leaves its weights unbound)",
     {"topk_method": "noaux_tc"}, "topk_method"),
    ("n_group not dividing the experts", {"n_group": 3}, "n_group"),
    ("norm_topk_prob true (transformers' V2 router never reads it)", {"norm_topk_prob": True}, "norm_topk_prob"),
    ("num_experts_per_tok left out (DeepseekV2Config has no default)", {"num_experts_per_tok": None},
     "num_experts_per_tok"),
    ("group_limited_greedy without topk_group", {"topk_group": None}, "topk_group"),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("label", "changes", "key"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_bad_key_is_named(label: str, changes: dict[str, Any], key: str) -> None:
    assert_refused(_config(changes), "v2", key, label)
