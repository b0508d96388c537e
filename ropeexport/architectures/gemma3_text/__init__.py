"""Gemma 3 (text): Gemma 2's body with q/k norms (Gemma's RMSNorm of each query and key head before the rotation);
also the text model of a multimodal ``gemma3`` checkpoint (``hf.TEXT_CONFIGS``).
"""  # noqa: D205

from __future__ import annotations

from dataclasses import replace

from ropeexport.architectures.gemma2 import ARCHITECTURE as GEMMA2
from ropeexport.architectures.hooks import ConfigHook

ARCHITECTURE = replace(
    GEMMA2,
    model_type="gemma3_text",
    names={**GEMMA2.names, "layers.{i}.q_norm": "model.layers.{i}.self_attn.q_norm.weight",
           "layers.{i}.k_norm": "model.layers.{i}.self_attn.k_norm.weight"},  # fmt: skip
    layer_fields={"qk_norm": "rms"},
    # every 6th layer full (sliding_window_pattern), the rest sliding; 4.x configs give the sliding layers
    # rope_local_base_freq; its config class's theta 1e6
    hook=ConfigHook("gemma3_text", default_theta=1_000_000.0, reads_layer_types=True, pattern="every-nth",
                    pattern_key="sliding_window_pattern", pattern_every=6, local_theta=True),
    wrappers=("gemma3",),  # Gemma 3 4B-27B ship as gemma3, the text model's config under text_config
)
