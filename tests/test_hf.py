"""Hugging Face config import: one config per family in transformers 4.x and 5.x key styles, checked field by field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ropeexport.catalog import spec_from_dict
from ropeexport.errors import SpecError
from ropeexport.hf import import_config, model_name, read_config

pytestmark = pytest.mark.fast  # specs: transformers configs read field by field, bad keys named

PHI3_SHORT = [1.0 + 0.01 * i for i in range(48)]
PHI3_LONG = [1.0 + 0.5 * i for i in range(48)]
LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}

# (id, config, expected spec fields after validation)
CASES = [
    (
        "llama2-4x-no-scaling",
        {
            "model_type": "llama",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "max_position_embeddings": 4096,
            "rope_theta": 10000.0,
            "rope_scaling": None,
        },
        {
            "encoding": "rope",
            "layout": "half",
            "head_dim": 128,
            "rotary_dim": 128,
            "num_heads": 32,
            "num_kv_heads": 32,
            "theta": 10000.0,
            "scaling": "default",
            "max_positions": 4096,
        },
    ),
    (
        "llama31-4x-rope_type",
        {
            "model_type": "llama",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "rope_scaling": LLAMA3 | {"rope_type": "llama3"},
        },
        {"scaling": "llama3", "scaling_params": LLAMA3, "theta": 500000.0, "num_kv_heads": 8, "max_positions": 131072},
    ),
    (
        "llama31-5x-rope_parameters",
        {
            "model_type": "llama",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "max_position_embeddings": 131072,
            "rope_parameters": LLAMA3 | {"rope_type": "llama3", "rope_theta": 500000.0},
        },
        {"scaling": "llama3", "scaling_params": LLAMA3, "theta": 500000.0, "max_positions": 131072},
    ),
    (
        "mistral-explicit-head_dim",
        {
            "model_type": "mistral",
            "hidden_size": 4096,
            "head_dim": 128,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
        },
        {"head_dim": 128, "num_kv_heads": 8, "theta": 1e6, "scaling": "default", "max_positions": 32768},
    ),
    (
        "qwen2-yarn-4x-type",
        {
            "model_type": "qwen2",
            "hidden_size": 3584,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
            "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"},
        },
        {
            "head_dim": 128,
            "num_heads": 28,
            "num_kv_heads": 4,
            "scaling": "yarn",
            "max_positions": 131072,
            "scaling_params": {
                "factor": 4.0,
                "original_max_position_embeddings": 32768,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale": None,
                "mscale_all_dim": None,
                "attention_factor": None,
                "truncate": True,
            },
        },
    ),
    (
        "phi3-longrope-original-top-level",
        {
            "model_type": "phi3",
            "hidden_size": 3072,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "max_position_embeddings": 131072,
            "original_max_position_embeddings": 4096,
            "rope_theta": 10000.0,
            "rope_scaling": {"type": "longrope", "short_factor": PHI3_SHORT, "long_factor": PHI3_LONG},
        },
        {
            "head_dim": 96,
            "rotary_dim": 96,
            "scaling": "longrope",
            "max_positions": 131072,
            "scaling_params": {
                "short_factor": PHI3_SHORT,
                "long_factor": PHI3_LONG,
                "factor": 32.0,
                "original_max_position_embeddings": 4096,
                "attention_factor": None,
            },
        },
    ),
    (
        "phi3-su-is-longrope",
        {
            "model_type": "phi3",
            "hidden_size": 3072,
            "num_attention_heads": 32,
            "max_position_embeddings": 131072,
            "original_max_position_embeddings": 4096,
            "rope_scaling": {"type": "su", "short_factor": PHI3_SHORT, "long_factor": PHI3_LONG},
        },
        {"scaling": "longrope", "num_kv_heads": 32, "theta": 10000.0},
    ),
    (
        "gpt_neox-rotary_pct",
        {
            "model_type": "gpt_neox",
            "hidden_size": 6144,
            "num_attention_heads": 64,
            "rotary_pct": 0.25,
            "rotary_emb_base": 10000,
            "max_position_embeddings": 2048,
        },
        {
            "layout": "half",
            "head_dim": 96,
            "rotary_dim": 24,
            "num_kv_heads": 64,
            "theta": 10000.0,
            "max_positions": 2048,
        },
    ),
    (
        "partial_rotary_factor-5x-inside-rope_parameters",
        {
            "model_type": "phi",
            "hidden_size": 2560,
            "num_attention_heads": 32,
            "max_position_embeddings": 2048,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.4},
        },
        {"head_dim": 80, "rotary_dim": 32, "scaling": "default"},
    ),
    (
        "gptj-interleaved-rotary_dim",
        {"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64, "n_positions": 2048},
        {"layout": "interleaved", "head_dim": 256, "rotary_dim": 64, "num_heads": 16, "max_positions": 2048},
    ),
    (
        "deepseek_v2-yarn-mscale-shared-key",
        {
            "model_type": "deepseek_v2",
            "hidden_size": 2048,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 128,
            "max_position_embeddings": 163840,
            "rope_theta": 10000,
            "rope_scaling": {
                "beta_fast": 32,
                "beta_slow": 1,
                "factor": 40,
                "mscale": 0.707,
                "mscale_all_dim": 0.707,
                "original_max_position_embeddings": 4096,
                "type": "yarn",
            },
        },
        {
            "layout": "interleaved",
            "head_dim": 64,
            "rotary_dim": 64,
            "num_heads": 16,
            "num_kv_heads": 1,
            "scaling": "yarn",
            "max_positions": 163840,
        },
    ),
    (
        # Mistral Small 4: Mistral4Config's defaults; its partial_rotary_factor a share of nope + rope (its head_dim),
        # which comes to the rope slice: every channel of it rotated; llama_4_scaling_beta read by the architecture
        "mistral4-partial-of-nope-plus-rope",
        {
            "model_type": "mistral4",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 64,
            "head_dim": 128,
            "max_position_embeddings": 1048576,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 128.0,
                                "original_max_position_embeddings": 8192, "beta_fast": 32.0, "beta_slow": 1.0,
                                "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1,
                                "max_position_embeddings": 1048576, "partial_rotary_factor": 0.5},
        },
        {
            "layout": "interleaved",
            "head_dim": 64,
            "rotary_dim": 64,
            "num_heads": 32,
            "num_kv_heads": 1,
            "scaling": "yarn",
            "max_positions": 1048576,
        },
    ),
    (
        # GLM-4.7-Flash: Glm4MoeLiteConfig's widths (attribute_map: head_dim is qk_rope_head_dim); DeepSeek's one
        # shared rope key, interleaved (apply_rotary_pos_emb_interleave), the whole slice rotated
        "glm4_moe_lite-shared-key-interleaved",
        {
            "model_type": "glm4_moe_lite",
            "hidden_size": 2048,
            "num_attention_heads": 20,
            "num_key_value_heads": 20,
            "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 192,
            "max_position_embeddings": 202752,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        },
        {
            "layout": "interleaved",
            "head_dim": 64,
            "rotary_dim": 64,
            "num_heads": 20,
            "num_kv_heads": 1,
            "theta": 1000000.0,
            "scaling": "default",
            "max_positions": 202752,
        },
    ),
    (
        # Mistral Large 4: MistralLarge4TextConfig's YaRN x2048 over 512 with attention_factor 1 (its __post_init__);
        # DeepSeek's one shared rope key, interleaved; its DSA layer types read as full attention
        "mistral_large4_text-shared-key-interleaved-yarn",
        {
            "model_type": "mistral_large4_text",
            "hidden_size": 6144,
            "num_attention_heads": 64,
            "num_key_value_heads": 64,
            "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 64,
            "num_hidden_layers": 2,
            "layer_types": ["indexed_attention"] * 2,
            "max_position_embeddings": 1048576,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2048.0,
                                "original_max_position_embeddings": 512, "beta_fast": 32.0, "beta_slow": 1.0,
                                "attention_factor": 1.0},
        },
        {
            "layout": "interleaved",
            "head_dim": 64,
            "rotary_dim": 64,
            "num_heads": 64,
            "num_kv_heads": 1,
            "theta": 10000.0,
            "scaling": "yarn",
            "max_positions": 1048576,
        },
    ),
    (
        "dynamic-original-is-max_position_embeddings",
        {
            "model_type": "llama",
            "hidden_size": 2048,
            "num_attention_heads": 16,
            "max_position_embeddings": 2048,
            "rope_scaling": {"type": "dynamic", "factor": 2.0},
        },
        {
            "scaling": "dynamic",
            "max_positions": 4096,
            "scaling_params": {"factor": 2.0, "original_max_position_embeddings": 2048},
        },
    ),
    (
        "linear-keeps-max_position_embeddings",
        {
            "model_type": "llama",
            "hidden_size": 2048,
            "num_attention_heads": 16,
            "max_position_embeddings": 8192,
            "rope_scaling": {"type": "linear", "factor": 4.0},
        },
        {"scaling": "linear", "max_positions": 8192, "scaling_params": {"factor": 4.0}},
    ),
    (
        "falcon-7b-rope-multi_query",
        {
            "model_type": "falcon",
            "hidden_size": 4544,
            "num_attention_heads": 71,
            "multi_query": True,
            "alibi": False,
            "new_decoder_architecture": False,
        },
        {"encoding": "rope", "head_dim": 64, "num_heads": 71, "num_kv_heads": 1},
    ),
    (
        "bloom-alibi",
        {"model_type": "bloom", "hidden_size": 1024, "n_head": 16},
        {"encoding": "alibi", "num_heads": 16, "head_dim": 64, "causal": True},
    ),
    (
        "mpt-alibi",
        {
            "model_type": "mpt",
            "d_model": 4096,
            "n_heads": 32,
            "max_seq_len": 2048,
            "attn_config": {"alibi": True, "alibi_bias_max": 8},
        },
        {"encoding": "alibi", "num_heads": 32, "head_dim": 128, "max_positions": 2048},
    ),
    (
        "falcon-rw-alibi",
        {"model_type": "falcon", "hidden_size": 2048, "num_attention_heads": 32, "alibi": True},
        {"encoding": "alibi", "num_heads": 32, "head_dim": 64, "slope_scale": 0.125},
    ),
    (
        "dynamic-ignores-the-dict-original-as-transformers-does",
        {
            "model_type": "llama",
            "hidden_size": 2048,
            "num_attention_heads": 16,
            "max_position_embeddings": 4096,
            "rope_scaling": {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 1024},
        },
        {"scaling_params": {"factor": 2.0, "original_max_position_embeddings": 4096}, "max_positions": 8192},
    ),
    (
        "top-level-original-wins-over-the-dict",
        {
            "model_type": "llama",
            "hidden_size": 2048,
            "num_attention_heads": 16,
            "max_position_embeddings": 65536,
            "original_max_position_embeddings": 8192,
            "rope_scaling": LLAMA3 | {"rope_type": "llama3", "original_max_position_embeddings": 4096},
        },
        {"scaling_params": LLAMA3, "max_positions": 65536},
    ),
    (
        "t5-default-max-distance",
        {
            "model_type": "t5",
            "d_model": 768,
            "d_kv": 64,
            "num_heads": 12,
            "relative_attention_num_buckets": 32,
            "n_positions": 512,
        },
        {
            "encoding": "t5",
            "num_heads": 12,
            "head_dim": 64,
            "num_buckets": 32,
            "max_distance": 128,
            "bidirectional": True,
            "causal": False,
            "max_positions": 512,
        },
    ),
]


CASES += [
    (
        "falcon-7b-resaved-multi_query-wins-over-num_kv_heads",
        {
            "model_type": "falcon",
            "hidden_size": 4544,
            "num_attention_heads": 71,
            "num_kv_heads": 71,
            "multi_query": True,
            "alibi": False,
            "new_decoder_architecture": False,
        },
        {"num_kv_heads": 1},
    ),
    (
        "falcon-40b-new-decoder-uses-num_kv_heads",
        {
            "model_type": "falcon",
            "hidden_size": 8192,
            "num_attention_heads": 128,
            "num_kv_heads": 8,
            "multi_query": True,
            "alibi": False,
            "new_decoder_architecture": True,
        },
        {"num_kv_heads": 8, "head_dim": 64},
    ),
    (
        "cohere-interleaved",
        {
            "model_type": "cohere",
            "hidden_size": 8192,
            "num_attention_heads": 64,
            "num_key_value_heads": 64,
            "rope_theta": 8000000.0,
            "max_position_embeddings": 8192,
        },
        {"layout": "interleaved", "theta": 8e6},
    ),
    (
        "refinedweb-alias-is-falcon-alibi",
        {"model_type": "RefinedWebModel", "hidden_size": 2048, "n_head": 32, "alibi": True},
        {"encoding": "alibi", "num_heads": 32, "slope_scale": 0.125},
    ),
    (
        "qwen2.5-vl-flat-hub-config-is-chunked-mrope",
        {
            "model_type": "qwen2_5_vl",
            "hidden_size": 3584,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "max_position_embeddings": 128000,
            "rope_theta": 1000000.0,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
            "vision_config": {"depth": 32},
        },
        {"head_dim": 128, "theta": 1e6, "scaling": "default", "mrope_section": [16, 24, 24],
         "mrope_interleaved": False},
    ),
    (
        "qwen2-vl-text-config-default-section",
        {"model_type": "qwen2_vl", "text_config": {"hidden_size": 256, "num_attention_heads": 2}},
        {"theta": 1e6, "mrope_section": [16, 24, 24], "mrope_interleaved": False},
    ),
    (
        "qwen3-vl-text-config-is-interleaved-mrope",
        {
            "model_type": "qwen3_vl",
            "text_config": {
                "model_type": "qwen3_vl_text",
                "hidden_size": 4096,
                "head_dim": 128,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "max_position_embeddings": 262144,
                "rope_parameters": {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20],
                                    "mrope_interleaved": True},
            },
        },
        {"theta": 5e6, "mrope_section": [24, 20, 20], "mrope_interleaved": True, "max_positions": 262144},
    ),
    (
        "umt5-is-t5-buckets",
        {
            "model_type": "umt5",
            "d_model": 768,
            "d_kv": 64,
            "num_heads": 12,
            "relative_attention_num_buckets": 32,
            "relative_attention_max_distance": 128,
        },
        {"encoding": "t5", "num_buckets": 32},
    ),
    (
        # Gemma 4's global layers' setting as a flat dict: every channel rotates, a quarter of the pairs real
        "proportional-gemma4-global",
        {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 4, "head_dim": 512,
         "max_position_embeddings": 131072,
         "rope_parameters": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6}},
        {"encoding": "rope", "layout": "half", "head_dim": 512, "rotary_dim": 512, "theta": 1e6,
         "scaling": "proportional", "scaling_params": {"factor": 1.0, "partial_rotary_factor": 0.25}},
    ),
]


@pytest.mark.parametrize(("config", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_config_maps_field_by_field(config: dict, expected: dict) -> None:
    imported = import_config(config)
    spec = spec_from_dict(imported.fields).to_dict()
    for field, value in expected.items():
        assert spec[field] == value, field
    assert set(imported.sources) == set(imported.fields)  # every value says where it came from
    assert all(isinstance(s, str) and s for s in imported.sources.values())


def test_sources_name_the_config_keys() -> None:
    imported = import_config(CASES[1][1])
    assert imported.sources["theta"] == "rope_theta"
    assert imported.sources["num_kv_heads"] == "num_key_value_heads"
    assert imported.sources["head_dim"] == "hidden_size / num_attention_heads"
    assert "rope_scaling.factor" in imported.sources["scaling_params"]
    five = import_config(CASES[2][1])
    assert five.sources["theta"] == "rope_parameters.rope_theta"


BAD = [
    ("no-model_type", {"hidden_size": 64}, "model_type"),
    ("gpt2", {"model_type": "gpt2", "n_embd": 768, "n_head": 12}, "learned absolute"),
    ("heads-do-not-divide", {"model_type": "llama", "hidden_size": 100, "num_attention_heads": 3}, "divisible"),
    ("no-heads", {"model_type": "llama", "hidden_size": 128}, "num_attention_heads"),
    (
        "unknown-rope-type",
        {
            "model_type": "qwen2",
            "hidden_size": 128,
            "num_attention_heads": 2,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        },
        "unsupported scaling type 'mrope'; supported: default, dynamic, linear, llama3, longrope, proportional, su, "
        "yarn",
    ),
    (
        "unknown-scaling-parameter",
        {
            "model_type": "llama",
            "hidden_size": 128,
            "num_attention_heads": 2,
            "max_position_embeddings": 64,
            "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "finetuned_length": 9},
        },
        "finetuned_length",
    ),
    (
        "per-layer-type-rope_parameters",
        {
            "model_type": "llama",
            "hidden_size": 128,
            "num_attention_heads": 2,
            "rope_parameters": {
                "full_attention": {"rope_type": "linear", "factor": 8.0},
                "sliding_attention": {"rope_type": "default"},
            },
        },
        "rope_parameters: holds one setting per layer type (full_attention, sliding_attention) but the config "
        "names no layer_types",
    ),
    (
        "mpt-no-alibi",
        {"model_type": "mpt", "d_model": 128, "n_heads": 2, "attn_config": {"alibi": False}},
        "attn_config.alibi: is false: this MPT uses learned absolute position embeddings",
    ),
    (
        "mpt-other-bias-max",
        {"model_type": "mpt", "d_model": 128, "n_heads": 2, "attn_config": {"alibi": True, "alibi_bias_max": 16}},
        "alibi_bias_max",
    ),
    (
        "partial-over-one",
        {"model_type": "phi", "hidden_size": 128, "num_attention_heads": 2, "partial_rotary_factor": 1.5},
        "partial_rotary_factor",
    ),
    ("heads-not-integer", {"model_type": "llama", "hidden_size": 128, "num_attention_heads": "2"}, "integer"),
    (
        "default-with-parameters",
        {
            "model_type": "llama",
            "hidden_size": 128,
            "num_attention_heads": 2,
            "rope_scaling": {"rope_type": "default", "factor": 2.0},
        },
        "rope_scaling.factor: is not a parameter of the default (unscaled) schedule",
    ),
]


BAD += [
    ("gpt_neo", {"model_type": "gpt_neo", "hidden_size": 768, "num_heads": 12}, "learned absolute"),
    (
        "unknown-model-type-is-not-guessed",
        {"model_type": "baichuan", "hidden_size": 5120, "num_attention_heads": 40},
        "model_type: unknown model type 'baichuan': ropeexport does not guess",
    ),
    (
        "gemma3-local-theta",
        {
            "model_type": "gemma3_text",
            "hidden_size": 128,
            "num_attention_heads": 2,
            "rope_theta": 1e6,
            "rope_local_base_freq": 10000.0,
        },
        "num_hidden_layers: missing: a per-layer setting needs the layer count",
    ),
    (
        "modernbert-global-local-theta",
        {
            "model_type": "modernbert",
            "hidden_size": 768,
            "num_attention_heads": 12,
            "global_rope_theta": 160000.0,
            "local_rope_theta": 10000.0,
        },
        "global_rope_theta: is not supported",
    ),
    (
        "qwen1-dynamic-ntk-flag",
        {"model_type": "qwen", "hidden_size": 128, "num_attention_heads": 2, "use_dynamic_ntk": True},
        "use_dynamic_ntk: is not supported",
    ),
    (
        "rope-type-not-a-string",
        {"model_type": "llama", "hidden_size": 128, "num_attention_heads": 2, "rope_scaling": {"type": ["linear"]}},
        "unsupported scaling type ['linear']",
    ),
    (
        "both-scaling-dicts-differ",
        {
            "model_type": "llama",
            "hidden_size": 128,
            "num_attention_heads": 2,
            "rope_scaling": {"type": "linear", "factor": 2.0},
            "rope_parameters": {"rope_type": "linear", "factor": 4.0},
        },
        "rope_scaling: and rope_parameters are both set and differ",
    ),
    (
        "factor-as-a-string",
        {
            "model_type": "llama",
            "hidden_size": 128,
            "num_attention_heads": 2,
            "rope_scaling": {"type": "linear", "factor": "2"},
        },
        "rope_scaling.factor: must be a number, list or boolean, got the string '2'",
    ),
    (
        "gemma4-rope-per-layer-type-missing",
        {"model_type": "gemma4_text", "hidden_size": 128, "num_attention_heads": 2, "num_hidden_layers": 6,
         "sliding_window": 512},
        "rope_parameters: Gemma 4's RoPE is per layer type (sliding: default, theta 1e4; full: proportional",
    ),
    (
        "proportional-no-real-frequency",
        {"model_type": "llama", "hidden_size": 128, "num_attention_heads": 2,
         "rope_parameters": {"rope_type": "proportional", "partial_rotary_factor": 0.01, "rope_theta": 1e6}},
        "rope_parameters.partial_rotary_factor: 0.01 leaves no real frequency: int(0.01 x head_dim 64 // 2) = 0 pairs",
    ),
    (
        "proportional-share-said-at-the-top",
        {"model_type": "llama", "hidden_size": 128, "num_attention_heads": 2, "partial_rotary_factor": 0.5,
         "rope_parameters": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6}},
        "partial_rotary_factor: is not read by proportional RoPE",
    ),
    (
        "mrope-section-not-the-rotated-half",
        {"model_type": "qwen2_5_vl", "hidden_size": 256, "num_attention_heads": 2,
         "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 20]}},
        "rope_scaling.mrope_section: [16, 24, 20] sums to 60, not the 64 frequency pairs",
    ),
    (
        "chunked-type-said-interleaved",
        {"model_type": "qwen2_vl", "hidden_size": 256, "num_attention_heads": 2,
         "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24], "mrope_interleaved": True}},
        "rope_scaling.mrope_interleaved: is true, but transformers' qwen2_vl_text recomposes contiguous",
    ),
    (
        "interleaved-type-said-chunked",
        {"model_type": "qwen3_vl", "text_config": {"hidden_size": 256, "num_attention_heads": 2, "rope_parameters": {
            "rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": False}}},
        "rope_parameters.mrope_interleaved: is false, but transformers' qwen3_vl_text interleaves",
    ),
    (
        "mrope-section-on-a-one-axis-type",
        {"model_type": "qwen3", "hidden_size": 256, "num_attention_heads": 2,
         "rope_parameters": {"rope_type": "default", "mrope_section": [16, 24, 24]}},
        "rope_parameters.mrope_section: is not a parameter of the default (unscaled) schedule",
    ),
    (
        "absurd-length",
        {"model_type": "llama", "hidden_size": 128, "num_attention_heads": 2, "max_position_embeddings": 1e300},
        "max_position_embeddings: must be between 1 and 2^40, got 1e+300",
    ),
]


@pytest.mark.parametrize(("config", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_configs_name_the_key(config: dict, message: str) -> None:
    with pytest.raises(SpecError) as info:
        spec_from_dict(import_config(config).fields)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_read_config_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read"):
        read_config(tmp_path / "missing.json")
    (tmp_path / "a.json").write_text("[1, 2]")
    with pytest.raises(SpecError, match="not a transformers config"):
        read_config(tmp_path / "a.json")
    (tmp_path / "b.json").write_text("{oops")
    with pytest.raises(SpecError, match="not valid JSON"):
        read_config(tmp_path / "b.json")


def test_model_name_prefers_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "Qwen2.5-7B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    assert model_name({"model_type": "qwen2"}, folder / "config.json") == "qwen2.5-7b"
    cache = tmp_path / "models--Qwen--Qwen2.5-7B-Instruct" / "snapshots" / ("a0" * 20) / "config.json"
    assert model_name({"model_type": "qwen2"}, cache) == "qwen2.5-7b-instruct"
    assert model_name({"model_type": "llama"}, tmp_path / "configs" / "tiny-llama.json") == "tiny-llama"
    assert model_name({"model_type": "qwen2", "_name_or_path": "Qwen/Qwen2.5 7B"}) == "qwen2.5-7b"
    assert model_name({"model_type": "qwen2"}) == "qwen2"
