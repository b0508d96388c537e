"""Model presets: every card loads and resolves to the model's published geometry; broken cards are refused."""

from __future__ import annotations

import pytest

from ropeexport.catalog import spec_from_dict
from ropeexport.errors import SpecError
from ropeexport.presets import get_preset, parse_card, presets

pytestmark = pytest.mark.fast  # specs: every preset card resolved and validated

# Published values each card must resolve to (from the sources the cards cite).
EXPECTED = {
    "llama-2-7b": {
        "encoding": "rope",
        "head_dim": 128,
        "num_heads": 32,
        "num_kv_heads": 32,
        "theta": 10000.0,
        "scaling": "default",
        "max_positions": 4096,
        "layout": "half",
    },
    "codellama-7b": {"theta": 1000000.0, "max_positions": 16384, "head_dim": 128},
    "llama-3.1-8b": {"num_kv_heads": 8, "theta": 500000.0, "scaling": "llama3", "max_positions": 131072},
    "mistral-7b": {"num_kv_heads": 8, "head_dim": 128, "num_heads": 32},
    "qwen2.5-7b": {"scaling": "yarn", "num_heads": 28, "num_kv_heads": 4, "head_dim": 128, "max_positions": 131072},
    "phi-3-mini-128k": {"scaling": "longrope", "head_dim": 96, "max_positions": 131072},
    "gpt-neox-20b": {"layout": "half", "head_dim": 96, "rotary_dim": 24, "num_heads": 64, "max_positions": 2048},
    "gpt-j-6b": {"layout": "interleaved", "head_dim": 256, "rotary_dim": 64, "num_heads": 16, "max_positions": 2048},
    "deepseek-v2-lite": {
        "layout": "interleaved",
        "head_dim": 64,
        "num_heads": 16,
        "num_kv_heads": 1,
        "scaling": "yarn",
        "max_positions": 163840,
    },
    "bloom-560m": {"encoding": "alibi", "num_heads": 16, "head_dim": 64, "max_positions": 2048, "slope_scale": 1.0},
    "bloom": {"encoding": "alibi", "num_heads": 112, "head_dim": 128},
    "mpt-7b": {"encoding": "alibi", "num_heads": 32, "head_dim": 128, "max_positions": 2048},
    "falcon-rw-1b": {"encoding": "alibi", "num_heads": 32, "head_dim": 64, "slope_scale": 0.125},
    "t5-base": {"encoding": "t5", "num_heads": 12, "head_dim": 64, "num_buckets": 32, "max_distance": 128},
    "transformer-base": {"encoding": "sinusoidal", "d_model": 512},
    # text decoders of the 2026 multimodal models: M-RoPE chunked and interleaved; Gemma 4's full layers' encoding
    "qwen2.5-vl-7b": {"num_heads": 28, "num_kv_heads": 4, "head_dim": 128, "theta": 1000000.0,
                      "mrope_section": [16, 24, 24], "mrope_interleaved": False, "max_positions": 128000},
    "qwen3-vl-8b": {"num_heads": 32, "num_kv_heads": 8, "head_dim": 128, "theta": 5000000.0,
                    "mrope_section": [24, 20, 20], "mrope_interleaved": True, "max_positions": 262144},
    "gemma-4-31b": {"num_heads": 32, "num_kv_heads": 4, "head_dim": 512, "theta": 1000000.0,
                    "scaling": "proportional", "max_positions": 262144},
    "gemma-4-26b-a4b": {"num_heads": 16, "num_kv_heads": 2, "head_dim": 512, "theta": 1000000.0,
                        "scaling": "proportional", "max_positions": 262144},
    "gemma-4-e2b": {"num_heads": 8, "num_kv_heads": 1, "head_dim": 512, "theta": 1000000.0,
                    "scaling": "proportional", "max_positions": 131072},
    "gemma-4-e4b": {"num_heads": 8, "num_kv_heads": 2, "head_dim": 512, "theta": 1000000.0,
                    "scaling": "proportional", "max_positions": 131072},
    # vision towers' 2-D RoPE: 1024 / 16 patches a side; Qwen's head_dim 1280 / 16
    "pixtral-12b-vision": {"encoding": "vision_rope", "axis_frequencies": "even-odd", "head_dim": 64, "num_heads": 16,
                           "max_positions": 64, "theta": 10000.0},
    "qwen2.5-vl-7b-vision": {"encoding": "vision_rope", "axis_frequencies": "shared", "head_dim": 80, "num_heads": 16},
}


