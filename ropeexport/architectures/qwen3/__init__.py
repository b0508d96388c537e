"""Qwen3: Llama's body with an RMSNorm over head_dim of each query and key head before the rotation."""

from __future__ import annotations

from dataclasses import replace

from ropeexport.architectures.hooks import ConfigHook
from ropeexport.architectures.llama import BODY, KEYS, NAMES

ARCHITECTURE = replace(
    BODY,
    model_type="qwen3",
    names={**NAMES, "layers.{i}.q_norm": "model.layers.{i}.self_attn.q_norm.weight",
           "layers.{i}.k_norm": "model.layers.{i}.self_attn.k_norm.weight"},  # fmt: skip
    keys=replace(KEYS, qkv_bias=("attention_bias", False), o_bias=("attention_bias", False)),
    layer_fields={"qk_norm": "rms"},
    hook=ConfigHook("qwen3", reads_layer_types=True),
)
