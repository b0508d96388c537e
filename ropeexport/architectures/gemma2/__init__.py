"""Gemma 2: four norms per layer around attention and MLP (the sandwich), Gemma's RMSNorm (normed * (1 + w)), scaled
embeddings, the logit scale from ``query_pre_attn_scalar``, soft caps where the config sets them. Its windows and
per-layer-type encodings come with the layers (``hf``).
"""  # noqa: D205

from __future__ import annotations

from dataclasses import replace

from ropeexport.architectures.hooks import ConfigHook
from ropeexport.architectures.llama import BODY, KEYS, NAMES

NAMES2 = {**NAMES, "layers.{i}.norm3.weight": "model.layers.{i}.pre_feedforward_layernorm.weight",
          "layers.{i}.norm4.weight": "model.layers.{i}.post_feedforward_layernorm.weight"}  # fmt: skip
ARCHITECTURE = replace(
    BODY,
    model_type="gemma2",
    names=NAMES2,
    keys=replace(KEYS, act=("hidden_activation", "hidden_act"), act_default="gelu_pytorch_tanh",
                 qkv_bias=("attention_bias", False), o_bias=("attention_bias", False), tie_default=True,
                 scale_key="query_pre_attn_scalar", reads=("attn_logit_softcapping", "final_logit_softcapping")),
    norm="rms_gemma",
    residual="sandwich",
    embed_scale=True,
    hook=ConfigHook("gemma2", reads_layer_types=True, pattern="alternating"),  # even layers sliding, odd ones full
)
