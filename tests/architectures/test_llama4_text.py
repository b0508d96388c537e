"""Llama 4's text model read from its config (``architectures.llama4_text``), layer by layer, against what transformers
5.23's ``Llama4TextConfig`` derives from the same keys: which layers rotate, which are chunked and by how much, which
hold the experts, the L2 q/k norm and the temperature, each with the key it came from. Configs only: no model is
built (the decoder's generation against transformers' Llama4ForCausalLM: tests/decoder/test_decoder.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from ropeexport.decoder.config import from_config

pytestmark = pytest.mark.fast  # configs against transformers' config class: no model built

transformers = pytest.importorskip("transformers")

_SIZES = {"vocab_size": 96, "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
          "intermediate_size": 24, "intermediate_size_mlp": 48, "num_local_experts": 4,
          "max_position_embeddings": 256}  # fmt: skip
# (id, the config's keys beside _SIZES, drop: keys taken out of the saved config (an older config derives them))
CASES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("released-pattern", {"num_hidden_layers": 8}, ()),  # NoPE every 4th, experts on every layer, chunk 8192
    ("interleaved-experts", {"num_hidden_layers": 4, "interleave_moe_layer_step": 2, "attention_chunk_size": 16,
                             "floor_scale": 4, "attn_scale": 0.2}, ()),  # fmt: skip
    ("own-lists-no-norm-no-temperature", {"num_hidden_layers": 4, "no_rope_layers": [1, 0, 1, 0], "moe_layers": [0],
                                          "use_qk_norm": False, "attn_temperature_tuning": False}, ()),  # fmt: skip
    ("derived-without-lists", {"num_hidden_layers": 5, "no_rope_layer_interval": 2, "interleave_moe_layer_step": 3},
     ("layer_types", "no_rope_layers", "moe_layers")),
]


@pytest.mark.parametrize(("label", "fields", "drop"), CASES, ids=[c[0] for c in CASES])
def test_layers_are_what_transformers_config_derives(label: str, fields: dict[str, Any], drop: tuple[str, ...]) -> None:
    theirs = transformers.Llama4TextConfig(**_SIZES, **fields)
    config = {k: v for k, v in theirs.to_dict().items() if k not in drop}
    spec = from_config(config, "llama4")
    for i, layer in enumerate(spec.layers):
        rope = bool(theirs.no_rope_layers[i])
        assert (layer.position is not None) == rope, (label, i)
        assert layer.chunk == (theirs.attention_chunk_size if theirs.layer_types[i] == "chunked_attention" else 0)
        assert layer.attention.qk_norm == ("l2" if rope and theirs.use_qk_norm else ""), (label, i)
        temperature = not rope and theirs.attn_temperature_tuning
        want = {"kind": "temperature", "floor_scale": theirs.floor_scale, "attn_scale": theirs.attn_scale}
        assert layer.query_scale == (want if temperature else None), (label, i)
        ffn = layer.ffn
        if i in theirs.moe_layers:
            assert (ffn.kind, ffn.router, ffn.experts, ffn.top_k, ffn.inner, ffn.shared) == (
                "moe", "topk_sigmoid", theirs.num_local_experts, theirs.num_experts_per_tok,
                theirs.intermediate_size, 1), (label, i)  # fmt: skip
        else:
            assert (ffn.kind, ffn.inner) == ("gated", theirs.intermediate_size_mlp), (label, i)
    assert spec.position["layout"] == "interleaved" and spec.position["theta"] == theirs.rope_parameters["rope_theta"]
    said = spec.sources["layers"]
    for key in ("L2 q/k norm", "temperature", "mixture layers", "no RoPE"):
        assert f"{key} <- " in said, said


def test_the_text_model_of_a_llama4_checkpoint_is_read_from_its_text_config() -> None:
    text = transformers.Llama4TextConfig(**_SIZES, num_hidden_layers=4, attention_chunk_size=16).to_dict()
    wrapper = {"model_type": "llama4", "text_config": text, "vision_config": {"model_type": "llama4_vision_model"}}
    spec = from_config(wrapper, "llama4")
    assert spec.text_of == "llama4" and spec.model_type == "llama4_text"
    assert spec.layers == from_config(text, "llama4").layers
