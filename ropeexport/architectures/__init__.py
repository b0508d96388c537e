"""Every decoder architecture, listed once: one folder per transformers ``model_type``, one line here.

Torch-free. A folder ``architectures/<model_type>/`` holds that type's ``ARCHITECTURE`` (``base.Architecture``: its
checkpoint names, its config hook, its layer builder); a type that keeps another's body imports it from that type's
folder. ``ARCHITECTURES`` maps each model type to its architecture, in catalog order; ``architecture(config)`` is the
one of a config's ``model_type`` (an unknown one is a SpecError listing those built).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import Any

from ropeexport.architectures.base import Architecture
from ropeexport.architectures.hooks import ENCODING_TYPES, ENCODING_WRAPPERS, NOT_BUILT_TYPES, ConfigHook
from ropeexport.architectures.missing import missing
from ropeexport.errors import SpecError

# One line per architecture (its folder's module): what ``ARCHITECTURES`` holds, in this order.
PACKAGES = (
    "ropeexport.architectures.llama",
    "ropeexport.architectures.mistral",
    "ropeexport.architectures.smollm3",
    "ropeexport.architectures.qwen2",
    "ropeexport.architectures.qwen3",
    "ropeexport.architectures.phi3",
    "ropeexport.architectures.gemma2",
    "ropeexport.architectures.gpt_neox",
    "ropeexport.architectures.gptj",
    "ropeexport.architectures.bloom",
    "ropeexport.architectures.gpt_oss",
    "ropeexport.architectures.gemma3_text",
    "ropeexport.architectures.gemma4_text",
    "ropeexport.architectures.cohere2",
    "ropeexport.architectures.glm4",
    "ropeexport.architectures.exaone4",
    "ropeexport.architectures.olmo3",
    "ropeexport.architectures.qwen3_moe",
    "ropeexport.architectures.ministral3",
    "ropeexport.architectures.deepseek_v3",
    "ropeexport.architectures.deepseek_v32",
    "ropeexport.architectures.glm4_moe_lite",
    "ropeexport.architectures.mistral_large4_text",
    "ropeexport.architectures.mistral4",
    "ropeexport.architectures.deepseek_v2",
    "ropeexport.architectures.glm_moe_dsa",
    "ropeexport.architectures.llama4_text",
    "ropeexport.architectures.qwen2_5_vl_text",
    "ropeexport.architectures.qwen2_vl_text",
    "ropeexport.architectures.qwen3_vl_text",
)


def load(packages: tuple[str, ...]) -> dict[str, Architecture]:
    """{model_type: its architecture} of ``packages``, each a module with ``ARCHITECTURE``; a type listed twice, or
    a module whose ARCHITECTURE is not an ``Architecture``, is an error (never one silently shadowing another).
    """  # noqa: D205
    out: dict[str, Architecture] = {}
    for package in packages:
        arch = getattr(import_module(package), "ARCHITECTURE", None)
        if not isinstance(arch, Architecture):
            raise TypeError(f"{package}.ARCHITECTURE must be an architectures.base.Architecture, got {arch!r}")
        if arch.model_type in out:
            raise ValueError(f"{package}: model_type {arch.model_type!r} is already listed")
        out[arch.model_type] = arch
    return out


ARCHITECTURES = load(PACKAGES)
# Multimodal wrappers whose text model is an architecture here (``text_config``): wrapper -> the text model's types
# (``TEXT_TYPES``: Mistral 3's is mistral, ministral3 or mistral4) and the one its config class takes when text_config
# names none (``TEXT_CONFIGS``: the first architecture in catalog order that declares the wrapper; mistral for
# mistral3, as transformers' Mistral3Config's default text_config).
TEXT_TYPES: dict[str, tuple[str, ...]] = {}
for _arch in ARCHITECTURES.values():
    for _wrapper in _arch.wrappers:
        TEXT_TYPES[_wrapper] = (*TEXT_TYPES.get(_wrapper, ()), _arch.model_type)
TEXT_CONFIGS = {wrapper: types[0] for wrapper, types in TEXT_TYPES.items()}
TEXT_CONFIGS |= {h.model_type: h.text_model for h in ENCODING_TYPES.values() if h.text_model}  # encoding-only ones
# every wrapper whose text model's encoding ropeexport reads -> the text model's type when text_config names none:
# those it builds (TEXT_CONFIGS) and ENCODING_WRAPPERS
WRAPPERS = {**ENCODING_WRAPPERS, **TEXT_CONFIGS}


def config_hook(model_type: str) -> ConfigHook | None:
    """How ``ropeexport.hf`` reads ``model_type``'s encoding: its architecture's hook, a wrapper's, or its line in
    ``hooks.ENCODING_TYPES``; None for a type ropeexport does not know.
    """  # noqa: D205
    if model_type in ARCHITECTURES:
        return ARCHITECTURES[model_type].config_hook
    if model_type in ENCODING_TYPES:  # first: a wrapper's own line may say more (Qwen-VL's flat hub configs)
        return ENCODING_TYPES[model_type]
    if model_type in WRAPPERS:
        return ConfigHook(model_type, text_model=WRAPPERS[model_type])
    return None


def known_types() -> list[str]:
    """Every model type whose encoding ropeexport reads, sorted (wrappers aside: their text model's is read)."""
    return sorted({*ARCHITECTURES, *(t for t, h in ENCODING_TYPES.items() if not h.text_model)})


def architecture(config: Mapping[str, Any], where: str = "config.json") -> Architecture:
    """The architecture of a config's model_type; an unknown one is a SpecError listing those built."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str):  # a list (["llama"]) is not even hashable
        raise SpecError(f"{where}: model_type", f"must be a string naming the architecture, got {model_type!r}; "
                        f"built: {', '.join(ARCHITECTURES)}")  # fmt: skip
    if model_type in NOT_BUILT_TYPES:
        raise SpecError(f"{where}: model_type", f"{model_type!r}: {NOT_BUILT_TYPES[model_type]}")
    if model_type not in ARCHITECTURES:
        why = missing(config, tuple(ARCHITECTURES))  # the feature by name, and the nearest thing that works
        # the encoding alone is a way out only where ropeexport.hf reads this type's encoding (else a dead end)
        alone = " (the encoding alone: build its block or rope artifact)" if config_hook(model_type) else ""
        raise SpecError(f"{where}: model_type", f"{model_type!r} has no decoder architecture here"
                        f"{f': {why}' if why else ''}; built: {', '.join(ARCHITECTURES)}{alone}")  # fmt: skip
    return ARCHITECTURES[model_type]
