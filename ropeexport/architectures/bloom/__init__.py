"""BLOOM: ALiBi, LayerNorm (one on the embeddings too), a plain MLP, fused per-head q/k/v, biases, tied head."""

from __future__ import annotations

from ropeexport.architectures.base import Architecture, Keys
from ropeexport.architectures.hooks import ConfigHook

ARCHITECTURE = Architecture(
    "bloom",
    base="transformer.",
    names={
        "embed": "transformer.word_embeddings.weight",
        "embed_norm.weight": "transformer.word_embeddings_layernorm.weight",
        "embed_norm.bias": "transformer.word_embeddings_layernorm.bias",
        "layers.{i}.norm1.weight": "transformer.h.{i}.input_layernorm.weight",
        "layers.{i}.norm1.bias": "transformer.h.{i}.input_layernorm.bias",
        "layers.{i}.qkv_proj": "transformer.h.{i}.self_attention.query_key_value.weight",
        "layers.{i}.qkv_bias": "transformer.h.{i}.self_attention.query_key_value.bias",
        "layers.{i}.o_proj": "transformer.h.{i}.self_attention.dense.weight",
        "layers.{i}.o_bias": "transformer.h.{i}.self_attention.dense.bias",
        "layers.{i}.norm2.weight": "transformer.h.{i}.post_attention_layernorm.weight",
        "layers.{i}.norm2.bias": "transformer.h.{i}.post_attention_layernorm.bias",
        "layers.{i}.up_proj": "transformer.h.{i}.mlp.dense_h_to_4h.weight",
        "layers.{i}.up_bias": "transformer.h.{i}.mlp.dense_h_to_4h.bias",
        "layers.{i}.down_proj": "transformer.h.{i}.mlp.dense_4h_to_h.weight",
        "layers.{i}.down_bias": "transformer.h.{i}.mlp.dense_4h_to_h.bias",
        "final_norm.weight": "transformer.ln_f.weight",
        "final_norm.bias": "transformer.ln_f.bias",
        "lm_head": "lm_head.weight",
    },
    keys=Keys(eps=("layer_norm_epsilon",), act=(), act_default="bloom_gelu", inner=("n_inner",), inner_factor=4,
              qkv_bias=True, o_bias=True, mlp_bias=True, tie_default=True),  # fmt: skip
    norm="layer",
    fused_qkv="per-head",
    layer_fields={"mlp": "plain"},
    hook=ConfigHook("bloom", encoding="alibi"),
)
