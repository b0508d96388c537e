"""The ``mistral4`` architecture (Mistral Small 4): its config read as transformers reads it, its layers.

Each row is a tiny config (keys left out fall back to Mistral4Config's defaults, not DeepSeek V3's); every field read
is compared with transformers' own ``Mistral4Config`` of the same keys, the logit scale with
``Mistral4Attention.scaling``, the router's kind and the query scale's parameters with what ``Mistral4TopkRouter`` and
``get_llama_4_attn_scale`` read, and each layer's MLP with ``first_k_dense_replace``. Bad keys are one SpecError
naming the key.
"""

from __future__ import annotations

from typing import Any

import pytest

from ropeexport.architectures.deepseek_v3 import FIELDS
from tests.architectures.reading import assert_refused, read_both

transformers = pytest.importorskip("transformers")

ROPE = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
        "llama_4_scaling_beta": 0.1}  # fmt: skip
TINY = {"model_type": "mistral4", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
        "moe_intermediate_size": 16, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
        "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "first_k_dense_replace": 1,
        "q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
        "max_position_embeddings": 256, "rope_parameters": ROPE}  # fmt: skip

# (label, the config's changes to TINY (None: the key left out))
CASES: list[tuple[str, dict[str, Any]]] = [
    ("one dense layer, YaRN's mscale squared in the softmax scale, beta 0.1", {}),
    ("router and dense fields at Mistral4Config's defaults (not V3's): no dense layer, one group, scaling 1",
     {"first_k_dense_replace": None, "n_group": None, "topk_group": None, "routed_scaling_factor": None,
      "norm_topk_prob": None, "n_shared_experts": None}),
    ("no query LoRA (q_lora_rank null: a plain q_proj, modular_mistral4.py:117), weights not renormalized",
     {"q_lora_rank": None, "norm_topk_prob": False, "routed_scaling_factor": 2.5}),
]  # fmt: skip


def _config(changes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (TINY | changes).items() if v is not None or k == "q_lora_rank"}


@pytest.mark.fast
@pytest.mark.parametrize(("label", "changes"), CASES, ids=[c[0] for c in CASES])
def test_the_config_reads_as_transformers_reads_it(label: str, changes: dict[str, Any]) -> None:
    from transformers.models.mistral4 import modeling_mistral4

    config = _config(changes)
    arch, fields, sources, theirs = read_both(config, transformers.Mistral4Config)
    for key, name, _ in FIELDS:
        assert fields[name] == getattr(theirs, key), f"{label}: {key}"
        said = sources[name]
        assert said == key if key in config else "Mistral4Config" in said, (label, key, said)
    assert fields["q_lora_rank"] == (theirs.q_lora_rank or 0), label
    attention = modeling_mistral4.Mistral4Attention(theirs, 0)
    assert fields["attn_scale"] == pytest.approx(attention.scaling, rel=1e-15), label
    params = theirs.rope_parameters
    assert fields["query_scale"] == {"kind": "log_floor", "beta": params["llama_4_scaling_beta"],
                                     "original_max_position_embeddings": params["original_max_position_embeddings"]}
    fields["position"] = {"num_heads": 4, "num_kv_heads": 1, "head_dim": 8}  # the encoding's, as ``hf`` reads it
    layer = arch.default_layer(fields)
    f = layer.ffn
    router = modeling_mistral4.Mistral4TopkRouter(theirs)
    assert (layer.attention.kind, f.router, f.groups, f.topk_group, f.norm_topk_prob, f.scaling, f.shared) == (
        "latent", "grouped_softmax", router.num_group, router.topk_group, router.norm_topk_prob,
        router.routed_scaling_factor, theirs.n_shared_experts)  # fmt: skip
    assert layer.query_scale == fields["query_scale"]
    assert arch.changes is not None
    per_layer, _ = arch.changes(config, "config.json", {"num_layers": config["num_hidden_layers"]})
    kinds = [layer.with_fields(c).ffn.kind for c in per_layer]
    model = modeling_mistral4.Mistral4Model(theirs)
    assert kinds == ["moe" if type(m.mlp).__name__ == "Mistral4MoE" else "gated" for m in model.layers], label


# (label, the config's changes, the key the one-line error names)
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("no llama_4_scaling_beta (transformers has no default for it)",
     {"rope_parameters": {k: v for k, v in ROPE.items() if k != "llama_4_scaling_beta"}},
     "rope_parameters.llama_4_scaling_beta"),
    ("a partial rotary factor that is not the rope slice's share of nope + rope",
     {"rope_parameters": ROPE | {"partial_rotary_factor": 0.25}}, "rope_parameters.partial_rotary_factor"),
    ("no rope_parameters (the config class fills in YaRN x128 over 8192)", {"rope_parameters": None},
     "rope_parameters"),
    ("n_group not dividing the experts", {"n_group": 3}, "n_group"),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("label", "changes", "key"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_bad_key_is_named(label: str, changes: dict[str, Any], key: str) -> None:
    assert_refused(_config(changes), "m4", key, label)