def test_every_issue_preset_ships() -> None:
    assert set(EXPECTED) <= set(presets())


@pytest.mark.parametrize("name", sorted(presets()))
def test_every_card_resolves_to_valid_specs(name: str) -> None:
    preset = get_preset(name)
    requests = preset.requests()
    assert requests and preset.source.strip() and preset.summary.strip()
    for request in requests:
        spec = spec_from_dict(request.fields).to_dict()
        for field, value in EXPECTED.get(name, {}).items():
            assert spec[field] == value, (name, field)
        assert spec["name"].startswith(name)


def test_phi3_card_carries_the_published_factor_lists() -> None:
    spec = spec_from_dict(get_preset("phi-3-mini-128k").requests()[0].fields)
    params = spec.scaling_params
    assert len(params["short_factor"]) == len(params["long_factor"]) == 48
    assert params["original_max_position_embeddings"] == 4096 and params["factor"] == 32.0


def test_deepseek_card_keeps_the_mscale_pair() -> None:
    spec = spec_from_dict(get_preset("deepseek-v2-lite").requests()[0].fields)
    assert spec.scaling_params["factor"] == 40.0 and spec.scaling_params["mscale"] == 0.707
    assert spec.scaling_params["mscale_all_dim"] == 0.707


def test_lists_can_be_replaced() -> None:
    requests = get_preset("llama-2-7b").requests(dtypes=["fp32", "fp16"], graphs=["fused", "decomposed"])
    assert sorted(r.fields["name"] for r in requests) == [
        "llama-2-7b-rope-fp16-decomposed",
        "llama-2-7b-rope-fp16-fused",
        "llama-2-7b-rope-fp32-decomposed",
        "llama-2-7b-rope-fp32-fused",
    ]


CARD = {"name": "x", "summary": "s", "source": "somewhere", "spec": {"encoding": "alibi", "num_heads": 4}}
BAD_CARDS = [
    ({"colour": "red"}, "colour: unknown key"),
    ({"summary": ""}, "summary: must be a non-empty string"),
    ({"config": {"model_type": "bloom", "n_head": 2, "hidden_size": 8}}, "exactly one of [config]"),
    ({"build": {"dtypes": ["fp8"]}}, "build.dtypes: unknown value 'fp8'"),
    ({"build": {"artifacts": ["rope"]}}, "build.artifacts: unknown artifact 'rope'"),
    ({"build": {"graphs": ["plugin"]}}, "build.graphs: unknown graph 'plugin'"),
    ({"build": {"speed": "fast"}}, "build: must be a table"),
    ({"spec": {"encoding": "nope"}}, "unknown encoding"),
]


