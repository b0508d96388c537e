"""Llama (Llama 2 and 3.x, CodeLlama): RMSNorm, a gated SiLU MLP, a sequential residual; the body Mistral, SmolLM3,
Qwen2, Qwen3 and Phi-3 keep, each differing from it by what its own module says.
"""  # noqa: D205

from __future__ import annotations

from ropeexport.architectures.base import Architecture, Keys

NAMES = {
    "embed": "model.embed_tokens.weight",
    "layers.{i}.norm1.weight": "model.layers.{i}.input_layernorm.weight",
    "layers.{i}.q_proj": "model.layers.{i}.self_attn.q_proj.weight",
    "layers.{i}.k_proj": "model.layers.{i}.self_attn.k_proj.weight",
    "layers.{i}.v_proj": "model.layers.{i}.self_attn.v_proj.weight",
    "layers.{i}.o_proj": "model.layers.{i}.self_attn.o_proj.weight",
    "layers.{i}.q_bias": "model.layers.{i}.self_attn.q_proj.bias",
    "layers.{i}.k_bias": "model.layers.{i}.self_attn.k_proj.bias",
    "layers.{i}.v_bias": "model.layers.{i}.self_attn.v_proj.bias",
    "layers.{i}.o_bias": "model.layers.{i}.self_attn.o_proj.bias",
    "layers.{i}.norm2.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "layers.{i}.gate_proj": "model.layers.{i}.mlp.gate_proj.weight",
    "layers.{i}.up_proj": "model.layers.{i}.mlp.up_proj.weight",
    "layers.{i}.down_proj": "model.layers.{i}.mlp.down_proj.weight",
    "layers.{i}.gate_bias": "model.layers.{i}.mlp.gate_proj.bias",
    "layers.{i}.up_bias": "model.layers.{i}.mlp.up_proj.bias",
    "layers.{i}.down_bias": "model.layers.{i}.mlp.down_proj.bias",
    "final_norm.weight": "model.norm.weight",
    "lm_head": "lm_head.weight",
}
KEYS = Keys(eps=("rms_norm_eps",), eps_default=1e-6)
# Llama's body, no biases read: what the derived types start from.
BODY = Architecture("llama", base="model.", names=NAMES, keys=KEYS)
ARCHITECTURE = Architecture(
    "llama",
    base="model.",
    names=NAMES,
    keys=Keys(eps=("rms_norm_eps",), eps_default=1e-6, qkv_bias=("attention_bias", False),
              o_bias=("attention_bias", False), mlp_bias=("mlp_bias", False)),  # fmt: skip
)
