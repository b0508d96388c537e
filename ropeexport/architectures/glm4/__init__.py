"""GLM-4 (GLM-4-9B-0414, GLM-4-32B-0414): Llama's RMSNorm before and after each of attention and MLP (the sandwich:
``input_layernorm``, ``post_self_attn_layernorm``, ``post_attention_layernorm`` before the MLP, ``post_mlp_layernorm``),
q/k/v biases (``attention_bias``, true by default) and none on the output, a fused ``gate_up_proj`` ([gate; up]
rows, chunked in two), interleaved RoPE pairs on the first half of each head (``partial_rotary_factor`` 0.5 unless the
config says otherwise).

Read from transformers 5.23's ``modeling_glm4.py`` and ``configuration_glm4.py``: ``Glm4DecoderLayer.forward`` (the
four norms), ``Glm4MLP`` (``gate, up_states = up_states.chunk(2, dim=-1)``), ``apply_rotary_pos_emb`` (cos and sin's
first half repeat-interleaved over the rotated width, ``rotate_half`` taking x[..., 0::2], x[..., 1::2], the rest of
the head passed through) and ``Glm4Config.__post_init__`` (``kwargs.setdefault("partial_rotary_factor", 0.5)``).
"""  # noqa: D205

from __future__ import annotations

from ropeexport.architectures.base import Architecture, Keys
from ropeexport.architectures.hooks import ConfigHook

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
    "layers.{i}.norm2.weight": "model.layers.{i}.post_self_attn_layernorm.weight",
    "layers.{i}.norm3.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "layers.{i}.gate_up_proj": "model.layers.{i}.mlp.gate_up_proj.weight",
    "layers.{i}.down_proj": "model.layers.{i}.mlp.down_proj.weight",
    "layers.{i}.norm4.weight": "model.layers.{i}.post_mlp_layernorm.weight",
    "final_norm.weight": "model.norm.weight",
    "lm_head": "lm_head.weight",
}

ARCHITECTURE = Architecture(
    "glm4",
    base="model.",
    names=NAMES,
    # Glm4Config's rms_norm_eps default 1.5625e-07; attention_bias true by default (q, k and v only: o_proj has none)
    keys=Keys(eps=("rms_norm_eps",), eps_default=1.5625e-07, qkv_bias=("attention_bias", True)),
    residual="sandwich",
    hook=ConfigHook("glm4", pairing="interleaved",
                    pairing_why="interleaved pairs (2i, 2i+1) (its rotate_half takes x[..., 0::2], x[..., 1::2], "
                    "cos/sin repeat_interleave'd)", default_partial=0.5),  # fmt: skip
)
