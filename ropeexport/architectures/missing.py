"""What a config asks for that no decoder architecture here builds, named by feature: what a refusal says.

Torch-free, reads the config's keys only. ``missing(config)`` is a sentence naming the feature a model type needs
and ropeexport lacks (multi-axis RoPE, latent attention, a mixture of experts of another router, a multimodal wrapper
whose text model is another type), with the nearest thing that works, or None when nothing is recognised (the
refusal then lists the types built, as before).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Qwen-VL's multimodal RoPE: positions of three axes (time, height, width) split over the rotary channels
# (``mrope_section``).
# The types built take their place in the catalog (qwen2_vl_text, qwen2_5_vl_text, qwen3_vl_text); these are not.
MULTI_AXIS = ("qwen2_5_omni", "qwen3_vl_moe", "qwen3_omni_moe", "glm4v")
ONE_AXIS = "the Qwen-VL text decoders (qwen2_vl, qwen2_5_vl, qwen3_vl: their checkpoints' text models)"
# transformers' keys for the experts of a mixture, and the model types whose mixtures are built (``components.moe``)
EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")
MIXTURES = ("gpt_oss", "qwen3_moe", "llama4_text", "deepseek_v3", "deepseek_v32", "glm4_moe_lite", "glm_moe_dsa",
            "mistral4", "deepseek_v2", "gemma4_text", "mistral_large4_text")  # fmt: skip
# the model types whose multi-head latent attention is built (DeepSeek V3 and Kimi K2; DeepSeek V3.2; GLM-4.7-Flash;
# GLM-5; Mistral Small 4; DeepSeek-V2; Mistral Large 4)
LATENT = ("deepseek_v3", "deepseek_v32", "glm4_moe_lite", "glm_moe_dsa", "mistral4", "deepseek_v2",
          "mistral_large4_text")  # fmt: skip


def _scaling(config: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("rope_parameters", "rope_scaling"):
        value = config.get(key)
        if isinstance(value, Mapping):
            return value
    return {}


def missing(config: Mapping[str, Any], built: tuple[str, ...]) -> str | None:
    """The feature ``config`` needs that no architecture of ``built`` (model types) has, with the nearest that works;
    None when none is recognised.
    """  # noqa: D205
    model_type = config.get("model_type")
    text = config.get("text_config")
    if model_type in MULTI_AXIS or "mrope_section" in _scaling(config) or (
        isinstance(text, Mapping) and "mrope_section" in _scaling(text)
    ):
        return (f"multi-axis RoPE (mrope: positions of 3 axes over mrope_section) is built for the Qwen-VL text "
                f"decoders only, not for {model_type!r}; the nearest built: {ONE_AXIS}")  # fmt: skip
    if isinstance(text, Mapping):
        inner = text.get("model_type")
        if isinstance(inner, str) and inner in built:
            return (f"a multimodal wrapper whose text model (text_config, model_type {inner!r}) is built here, but "
                    f"{model_type!r} is not read as its wrapper yet: give text_config alone as the config (seeded "
                    "weights; a checkpoint's weights under its text model's prefix are not mapped)")  # fmt: skip
        return (f"a multimodal wrapper: its text model is text_config (model_type {inner!r}), which has no decoder "
                "architecture here either")  # fmt: skip
    if config.get("kv_lora_rank"):
        latent = ", ".join(t for t in LATENT if t in built)
        where = (f"is built for {latent} only (DeepSeek V3, Kimi K2, V3.2, GLM-4.7-Flash, GLM-5, Mistral Small 4, "
                 f"DeepSeek-V2, Mistral Large 4), not for {model_type!r}"
                 if latent else "is not built; no decoder here has it")  # fmt: skip
        return f"multi-head latent attention (kv_lora_rank: DeepSeek's compressed keys and values) {where}"
    experts = next((k for k in EXPERTS if config.get(k)), None)
    if experts is not None:
        have = ", ".join(t for t in MIXTURES if t in built) or "no model type"
        return (f"a mixture of experts ({experts} = {config[experts]}) is built for {have} (their routers and "
                "experts); this model type's experts are not")  # fmt: skip
    return None
