"""GPT-NeoX (Pythia, NeoX-20B): LayerNorm, a plain MLP, a parallel residual (sequential when the config's
``use_parallel_residual`` is false), fused per-head q/k/v ([H, 3, d] rows), biases.
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropeexport.architectures.base import Architecture, Keys, read_layout

NAMES = {
    "embed": "gpt_neox.embed_in.weight",
    "layers.{i}.norm1.weight": "gpt_neox.layers.{i}.input_layernorm.weight",
    "layers.{i}.norm1.bias": "gpt_neox.layers.{i}.input_layernorm.bias",
    "layers.{i}.qkv_proj": "gpt_neox.layers.{i}.attention.query_key_value.weight",
    "layers.{i}.qkv_bias": "gpt_neox.layers.{i}.attention.query_key_value.bias",
    "layers.{i}.o_proj": "gpt_neox.layers.{i}.attention.dense.weight",
    "layers.{i}.o_bias": "gpt_neox.layers.{i}.attention.dense.bias",
    "layers.{i}.norm2.weight": "gpt_neox.layers.{i}.post_attention_layernorm.weight",
    "layers.{i}.norm2.bias": "gpt_neox.layers.{i}.post_attention_layernorm.bias",
    "layers.{i}.up_proj": "gpt_neox.layers.{i}.mlp.dense_h_to_4h.weight",
    "layers.{i}.up_bias": "gpt_neox.layers.{i}.mlp.dense_h_to_4h.bias",
    "layers.{i}.down_proj": "gpt_neox.layers.{i}.mlp.dense_4h_to_h.weight",
    "layers.{i}.down_bias": "gpt_neox.layers.{i}.mlp.dense_4h_to_h.bias",
    "final_norm.weight": "gpt_neox.final_layer_norm.weight",
    "final_norm.bias": "gpt_neox.final_layer_norm.bias",
    "lm_head": "lm_head.weight",
}


def read(arch: Architecture, config: Mapping[str, Any], where: str) -> tuple[dict[str, Any], dict[str, str]]:
    """``read_layout``, the residual sequential where ``use_parallel_residual`` is false."""
    fields, sources = read_layout(arch, config, where)
    if config.get("use_parallel_residual") is False:
        fields["residual"], sources["residual"] = "sequential", "use_parallel_residual"
    return fields, sources


ARCHITECTURE = Architecture(
    "gpt_neox",
    base="gpt_neox.",
    names=NAMES,
    keys=Keys(eps=("layer_norm_eps",), act_default="gelu", qkv_bias=("attention_bias", True),
              o_bias=("attention_bias", True), mlp_bias=True),  # fmt: skip
    norm="layer",
    residual="parallel",
    fused_qkv="per-head",
    aliases={"lm_head.weight": "embed_out.weight"},  # transformers 4.x checkpoints (Pythia, NeoX-20B)
    layer_fields={"mlp": "plain"},
    read=read,
)
