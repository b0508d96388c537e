"""The ``deepseek_v3`` architecture (DeepSeek V3, Kimi K2): its config read as transformers reads it, its layers.

Each row is a tiny config (keys left out fall back to DeepseekV3Config's defaults); every field read is compared
with transformers' own ``DeepseekV3Config`` of the same keys, and the logit scale with ``DeepseekV3Attention.scaling``
(YaRN's mscale squared in it). The default layer is latent attention with DeepSeek's grouped mixture; the first
``first_k_dense_replace`` layers differ only by a dense MLP. Bad keys are one SpecError naming the key. Building a
decoder of it is refused naming ``attention_kind`` until a decoder composes the latent component.
"""

from __future__ import annotations

from typing import Any

import pytest

from ropeexport.architectures import ARCHITECTURES, architecture
from ropeexport.architectures.deepseek_v3 import FIELDS, dense_layers
from ropeexport.architectures.layers import LayerSpec
from ropeexport.decoder.config import from_config
from ropeexport.errors import SpecError

transformers = pytest.importorskip("transformers")

TINY = {"model_type": "deepseek_v3", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
        "moe_intermediate_size": 16, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
        "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "first_k_dense_replace": 1,
        "q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
        "head_dim": 8, "max_position_embeddings": 256, "rms_norm_eps": 1e-6}  # fmt: skip
YARN = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 128, "mscale": 0.707,
        "mscale_all_dim": 0.707, "beta_fast": 32, "beta_slow": 1, "rope_theta": 10000.0}  # fmt: skip

# (label, the config's changes to TINY (None: the key left out), the dense layers expected)
CASES: list[tuple[str, dict[str, Any], int]] = [
    ("tiny", {}, 1),
    ("YaRN x40 with mscale pairs (V3's rope_parameters)", {"rope_parameters": YARN, "max_position_embeddings": 5120},
     1),
    ("no query LoRA (q_lora_rank null: a plain q_proj), no dense layer, two shared experts",
     {"q_lora_rank": None, "first_k_dense_replace": 0, "n_shared_experts": 2}, 0),
    ("router fields left to transformers' defaults", {"n_group": None, "topk_group": None, "norm_topk_prob": None,
                                                      "routed_scaling_factor": None, "n_routed_experts": 16}, 1),
    ("no renormalization, scaling 1", {"norm_topk_prob": False, "routed_scaling_factor": 1.0}, 1),
    ("YaRN under rope_scaling's 4.x key 'type' (V3's config.json as released): mscale squared still applies",
     {"rope_scaling": {k: v for k, v in YARN.items() if k != "rope_type"} | {"type": "yarn"},
      "max_position_embeddings": 5120}, 1),
    ("Kimi K2's router shape, shrunk (one group, 8 of 12 experts, scaling 2.827, YaRN x32 with mscale 1.0 pairs)",
     {"n_group": 1, "topk_group": 1, "n_routed_experts": 12, "num_experts_per_tok": 8, "routed_scaling_factor": 2.827,
      "rope_parameters": YARN | {"factor": 32.0, "mscale": 1.0, "mscale_all_dim": 1.0},
      "max_position_embeddings": 4096}, 1),
]  # fmt: skip


def _config(changes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (TINY | changes).items() if v is not None}


def _theirs(config: dict[str, Any]) -> Any:
    return transformers.DeepseekV3Config(**{k: v for k, v in config.items() if k != "model_type"})