@pytest.mark.parametrize(("change", "message"), BAD_CARDS, ids=[m.split(":")[0] for _, m in BAD_CARDS])
def test_broken_cards_are_refused_naming_the_key(change: dict, message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_card(CARD | change, "models/x.toml")
    assert message in str(info.value) and str(info.value).startswith("models/x.toml")


# (card, [(layers, (heads, KV heads, head_dim), window, keys as values)], the position input's axes): the decoder each
# new card resolves to, per layer
DECODER_CARDS = [
    ("gemma-4-31b", [(list(range(5, 60, 6)), (32, 4, 512), 0, True),
                     ([i for i in range(60) if i % 6 != 5], (32, 16, 256), 1024, False)], 1),
    ("qwen2.5-vl-7b", [(list(range(28)), (28, 4, 128), 0, False)], 3),
    ("qwen3-vl-8b", [(list(range(36)), (32, 8, 128), 0, False)], 3),
]


@pytest.mark.parametrize(("name", "groups", "axes"), DECODER_CARDS, ids=[c[0] for c in DECODER_CARDS])
def test_a_text_decoder_card_resolves_to_its_layers(name: str, groups: list, axes: int) -> None:
    from ropeexport.decoder.build import DecoderRequest, resolve

    spec, _ = resolve(DecoderRequest(preset=name))
    assert spec.positions.axes == axes  # position_ids [3, batch, seq] (M-RoPE) or [batch, seq]
    for layers, geometry, window, k_eq_v in groups:
        assert {(spec.layers[i].geometry, spec.layers[i].window, spec.layers[i].attention.k_eq_v) for i in layers} == {
            (geometry, window, k_eq_v)}


GEMMA4_CARDS = ["gemma-4-31b", "gemma-4-26b-a4b", "gemma-4-e2b", "gemma-4-e4b"]


@pytest.mark.parametrize("name", GEMMA4_CARDS)
def test_a_gemma4_card_is_read_as_transformers_reads_its_config(name: str) -> None:
    # transformers 5.23's own reading of the card's config: Gemma4TextConfig, and each decoder layer built on the meta
    # device (no weights) with its attention's head_dim, key/value heads, window, values off the keys and sharing, its
    # MLP's width (twice under use_double_wide_mlp on a shared layer) and the mixture beside it
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.gemma4 import configuration_gemma4, modeling_gemma4

    from ropeexport.decoder.build import DecoderRequest, resolve

    fields = {k: v for k, v in (get_preset(name).config or {}).items() if k != "model_type"}
    config = configuration_gemma4.Gemma4TextConfig(**fields)
    spec, _ = resolve(DecoderRequest(preset=name))
    assert (spec.num_layers, spec.hidden_size, spec.vocab_size) == (config.num_hidden_layers, config.hidden_size,
                                                                     config.vocab_size)  # fmt: skip
    assert spec.final_softcap == config.final_logit_softcapping and spec.norm_eps == config.rms_norm_eps
    assert spec.per_layer_input == (config.hidden_size_per_layer_input or 0)
    if spec.per_layer_input:
        assert spec.per_layer_vocab == config.vocab_size_per_layer_input
    for i, layer in enumerate(spec.layers):
        with torch.device("meta"):
            theirs = modeling_gemma4.Gemma4TextDecoderLayer(config, i)
        attention, a = theirs.self_attn, layer.attention
        assert a.head_dim == attention.head_dim and a.num_heads == config.num_attention_heads, i
        assert a.num_kv_heads == config.num_attention_heads // attention.num_key_value_groups, i
        assert layer.window == (attention.sliding_window or 0) and a.k_eq_v == attention.use_alternative_attention, i
        assert (a.kv_from is not None) == attention.is_kv_shared_layer, i
        ffn = layer.ffn
        dense = ffn.shared * ffn.inner if ffn.router == "gemma4" else ffn.inner
        assert dense == theirs.mlp.intermediate_size, i
        assert (ffn.router == "gemma4") == theirs.enable_moe_block, i
        if theirs.enable_moe_block:
            experts = theirs.experts
            assert (ffn.experts, ffn.inner) == (experts.num_experts, experts.intermediate_dim), i
            assert ffn.top_k == theirs.router.config.top_k_experts, i


# The latent-attention model types (multi-head latent attention: the rope slice of one key shared by every head): a
# block built from their encoding would be a plain attention layer, not theirs
LATENT = ["deepseek_v2", "deepseek_v3", "deepseek_v32", "glm4_moe_lite", "glm_moe_dsa", "mistral4",
          "mistral_large4_text"]


@pytest.mark.fast
@pytest.mark.parametrize("model_type", LATENT)
def test_a_latent_attention_model_gets_no_plain_attention_block(model_type: str) -> None:
    from ropeexport.hf import import_config
    from ropeexport.presets import expand

    rope = {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}} if model_type == "mistral4" else {}
    imported = import_config({"model_type": model_type, "hidden_size": 64, "num_attention_heads": 4,
                              "num_key_value_heads": 4, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
                              "max_position_embeddings": 64, "num_hidden_layers": 4, **rope})  # fmt: skip
    assert expand(imported, "m", ["rope"], ["fp32"], ["fused"], {"flags": True})  # its encoding alone builds
    with pytest.raises(SpecError) as error:
        expand(imported, "m", ["block"], ["fp32"], ["fused"], {"flags": True})
    assert error.value.field == "artifact" and model_type in str(error.value), str(error.value)
