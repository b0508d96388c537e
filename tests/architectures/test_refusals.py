"""A config no decoder here builds is refused naming the feature it lacks and the nearest thing that works
(``architectures.missing``), for the decoder (``architecture``) and for the encoding alone (``hf.import_config``);
the hint to build the encoding alone is given only where the encoding is read (issue 43, items 3 and 4: Qwen-VL and
Mistral 3 read "unknown model type", latent attention and experts were never named, and the hint was a dead end
where the encoding import refused the same config).
"""

from __future__ import annotations

from typing import Any

import pytest

from ropeexport.architectures import architecture
from ropeexport.errors import SpecError
from ropeexport.hf import import_config

SIZES = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
         "intermediate_size": 96, "vocab_size": 128, "max_position_embeddings": 512}  # fmt: skip
ALONE = "the encoding alone: build its block or rope artifact"

# (case, config, words of the decoder's refusal, words of the encoding's refusal or None when it is read)
CASES: list[tuple[str, dict[str, Any], str, str | None]] = [
    ("GLM-4V", {"model_type": "glm4v", **SIZES, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}},
     "multi-axis RoPE (mrope: positions of 3 axes over mrope_section) is built for the Qwen-VL text decoders only, "
     "not for 'glm4v'; the nearest built: the Qwen-VL text decoders", "unknown model type 'glm4v': multi-axis RoPE"),
    ("Qwen3-VL-MoE by its type alone", {"model_type": "qwen3_vl_moe", **SIZES}, "multi-axis RoPE", "multi-axis RoPE"),
    ("LLaVA over Llama", {"model_type": "llava", "text_config": {"model_type": "llama", **SIZES}},
     "a multimodal wrapper whose text model (text_config, model_type 'llama') is built here, but 'llava' is "
     "not read as its wrapper yet: give text_config alone as the config", "unknown model type 'llava': a "
     "multimodal wrapper"),
    ("a wrapper of an unbuilt text model", {"model_type": "llava", "text_config": {"model_type": "vicuna"}},
     "its text model is text_config (model_type 'vicuna'), which has no decoder architecture here either",
     "unknown model type 'llava'"),
    ("MiniCPM3", {"model_type": "minicpm3", **SIZES, "kv_lora_rank": 16, "q_lora_rank": 24, "qk_rope_head_dim": 8,
                  "qk_nope_head_dim": 8, "v_head_dim": 16},
     "multi-head latent attention (kv_lora_rank: DeepSeek's compressed keys and values) is built for deepseek_v3, "
     "deepseek_v32, glm4_moe_lite, glm_moe_dsa, mistral4, deepseek_v2, mistral_large4_text only (DeepSeek V3, Kimi "
     "K2, V3.2, GLM-4.7-Flash, GLM-5, Mistral Small 4, DeepSeek-V2, Mistral Large 4), not for 'minicpm3'",
     "unknown model type 'minicpm3'"),
    ("Qwen2-MoE", {"model_type": "qwen2_moe", **SIZES, "num_experts": 4, "num_experts_per_tok": 2},
     "a mixture of experts (num_experts = 4) is built for gpt_oss, qwen3_moe, llama4_text, deepseek_v3, "
     "deepseek_v32, glm4_moe_lite, glm_moe_dsa, mistral4, deepseek_v2, gemma4_text, mistral_large4_text", None),
    ("Mixtral", {"model_type": "mixtral", **SIZES, "num_local_experts": 8, "num_experts_per_tok": 2},
     "a mixture of experts (num_local_experts = 8) is built for gpt_oss, qwen3_moe, llama4_text, deepseek_v3, "
     "deepseek_v32, glm4_moe_lite, glm_moe_dsa, mistral4, deepseek_v2, gemma4_text, mistral_large4_text", None),
    ("Falcon: nothing recognised, the types built listed", {"model_type": "falcon", **SIZES},
     "'falcon' has no decoder architecture here; built: llama,", None),
    ("a made-up type", {"model_type": "baichuan", **SIZES}, "'baichuan' has no decoder architecture here; built:",
     "unknown model type 'baichuan': ropeexport does not guess"),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("case", "config", "decoder", "encoding"), CASES, ids=[c[0] for c in CASES])
def test_a_refusal_names_the_missing_feature_and_no_dead_end(case: str, config: dict[str, Any], decoder: str,
                                                             encoding: str | None) -> None:  # fmt: skip
    with pytest.raises(SpecError) as refused:
        architecture(config)
    said = str(refused.value)
    assert decoder in said, said
    if encoding is None:  # the encoding alone is read: the hint to build it works
        import_config(config)
        assert ALONE in said, said
        return
    with pytest.raises(SpecError) as also:
        import_config(config)
    assert encoding in str(also.value), str(also.value)
    assert ALONE not in said, said  # a dead end: the encoding import refuses this config too
