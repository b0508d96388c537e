"""Per-layer config import (``hf.import_layers``): the configs transformers 5.23 writes for the 2026 families, the
4.x key styles, YaRN's ``truncate`` against transformers' own formula, and bad per-layer keys.

Configs come from ``AutoConfig.for_model(...).to_dict()`` (what ``save_pretrained`` writes), changed per case.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ropeexport.errors import SpecError
from ropeexport.families.rope.schedules import get_schedule
from ropeexport.hf import describe, import_config, import_layers, spans

pytestmark = pytest.mark.fast  # specs: per-layer encodings read from configs

transformers = pytest.importorskip("transformers")


def config(model_type: str, **changes: Any) -> dict[str, Any]:
    """The config transformers writes for ``model_type`` with ``changes`` (None removes a key)."""
    count = {"num_hidden_layers": changes.pop("num_hidden_layers")} if "num_hidden_layers" in changes else {}
    out = transformers.AutoConfig.for_model(model_type, **count).to_dict()  # its per-layer lists that long
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def gemma3_4x(**changes: Any) -> dict[str, Any]:
    """A Gemma 3 config as transformers 4.5x wrote it: rope_local_base_freq and sliding_window_pattern."""
    keys = {"rope_parameters": None, "layer_types": None, "rope_theta": 1e6, "rope_local_base_freq": 1e4,
            "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "sliding_window_pattern": 6}  # fmt: skip
    return config("gemma3_text", **(keys | changes))


def olmo3_4x() -> dict[str, Any]:
    """An OLMo 3 config with 4.x keys: rope_theta and a flat rope_scaling (transformers gives them the full layers)."""
    return config("olmo3", num_hidden_layers=4, max_position_embeddings=256, rope_parameters=None, rope_theta=1e4,
                  rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})


NESTED = {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
          "full_attention": {"rope_type": "default", "rope_theta": 1e6}}  # fmt: skip
OLMO3_YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192, "rope_theta": 5e5}
SLIDING_26 = "0-4, 6-10, 12-16, 18-22, 24-25"
# (id, config, [(layer types, layers, encoding in words)], no-RoPE layers, window)
FAMILIES = [
    ("gemma3-5x", lambda: config("gemma3_text"),
     [("sliding_attention", SLIDING_26, "theta 10000, unscaled"), ("full_attention", "5, 11, 17, 23",
                                                                   "theta 1e+06, unscaled")], "", 4096),
    ("gemma3-5x-linear8", lambda: config("gemma3_text", rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}),
     [("sliding_attention", SLIDING_26, "theta 10000, unscaled"),
      ("full_attention", "5, 11, 17, 23", "theta 1e+06 with linear x8")], "", 4096),
    ("gemma3-4x-keys", gemma3_4x,
     [("sliding_attention", SLIDING_26, "theta 10000, unscaled"),
      ("full_attention", "5, 11, 17, 23", "theta 1e+06 with linear x8")], "", 4096),
    ("gemma3-wrapper", lambda: {"model_type": "gemma3", "text_config": config("gemma3_text", num_hidden_layers=7)},
     [("sliding_attention", "0-4, 6", "theta 10000, unscaled"), ("full_attention", "5", "theta 1e+06, unscaled")],
     "", 4096),
    ("gemma2-alternating-one-encoding", lambda: config("gemma2", num_hidden_layers=4),
     [("sliding_attention/full_attention", "0-3", "theta 10000, unscaled")], "", 4096),
    ("smollm3-nope-every-4th", lambda: config("smollm3", num_hidden_layers=8),
     [("full_attention", "0-2, 4-6", "theta 2e+06, unscaled")], "3, 7", 0),
    ("smollm3-interval-default", lambda: config("smollm3", num_hidden_layers=8, no_rope_layers=None),
     [("full_attention", "0-2, 4-6", "theta 2e+06, unscaled")], "3, 7", 0),
    ("smollm3-default-theta", lambda: config("smollm3", num_hidden_layers=4, rope_parameters=None),
     [("full_attention", "0-2", "theta 2e+06, unscaled")], "3", 0),
    ("gemma3-4x-default-thetas", lambda: gemma3_4x(rope_theta=None, rope_local_base_freq=None, rope_scaling=None,
                                                   num_hidden_layers=6),
     [("sliding_attention", "0-4", "theta 10000, unscaled"), ("full_attention", "5", "theta 1e+06, unscaled")], "",
     4096),
    ("gpt-oss-yarn-untruncated", lambda: config("gpt_oss", num_hidden_layers=4),
     [("sliding_attention/full_attention", "0-3", "theta 150000 with yarn x32 (untruncated)")], "", 128),
    # Cohere 2: RoPE on the sliding layers only (every 4th layer global, without RoPE), its interleaved pairs
    ("cohere2-rope-on-sliding-only", lambda: config("cohere2", num_hidden_layers=8),
     [("sliding_attention", "0-2, 4-6", "theta 10000, unscaled")], "3, 7", 4096),
    ("cohere2-pattern-without-layer-types", lambda: config("cohere2", num_hidden_layers=6, layer_types=None,
                                                           sliding_window_pattern=3),
     [("sliding_attention", "0-1, 3-4", "theta 10000, unscaled")], "2, 5", 4096),
    # GLM-4: half of each head rotated (its config class's partial_rotary_factor 0.5, written or not), pairs
    ("glm4-partial-half", lambda: config("glm4", num_hidden_layers=2),
     [("full_attention", "0-1", "theta 10000, unscaled, 64 of 128 channels rotated")], "", 0),
    ("glm4-partial-default", lambda: config("glm4", num_hidden_layers=2, rope_parameters={"rope_type": "default",
                                                                                          "rope_theta": 1e4}),
     [("full_attention", "0-1", "theta 10000, unscaled, 64 of 128 channels rotated")], "", 0),
    # EXAONE 4 ("LLLG"): RoPE on the local layers only; without a sliding_window every layer is global and rotates
    ("exaone4-lllg", lambda: config("exaone4", num_hidden_layers=8),
     [("sliding_attention", "0-2, 4-6", "theta 10000, unscaled")], "3, 7", 4096),
    ("exaone4-no-window-every-layer-rotates", lambda: config("exaone4", num_hidden_layers=4, sliding_window=None,
                                                             layer_types=["full_attention"] * 4),
     [("full_attention", "0-3", "theta 10000, unscaled")], "", 0),
    # OLMo 3: every 4th layer full; YaRN on the full layers only, the sliding ones unscaled
    ("olmo3-default", lambda: config("olmo3", num_hidden_layers=4),
     [("sliding_attention/full_attention", "0-3", "theta 500000, unscaled")], "", 4096),
    ("olmo3-5x-yarn-on-full", lambda: config("olmo3", num_hidden_layers=8, max_position_embeddings=65536,
                                             rope_parameters={"sliding_attention": NESTED["sliding_attention"],
                                                              "full_attention": OLMO3_YARN}),
     [("sliding_attention", "0-2, 4-6", "theta 10000, unscaled"),
      ("full_attention", "3, 7", "theta 500000 with yarn x8")], "", 4096),
    ("olmo3-4x-rope-scaling-on-full-only", lambda: olmo3_4x(),
     [("sliding_attention", "0-2", "theta 500000, unscaled"), ("full_attention", "3", "theta 10000 with yarn x4")],
     "", 4096),
    ("qwen3-uniform", lambda: config("qwen3", num_hidden_layers=3),
     [("full_attention", "0-2", "theta 10000, unscaled")], "", 0),
    ("phi4-mini-partial-longrope", lambda: config("phi3", num_hidden_layers=2, hidden_size=3072, num_attention_heads=24,
                                                  partial_rotary_factor=0.75, max_position_embeddings=131072,
                                                  original_max_position_embeddings=4096, rope_parameters={
                                                      "rope_type": "longrope", "rope_theta": 10000.0,
                                                      "short_factor": [1.0] * 48, "long_factor": [2.0] * 48}),
     [("full_attention", "0-1", "theta 10000 with longrope x32, 96 of 128 channels rotated")], "", 0),
    # The hybrids of 2026 (issue 41 item 6): their layers without attention carry no encoding, read as such
    ("qwen3_5-linear-attention-quarter-rotated", lambda: config("qwen3_5_text", num_hidden_layers=8),
     [("full_attention", "3, 7", "theta 10000, unscaled, 64 of 256 channels rotated")], "0-2, 4-6", 0),
    ("qwen3_5-interval-and-mrope-keys", lambda: config("qwen3_5_text", num_hidden_layers=4, layer_types=None,
                                                      full_attention_interval=2, rope_parameters={
                                                          "rope_type": "default", "rope_theta": 1e7,
                                                          "mrope_section": [11, 11, 10], "mrope_interleaved": True}),
     [("full_attention", "1, 3", "theta 1e+07, unscaled, 64 of 256 channels rotated")], "0, 2", 0),
    ("granite4-mamba-layers", lambda: config("granitemoehybrid", num_hidden_layers=4, position_embedding_type="rope",
                                             layer_types=["linear_attention", "full_attention"] * 2),
     [("full_attention", "1, 3", "theta 10000, unscaled")], "0, 2", 0),
    ("lfm2-conv-layers", lambda: config("lfm2", num_hidden_layers=4, layer_types=["conv", "full_attention"] * 2),
     [("full_attention", "1, 3", "theta 1e+06, unscaled")], "0, 2", 0),
    ("lfm2-full-attn-idxs", lambda: config("lfm2", num_hidden_layers=5, layer_types=None, full_attn_idxs=[2, 4]),
     [("full_attention", "2, 4", "theta 1e+06, unscaled")], "0-1, 3", 0),
    # Ministral 3: YaRN x16 over 16384 (its config class's setting), the query scale's keys beside it unread here
    ("ministral3-yarn", lambda: config("ministral3", num_hidden_layers=2),
     [("full_attention", "0-1", "theta 1e+06 with yarn x16")], "", 0),
    ("mistral3-wrapper", lambda: {"model_type": "mistral3", "text_config": config("ministral3", num_hidden_layers=2)},
     [("full_attention", "0-1", "theta 1e+06 with yarn x16")], "", 0),
    ("mistral3-wrapper-of-mistral", lambda: {"model_type": "mistral3", "text_config": {
        k: v for k, v in config("mistral", num_hidden_layers=2, sliding_window=None).items() if k != "model_type"}},
     [("full_attention", "0-1", "theta 10000, unscaled")], "", 0),
    ("gemma3n-two-encodings", lambda: config("gemma3n_text", num_hidden_layers=10),
     [("sliding_attention", "0-3, 5-8", "theta 10000, unscaled"), ("full_attention", "4, 9",
                                                                    "theta 1e+06, unscaled")], "", 512),
    # their multimodal wrappers, read through text_config (issue 41: the transformers truth of their checkpoints)
    ("qwen3_5-wrapper", lambda: {"model_type": "qwen3_5", "text_config": config("qwen3_5_text", num_hidden_layers=8),
                                 "vision_config": {}},
     [("full_attention", "3, 7", "theta 10000, unscaled, 64 of 256 channels rotated")], "0-2, 4-6", 0),
    ("gemma3n-wrapper", lambda: {"model_type": "gemma3n", "text_config": config("gemma3n_text", num_hidden_layers=10),
                                 "vision_config": {}, "audio_config": {}},
     [("sliding_attention", "0-3, 5-8", "theta 10000, unscaled"), ("full_attention", "4, 9",
                                                                    "theta 1e+06, unscaled")], "", 512),
    # Gemma 4 text: every 6th layer full with proportional RoPE (its own head_dim: test_gemma4_full_layers_own_geometry)
    ("gemma4-5x", lambda: config("gemma4_text"),
     [("sliding_attention", "0-4, 6-10, 12-16, 18-22, 24-28", "theta 10000, unscaled"),
      ("full_attention", "5, 11, 17, 23, 29", "theta 1e+06 with proportional")], "", 512),
    ("gemma4-wrapper", lambda: {"model_type": "gemma4", "text_config": config("gemma4_text", num_hidden_layers=6),
                                "vision_config": {}, "audio_config": {}},
     [("sliding_attention", "0-4", "theta 10000, unscaled"), ("full_attention", "5", "theta 1e+06 with proportional")],
     "", 512),
]  # fmt: skip
# Gemma 4's full layers' geometry (id, config, (head_dim, its source), (key/value heads, its source)): as transformers
# 5.23 saves it (per_layer_config, indices zero-padded), as the hub's configs say it (global_head_dim, and
# num_global_key_value_heads read only under attention_k_eq_v), and the class's default 512.
GEMMA4_GEOMETRY = [
    ("saved-per-layer-config", lambda: config("gemma4_text", num_hidden_layers=12),
     (512, "per_layer_config (the full layers')"), (4, "num_key_value_heads")),
    ("global-head-dim-k-eq-v", lambda: config("gemma4_text", num_hidden_layers=6, per_layer_config=None,
                                              global_head_dim=128, attention_k_eq_v=True,
                                              num_global_key_value_heads=1),
     (128, "global_head_dim"), (1, "num_global_key_value_heads")),
    ("global-kv-unread-without-k-eq-v", lambda: config("gemma4_text", num_hidden_layers=6, per_layer_config=None,
                                                       num_global_key_value_heads=1),
     (512, "transformers' default global_head_dim 512"), (4, "num_key_value_heads")),
]  # fmt: skip


@pytest.mark.parametrize(("make", "head_dim", "kv"), [g[1:] for g in GEMMA4_GEOMETRY],
                         ids=[g[0] for g in GEMMA4_GEOMETRY])
def test_gemma4_full_layers_own_geometry(make: Any, head_dim: tuple[int, str], kv: tuple[int, str]) -> None:
    layers = import_layers(make())
    full, sliding = layers.encodings["full_attention"], layers.encodings["sliding_attention"]
    assert (full.fields["head_dim"], full.sources["head_dim"]) == head_dim
    assert (full.fields["num_kv_heads"], full.sources["num_kv_heads"]) == kv
    assert (sliding.fields["head_dim"], sliding.fields["num_kv_heads"]) == (256, 4)  # the sliding layers' own


@pytest.mark.parametrize(("make", "groups", "nope", "window"), [f[1:] for f in FAMILIES], ids=[f[0] for f in FAMILIES])
def test_each_layer_gets_its_types_encoding(make: Any, groups: list[tuple[str, str, str]], nope: str,
                                            window: int) -> None:  # fmt: skip
    layers = import_layers(make(), "config.json")
    got = [("/".join(kinds), spans(indices), describe(imported)) for imported, kinds, indices in layers.groups()]
    assert got == groups
    assert spans(layers.unrotated()) == nope and layers.window == window
    if len(groups) == 1:  # one encoding: the single-spec import reads it too
        assert import_config(make(), "config.json").fields == layers.groups()[0][0].fields
    else:
        with pytest.raises(SpecError, match="the layer types use different encodings"):
            import_config(make(), "config.json")


def test_4x_and_5x_gemma3_keys_import_the_same_encodings() -> None:
    old, new = import_layers(gemma3_4x()), import_layers(config("gemma3_text", rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}))  # fmt: skip
    assert old.types == new.types
    assert {k: v.fields for k, v in old.encodings.items()} == {k: v.fields for k, v in new.encodings.items()}
    assert old.encodings["sliding_attention"].sources["theta"] == "rope_local_base_freq"
    assert new.encodings["full_attention"].sources["theta"] == "rope_parameters.full_attention.rope_theta"


def test_olmo3s_4x_keys_import_as_transformers_converts_them() -> None:
    # transformers' own conversion of the same keys (the nested dict its config writes): the sliding layers at its
    # default theta 500000, unscaled; the full ones at the config's theta with its YaRN
    raw = olmo3_4x()
    converted = transformers.AutoConfig.for_model("olmo3", **{k: v for k, v in raw.items() if k != "model_type"})
    old, new = import_layers(raw), import_layers(converted.to_dict())
    assert old.types == new.types
    assert {k: v.fields for k, v in old.encodings.items()} == {k: v.fields for k, v in new.encodings.items()}
    assert "default rope_theta 500000" in old.encodings["sliding_attention"].sources["theta"]


# (id, config, the words the one-line error must hold: the key, then what is allowed or wrong)
BAD = [
    ("layer-types-too-short", lambda: config("gemma3_text", num_hidden_layers=4, layer_types=["full_attention"] * 3),
     "layer_types: holds 3 entries, the model has 4 layers"),
    ("unknown-layer-type", lambda: config("gemma3_text", num_hidden_layers=2,
                                          layer_types=["full_attention", "local_attention"]),
     "layer_types[1]: unknown layer type 'local_attention'; allowed: full_attention, sliding_attention"),
    ("chunked-attention", lambda: config("qwen3", num_hidden_layers=2,
                                         layer_types=["chunked_attention", "full_attention"]),
     "layer_types[0]: 'chunked_attention' is not built: Llama 4's chunked attention"),
    ("layer-types-not-a-list", lambda: config("qwen3", layer_types="full_attention"),
     "layer_types: must be a list with one entry per layer"),
    ("nested-missing-a-type", lambda: config("gemma3_text", num_hidden_layers=6,
                                             rope_parameters={"sliding_attention": NESTED["sliding_attention"]}),
     "rope_parameters.full_attention: missing: layer 5 is a full_attention layer"),
    ("nested-unknown-type", lambda: config("gemma3_text", rope_parameters=NESTED | {"global": {"rope_theta": 1.0}}),
     "rope_parameters.global: is not a layer type; allowed: full_attention, sliding_attention"),
    ("4x-5x-local-theta-disagree", lambda: config("gemma3_text", rope_parameters=NESTED, rope_local_base_freq=5e4),
     "rope_local_base_freq: (50000.0) contradicts rope_parameters.sliding_attention.rope_theta (10000.0)"),
    ("4x-5x-global-theta-disagree", lambda: config("gemma3_text", rope_parameters=NESTED, rope_theta=5e5),
     "rope_theta: (500000.0) contradicts rope_parameters.full_attention.rope_theta (1000000.0)"),
    ("4x-5x-scaling-disagree", lambda: config("gemma3_text", rope_parameters=NESTED,
                                              rope_scaling={"rope_type": "linear", "factor": 8.0}),
     "rope_scaling: and rope_parameters (nested by layer type) are both set and differ"),
    ("no-rope-layers-wrong-length", lambda: config("smollm3", num_hidden_layers=4, no_rope_layers=[1, 1, 0]),
     "no_rope_layers: holds 3 entries, the model has 4 layers"),
    ("no-rope-layers-not-a-flag", lambda: config("smollm3", num_hidden_layers=2, no_rope_layers=[1, 2]),
     "no_rope_layers[1]: must be 1 (the layer uses RoPE) or 0 (it does not), got 2"),
    ("no-layer-has-rope", lambda: config("smollm3", num_hidden_layers=2, no_rope_layers=[0, 0]),
     "no_rope_layers: leaves no layer with RoPE"),
    ("sliding-without-window", lambda: config("gemma3_text", sliding_window=None),
     "sliding_window: missing: layer_types has sliding layers"),
    ("local-theta-outside-gemma3", lambda: config("qwen3", rope_local_base_freq=1e4),
     "rope_local_base_freq: is Gemma 3's sliding-layer theta; not read for 'qwen3'"),
    ("smollm3-windows-said-both-ways", lambda: config("smollm3", num_hidden_layers=2, sliding_window=64,
                                                      use_sliding_window=False, no_rope_layers=[1, 1],
                                                      layer_types=["sliding_attention", "full_attention"]),
     "use_sliding_window: is false while layer_types has sliding layers (sliding_window 64)"),
    ("gpt-oss-without-its-yarn", lambda: config("gpt_oss", num_hidden_layers=2, rope_parameters=None),
     "rope_parameters: missing: gpt_oss's transformers config fills in YaRN x32"),
    ("max-window-layers-negative", lambda: config("qwen2", num_hidden_layers=2, layer_types=None,
                                                  use_sliding_window=True, sliding_window=4, max_window_layers=-1),
     "max_window_layers: must be a layer count >= 0, got -1"),
    ("llama4-layer-type-unknown", lambda: config("llama4_text", num_hidden_layers=2,
                                                 layer_types=["chunked_attention", "local_attention"]),
     "layer_types[1]: unknown layer type 'local_attention'; allowed: full_attention, sliding_attention, "
     "chunked_attention"),
    ("llama-layer-types-not-imported", lambda: config("llama", num_hidden_layers=2,
                                                      layer_types=["sliding_attention", "full_attention"]),
     "layer_types: not imported for 'llama' (ropeexport reads layer types for cohere2"),
    ("cohere2-head-dim-not-its-own", lambda: config("cohere2", num_hidden_layers=4, head_dim=64),
     "head_dim: (64) is not hidden_size / num_attention_heads (128): transformers' cohere2 config sets head_dim"),
    ("cohere2-no-rope-layers-not-imported", lambda: config("cohere2", num_hidden_layers=4, no_rope_layers=[1, 0, 1, 1]),
     "no_rope_layers: not imported for 'cohere2' (ropeexport reads no-RoPE layers for llama4_text, "
     "mistral_large4_text, smollm3)"),
    ("llama-no-rope-layers-not-imported", lambda: config("llama", num_hidden_layers=2, no_rope_layers=[1, 0]),
     "no_rope_layers: not imported for 'llama' (ropeexport reads no-RoPE layers for llama4_text, "
     "mistral_large4_text, smollm3)"),
    ("glm4-partial-said-two-ways", lambda: config("glm4", num_hidden_layers=2, partial_rotary_factor=0.25),
     "partial_rotary_factor: (0.25) contradicts rope_parameters.partial_rotary_factor (0.5): 4.x and 5.x keys"),
    ("exaone4-pattern-a-string", lambda: config("exaone4", num_hidden_layers=4, layer_types=None,
                                                sliding_window_pattern="LLLG"),
     "sliding_window_pattern: must be an integer, got 'LLLG'"),
    ("olmo3-flat-rope-parameters", lambda: config("olmo3", num_hidden_layers=4, rope_parameters={
        "rope_type": "default", "rope_theta": 1e4}),
     "rope_parameters: is one flat setting; transformers' olmo3 reads rope_parameters nested by layer type"),
    ("ministral3-without-rope-parameters", lambda: config("ministral3", num_hidden_layers=2, rope_parameters=None),
     "rope_parameters: missing: transformers' ministral3 config fills in YaRN x16"),
    ("mistral3-text-of-another-type", lambda: {"model_type": "mistral3", "text_config": config("qwen3")},
     "text_config.model_type: must be one of 'mistral', 'ministral3', 'mistral4' in a mistral3 config, got 'qwen3'"),
    ("wrapper-text-config-missing", lambda: {"model_type": "gemma3", "vision_config": {}},
     "text_config: must be the text model's config (an object) in a gemma3 config"),
    ("gemma4-per-layer-config-differs", lambda: config("gemma4_text", num_hidden_layers=12, per_layer_config={
        "05": {"head_dim": 512}, "11": {"head_dim": 256}}),
     "per_layer_config.11: ({'head_dim': 256}) differs from the other full layers' ({'head_dim': 512})"),
    ("gemma4-per-layer-config-other-key", lambda: config("gemma4_text", num_hidden_layers=6, per_layer_config={
        "5": {"sliding_window": 3}}), "per_layer_config.5: may set head_dim and num_key_value_heads only"),
    ("gemma4-per-layer-config-index-twice", lambda: config("gemma4_text", num_hidden_layers=6, per_layer_config={
        "5": {"head_dim": 512}, "05": {"head_dim": 512}}), "per_layer_config.05: is not a layer index (0..5) named"),
    ("gemma4-without-rope-parameters", lambda: config("gemma4_text", num_hidden_layers=6, rope_parameters=None),
     "rope_parameters: Gemma 4's RoPE is per layer type"),
    ("granite4-without-rope", lambda: config("granitemoehybrid", num_hidden_layers=2, position_embedding_type=None),
     "position_embedding_type: is None: this granitemoehybrid model has no positional encoding"),
    ("conv-layers-outside-lfm2", lambda: config("qwen3", num_hidden_layers=2, layer_types=["conv", "full_attention"]),
     "layer_types[0]: 'conv' is not built: convolution layers (LFM2)"),
    ("linear-attention-outside-its-hybrids", lambda: config("qwen3", num_hidden_layers=2,
                                                            layer_types=["linear_attention", "full_attention"]),
     "layer_types[0]: 'linear_attention' is not built"),
    ("lfm2-attention-index-out-of-range", lambda: config("lfm2", num_hidden_layers=2, layer_types=None,
                                                         full_attn_idxs=[0, 5]),
     "full_attn_idxs: must list layer indices in 0..1, got [0, 5]"),
    ("gemma3n-theta-of-one-type-missing", lambda: config("gemma3n_text", num_hidden_layers=5, rope_parameters={
        "sliding_attention": {"rope_type": "default"}, "full_attention": {"rope_type": "default", "rope_theta": 1e6}}),
     "rope_parameters: Gemma 3n's thetas default per layer type"),
]  # fmt: skip


@pytest.mark.parametrize(("make", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_per_layer_keys_name_the_key(make: Any, words: str) -> None:
    with pytest.raises(SpecError) as info:
        import_config(make(), "config.json")
    message = str(info.value)
    assert words in message and "\n" not in message, message


# YaRN as transformers computes it (its own rope-init function on the config it built), both truncate settings.
YARNS = [
    ("gpt-oss-untruncated", lambda: config("gpt_oss", num_hidden_layers=2)),
    ("gpt-oss-truncated", lambda: config("gpt_oss", num_hidden_layers=2, rope_parameters=config("gpt_oss")[
        "rope_parameters"] | {"truncate": True})),
    ("qwen3-yarn-x4", lambda: config("qwen3", num_hidden_layers=2, rope_parameters={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "rope_theta": 1e6})),
    ("deepseek-style-mscale", lambda: config("qwen3", num_hidden_layers=2, rope_parameters={
        "rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "rope_theta": 1e4,
        "mscale": 0.707, "mscale_all_dim": 0.707, "beta_fast": 32.0, "beta_slow": 1.0})),
    ("attention-factor-given", lambda: config("qwen3", num_hidden_layers=2, rope_parameters={
        "rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096, "rope_theta": 5e5,
        "attention_factor": 1.25, "truncate": False})),
]  # fmt: skip


@pytest.mark.parametrize("make", [y[1] for y in YARNS], ids=[y[0] for y in YARNS])
def test_yarn_matches_transformers_own_formula(make: Any) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    raw = make()
    hf = transformers.AutoConfig.for_model(raw["model_type"], **{k: v for k, v in raw.items() if k != "model_type"})
    inv_freq, attention = ROPE_INIT_FUNCTIONS["yarn"](hf, "cpu")
    fields = import_config(raw, "config.json").fields
    d = fields["rotary_dim"] or fields["head_dim"]
    schedule = get_schedule("yarn")
    params = schedule.resolve(fields["scaling_params"], d, fields["max_positions"])
    ours = schedule.frequencies(d, fields["theta"], params, 1)
    # transformers computes in float32 (a few ulps of chained pow and blend): ours in float64 within 2e-6 of it,
    # while the other truncate setting lands orders of magnitude further off (so the flag is what is tested).
    theirs = inv_freq.numpy().astype(np.float64)
    np.testing.assert_allclose(ours.inv_freq, theirs, rtol=2e-6, atol=0)
    assert ours.attention_factor == pytest.approx(attention, rel=1e-12)
    flipped = schedule.frequencies(d, fields["theta"], params | {"truncate": not params["truncate"]}, 1)
    assert np.max(np.abs(flipped.inv_freq / theirs - 1)) > 1e-3


@pytest.mark.parametrize("wrapped", [False, True], ids=["gemma3_text", "gemma3-wrapper"])
def test_a_tiny_model_of_a_per_layer_config_keeps_its_first_layers(wrapped: bool) -> None:
    from ropeexport.decoder.config import from_config, shrink

    text = config("gemma3_text", num_hidden_layers=12)
    raw = {"model_type": "gemma3", "text_config": text} if wrapped else text
    small = shrink(raw, num_layers=7, hidden_size=512, vocab_size=256)
    spec = from_config(small, "tiny")
    assert spec.num_layers == 7 and spec.text_of == ("gemma3" if wrapped else "")
    kinds = ["sliding" if layer.window else "full" for layer in spec.layers]
    assert kinds == ["sliding"] * 5 + ["full", "sliding"]  # the first 7 of the 12-layer pattern
    assert [spec.layer_position_spec(i).theta for i in (0, 5)] == [1e4, 1e6]


def test_a_one_layer_model_keeps_its_layers_window() -> None:
    from ropeexport.decoder.config import from_config, shrink

    spec = from_config(shrink(config("gemma3_text"), num_layers=1, hidden_size=512, vocab_size=256), "tiny")
    assert spec.layers[0].attention.mask == "sliding" and spec.layers[0].window == 4096
    assert spec.layer_position_spec(0).theta == 1e4


@pytest.mark.parametrize(("hidden", "inner", "moe"), [(512, 384, 128), (1024, 768, 256)])
def test_a_tiny_model_of_gemma4_26b_keeps_its_mlp_a_whole_number_of_experts_wide(hidden: int, inner: int,
                                                                                  moe: int) -> None:  # fmt: skip
    # the 26B-A4B card's MLP is 3 experts wide (2112 = 3 x 704): shrunk apart, the two widths would round apart and the
    # decoder refuse the config (its MLP is written as n_shared_experts x moe_intermediate_size)
    from ropeexport.decoder.config import from_config, shrink
    from ropeexport.presets import get_preset

    small = shrink(dict(get_preset("gemma-4-26b-a4b").config or {}), num_layers=6, hidden_size=hidden)
    assert (small["intermediate_size"], small["moe_intermediate_size"]) == (inner, moe)
    ffn = from_config(small, "tiny").layers[0].ffn
    assert (ffn.router, ffn.inner, ffn.shared, ffn.experts) == ("gemma4", moe, 3, 128)


@pytest.mark.parametrize("card", ["gemma-4-e2b", "gemma-4-e4b"])
def test_a_tiny_model_of_gemma4_e2b_e4b_shrinks_its_per_layer_table(card: str) -> None:
    # the per-layer input embeddings' table has a row per token id (262144 in the cards): a smaller vocabulary shrinks
    # it too, or a tiny model would hold 262144 x layers x 256 values (2.7 GB at 10 layers, in fp32)
    from ropeexport.decoder.config import from_config, shrink
    from ropeexport.presets import get_preset

    small = shrink(dict(get_preset(card).config or {}), hidden_size=512, vocab_size=512)
    spec = from_config(small, "tiny")
    assert (spec.vocab_size, spec.per_layer_vocab, spec.per_layer_input) == (512, 512, 256)


# (card, layers kept (a Gemma 4 ends on a full layer), its num_kv_shared_layers then): the card's share (E2B 20 of 35,
# E4B 18 of 42) rounded, then the most at or below it whose first layers hold a full one (transformers raises
# otherwise): E2B's 10 layers 6 -> 5, its 15 layers 9 (as scaled), its 5 layers none (their one full layer is the last)
SHARED = [("gemma-4-e2b", 10, 5), ("gemma-4-e4b", 12, 5), ("gemma-4-e2b", 15, 9), ("gemma-4-e2b", 5, 0),
          ("gemma-4-31b", 6, 0)]  # fmt: skip


@pytest.mark.parametrize(("card", "layers", "shared"), SHARED, ids=[f"{c}-{n}" for c, n, _ in SHARED])
def test_a_tiny_model_of_gemma4_scales_its_shared_key_value_layers(card: str, layers: int, shared: int) -> None:
    # kept at the card's 20, a 10-layer E2B is refused (20 shared of 10 layers): the count follows the layers, and
    # which layer each reads is transformers' own (Gemma4TextConfig.kv_sharing_modes, built from the same numbers)
    from ropeexport.architectures.sharing import sharing_modes
    from ropeexport.decoder.config import from_config, shrink
    from ropeexport.presets import get_preset

    transformers = pytest.importorskip("transformers", reason="transformers reads the shrunk config")
    small = shrink(dict(get_preset(card).config or {}), num_layers=layers, hidden_size=512, vocab_size=512)
    assert small["num_kv_shared_layers"] == shared
    spec = from_config(small, "tiny")
    theirs = transformers.Gemma4TextConfig(**{k: v for k, v in small.items() if k != "model_type"}).kv_sharing_modes
    assert sharing_modes(spec.layers) == [mode or "" for mode in theirs]
