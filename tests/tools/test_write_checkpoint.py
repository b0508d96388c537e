"""tools/write_checkpoint.py's real-size entries: their fields those of the preset cards, and a checkpoint of each
(shrunk) what transformers and ropeexport read as that model: a wrapper's text model under ``text_config``, Gemma 4's
layer types cut to ``--layers``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tomllib

from tests.toolmod import tool

ROOT = Path(__file__).resolve().parents[2]
# (MODELS entry, preset card, the card's [config] keys the entry must hold alike): Qwen3-VL-4B against the 8B's card,
# the fields the two sizes share (their widths and depth differ)
CARDS = [
    ("qwen3-vl-4b", "qwen3-vl-8b", ("num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
                                    "max_position_embeddings", "rope_parameters", "rms_norm_eps", "hidden_act")),
    ("gemma-4-31b", "gemma-4-31b", None),  # None: every key of the card but model_type
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("model", "card", "keys"), CARDS)
def test_a_real_size_entry_holds_its_preset_cards_values(model: str, card: str, keys: tuple[str, ...] | None) -> None:
    _, fields = tool("write_checkpoint").MODELS[model]
    text = fields.get("text_config", fields)
    config = tomllib.loads((ROOT / "models" / f"{card}.toml").read_text())["config"]
    keys = keys or tuple(k for k in config if k != "model_type")
    assert {k: text.get(k) for k in keys} == {k: config[k] for k in keys}


_TINY = {"hidden_size": 64, "intermediate_size": 96, "vocab_size": 300, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 512}  # fmt: skip
_VISION = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 2,
           "num_key_value_heads": 2, "head_dim": 16, "patch_size": 4, "position_embedding_size": 64}  # fmt: skip
# (entry, layers, overrides, transformers' class named in config.json, the type ropeexport builds, per layer its
# (key/value heads, head_dim) as ropeexport reads them)
WRITTEN = [
    ("qwen3-vl-4b", 2, {**_TINY, "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0,
                                                     "mrope_section": [3, 3, 2], "mrope_interleaved": True},
                        "vision_config.depth": 1, "vision_config.hidden_size": 32, "vision_config.num_heads": 2,
                        "vision_config.intermediate_size": 48, "vision_config.out_hidden_size": 64,
                        "vision_config.deepstack_visual_indexes": [0]},
     "Qwen3VLForConditionalGeneration", "qwen3_vl_text", [(2, 16)] * 2),
    ("gemma-4-31b", 6, {**_TINY, "num_global_key_value_heads": 1, "global_head_dim": 32, "sliding_window": 8,
                        **{f"vision_config.{k}": v for k, v in _VISION.items()}},
     "Gemma4ForConditionalGeneration", "gemma4_text", [(2, 16)] * 5 + [(1, 32)]),
]  # fmt: skip


@pytest.mark.parametrize(("model", "layers", "overrides", "cls", "model_type", "geometry"), WRITTEN)
def test_a_shrunk_entry_is_that_model_to_transformers_and_ropeexport(
    tmp_path: Path, model: str, layers: int, overrides: dict[str, Any], cls: str, model_type: str,
    geometry: list[tuple[int, int]],
) -> None:  # fmt: skip
    from ropeexport.decoder.build import DecoderRequest, resolve

    transformers = pytest.importorskip("transformers")
    written = tool("write_checkpoint").write_checkpoint(model, tmp_path / model, layers, overrides, tokenizer=False)
    saved = json.loads((tmp_path / model / "config.json").read_text())
    assert saved["architectures"] == [cls] and written["layers"] == layers
    text = transformers.AutoConfig.from_pretrained(tmp_path / model).get_text_config()
    assert text.num_hidden_layers == layers and text.hidden_size == 64  # the override reached the text model
    if hasattr(text, "layer_types"):
        assert len(text.layer_types) == layers and text.layer_types[-1] == "full_attention"
    spec, _ = resolve(DecoderRequest(checkpoint=tmp_path / model))
    assert spec.architecture.model_type == model_type
    assert [tuple(layer.geometry[1:3]) for layer in spec.layers] == geometry