@pytest.mark.fast
@pytest.mark.parametrize(("label", "changes", "dense"), CASES, ids=[c[0] for c in CASES])
def test_the_config_reads_as_transformers_reads_it(label: str, changes: dict[str, Any], dense: int) -> None:
    config = _config(changes)
    arch = architecture(config)
    fields, sources = arch.layout(config)
    theirs = _theirs(config)
    for key, name, _ in FIELDS:
        assert fields[name] == getattr(theirs, key), f"{label}: {key}"
        assert sources[name] == key if key in config else sources[name].startswith("default"), (label, key)
    assert fields["q_lora_rank"] == (theirs.q_lora_rank or 0), label
    attention = transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3Attention(theirs, 0)
    assert fields["attn_scale"] == pytest.approx(attention.scaling, rel=1e-15), label
    fields["position"] = {"num_heads": 4, "num_kv_heads": 1, "head_dim": 8}  # the encoding's, as ``hf`` reads it
    layer = arch.default_layer(fields)
    a, f = layer.attention, layer.ffn
    assert (a.kind, a.num_heads, a.num_kv_heads, a.head_dim) == ("latent", 4, 4, theirs.qk_rope_head_dim)
    assert (a.q_lora_rank, a.kv_lora_rank, a.qk_nope_head_dim, a.v_head_dim) == (
        theirs.q_lora_rank or 0, theirs.kv_lora_rank, theirs.qk_nope_head_dim, theirs.v_head_dim)
    assert (f.kind, f.router, f.experts, f.top_k, f.inner) == (
        "moe", "grouped", theirs.n_routed_experts, theirs.num_experts_per_tok, theirs.moe_intermediate_size)
    assert (f.groups, f.topk_group, f.norm_topk_prob, f.scaling, f.shared) == (
        theirs.n_group, theirs.topk_group, theirs.norm_topk_prob, theirs.routed_scaling_factor,
        theirs.n_shared_experts)  # fmt: skip
    assert layer.cache_shapes("fused") == ((4, 16), (4, theirs.v_head_dim))  # keys nope + rope, values v_head_dim
    per_layer = dense_layers(config, config["num_hidden_layers"])
    for i, changes_i in enumerate(per_layer):
        made = layer.with_fields(changes_i)
        assert (made.ffn.kind == "gated") == (i < theirs.first_k_dense_replace), (label, i)
        assert made.ffn.inner == (theirs.intermediate_size if i < dense else theirs.moe_intermediate_size)
        assert made.attention == layer.attention, (label, i)


@pytest.mark.fast
def test_it_is_in_the_catalog() -> None:
    assert ARCHITECTURES["deepseek_v3"].config_hook.shared_rope_key
    assert ARCHITECTURES["deepseek_v3"].config_hook.pairing == "interleaved"


# (label, the config's changes, the key the one-line error names)
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("kv_lora_rank without qk_rope_head_dim", {"qk_rope_head_dim": None}, "qk_rope_head_dim"),
    ("a group count that does not divide the experts", {"n_group": 3}, "n_group"),
    ("a top-k above the expert count", {"num_experts_per_tok": 9}, "num_experts_per_tok"),
    ("halves instead of interleaved pairs", {"rope_interleave": False}, "rope_interleave"),
    ("attention biases", {"attention_bias": True}, "attention_bias"),
    ("a zero scaling factor", {"routed_scaling_factor": 0}, "routed_scaling_factor"),
    ("a ratio in the place of a rank", {"kv_lora_rank": 0.5}, "kv_lora_rank"),
]


@pytest.mark.fast
@pytest.mark.parametrize(("label", "changes", "key"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_bad_key_is_named(label: str, changes: dict[str, Any], key: str) -> None:
    with pytest.raises(SpecError) as error:
        architecture(_config(changes)).layout(_config(changes))
    assert error.value.field == f"config.json: {key}", (label, str(error.value))
    assert "\n" not in str(error.value)


@pytest.mark.fast
def test_a_grouped_layer_outside_the_routers_rules_is_named() -> None:
    fields, _ = architecture(TINY).layout(TINY)
    layer = architecture(TINY).default_layer(fields | {"position": {"num_heads": 4, "head_dim": 8}})
    for changes, field in (({"n_group": 3}, "layers.n_group"), ({"topk_group": 3}, "layers.topk_group"),
                           ({"swiglu_alpha": 1.702}, "layers.swiglu_alpha")):  # fmt: skip
        with pytest.raises(SpecError) as error:
            layer.with_fields(changes)
        assert error.value.field == field, str(error.value)
    assert isinstance(layer, LayerSpec)


@pytest.mark.fast
def test_a_decoder_of_it_is_described_with_latent_attention_and_a_dense_first_layer() -> None:
    # (refused by name until latent attention was composed into the decoder: tests/decoder/test_decoder.py builds it)
    spec = from_config(TINY, "deepseek")
    kinds = [layer.attention.kind for layer in spec.layers]
    assert kinds == ["latent"] * len(kinds), kinds
    first = TINY.get("first_k_dense_replace", 0)
    assert [layer.ffn.kind for layer in spec.layers[:first]] == ["gated"] * first
    assert all(layer.ffn.router == "grouped" for layer in spec.layers[first:])
