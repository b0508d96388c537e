"""Qwen2: Llama's body with q/k/v biases; windows from ``max_window_layers`` on come with the layers (``hf``)."""

from __future__ import annotations

from dataclasses import replace

from ropeexport.architectures.hooks import ConfigHook
from ropeexport.architectures.llama import BODY, KEYS

ARCHITECTURE = replace(BODY, model_type="qwen2", keys=replace(KEYS, qkv_bias=True),
                       hook=ConfigHook("qwen2", reads_layer_types=True))  # fmt: skip
