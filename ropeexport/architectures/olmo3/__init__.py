"""OLMo 3 (OLMo-3-7B, -32B): norms after attention and after the MLP only (the post residual), each an RMSNorm times
its weight in float32 (``(self.weight * hidden_states).to(input_dtype)``), an RMSNorm of the whole query and key
projections (over heads x head_dim, not per head) before the rotation, three sliding layers to one full (every 4th),
the sliding layers' RoPE unscaled and the full layers' with the config's scaling (YaRN in the long-context models).

Read from transformers 5.23's ``modeling_olmo3.py`` and ``configuration_olmo3.py``: ``Olmo3Attention`` (``q_norm`` of
width heads x head_dim on ``q_proj``'s output, before the heads are split), ``Olmo3RotaryEmbedding`` (one table per
layer type from ``rope_parameters[layer_type]``), ``Olmo3Config.__post_init__`` (layer i sliding unless (i + 1) % 4
== 0) and ``convert_rope_params_to_dict``: a 4.x ``rope_scaling`` and ``rope_theta`` go to the full-attention layers;
the sliding ones get the default schedule at 500000 (the first ``kwargs.pop("rope_theta", ...)`` took the config's).
"""  # noqa: D205

from __future__ import annotations

from ropeexport.architectures.base import Architecture, Keys
from ropeexport.architectures.hooks import ConfigHook

NAMES = {
    "embed": "model.embed_tokens.weight",
    "layers.{i}.q_proj": "model.layers.{i}.self_attn.q_proj.weight",
    "layers.{i}.k_proj": "model.layers.{i}.self_attn.k_proj.weight",
    "layers.{i}.v_proj": "model.layers.{i}.self_attn.v_proj.weight",
    "layers.{i}.o_proj": "model.layers.{i}.self_attn.o_proj.weight",
    "layers.{i}.q_bias": "model.layers.{i}.self_attn.q_proj.bias",
    "layers.{i}.k_bias": "model.layers.{i}.self_attn.k_proj.bias",
    "layers.{i}.v_bias": "model.layers.{i}.self_attn.v_proj.bias",
    "layers.{i}.o_bias": "model.layers.{i}.self_attn.o_proj.bias",
    "layers.{i}.q_norm": "model.layers.{i}.self_attn.q_norm.weight",
    "layers.{i}.k_norm": "model.layers.{i}.self_attn.k_norm.weight",
    "layers.{i}.norm2.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "layers.{i}.gate_proj": "model.layers.{i}.mlp.gate_proj.weight",
    "layers.{i}.up_proj": "model.layers.{i}.mlp.up_proj.weight",
    "layers.{i}.down_proj": "model.layers.{i}.mlp.down_proj.weight",
    "layers.{i}.norm4.weight": "model.layers.{i}.post_feedforward_layernorm.weight",
    "final_norm.weight": "model.norm.weight",
    "lm_head": "lm_head.weight",
}

ARCHITECTURE = Architecture(
    "olmo3",
    base="model.",
    names=NAMES,
    keys=Keys(eps=("rms_norm_eps",), eps_default=1e-5, qkv_bias=("attention_bias", False),
              o_bias=("attention_bias", False)),  # fmt: skip
    norm="rms_wide",
    residual="post",
    layer_fields={"qk_norm": "rms", "qk_norm_over": "projection"},
    hook=ConfigHook("olmo3", default_theta=500_000.0, reads_layer_types=True, pattern="every-nth", pattern_every=4,
                    flat_scaling_on="full_attention"),  # fmt: skip
)
