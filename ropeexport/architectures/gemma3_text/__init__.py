"""Gemma 3 (text): Gemma 2's body with q/k norms (Gemma's RMSNorm of each query and key head before the rotation);
also the text model of a multimodal ``gemma3`` checkpoint (``hf.TEXT_CONFIGS``).
"""  # noqa: D205

from __future__ import annotations

from dataclasses import replace

from ropeexport.architectures.gemma2 import ARCHITECTURE as GEMMA2

ARCHITECTURE = replace(
    GEMMA2,
    model_type="gemma3_text",
    names={**GEMMA2.names, "layers.{i}.q_norm": "model.layers.{i}.self_attn.q_norm.weight",
           "layers.{i}.k_norm": "model.layers.{i}.self_attn.k_norm.weight"},  # fmt: skip
    layer_fields={"qk_norm": "rms"},
)
