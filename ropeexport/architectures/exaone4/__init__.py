"""EXAONE 4 (EXAONE-4.0-1.2B, -32B): norms after attention and after the MLP only (the post residual:
``post_attention_layernorm``, ``post_feedforward_layernorm``, none before either), an RMSNorm over head_dim of each
query and key head before the rotation, three local (sliding) layers to one global ("LLLG", ``sliding_window_pattern``
4), RoPE on the local layers only: the global ones have no positional encoding, unless the config has no
``sliding_window``, where every layer rotates.

Read from transformers 5.23's ``modeling_exaone4.py`` and ``configuration_exaone4.py``: ``Exaone4DecoderLayer.forward``
(``residual + post_attention_layernorm(self_attn(h))``, then ``residual + post_feedforward_layernorm(mlp(h))``),
``Exaone4Attention.forward`` (``q_norm`` / ``k_norm`` before ``if self.sliding_window is None or self.is_sliding:``
rotates), ``Exaone4Config.__post_init__`` (layer i sliding unless (i + 1) % sliding_window_pattern == 0; a
``sliding_window_pattern`` given as a string, "LLLG", is read by nothing but that modulo, which fails on it: refused
without ``layer_types``).
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
    "exaone4",
    base="model.",
    names=NAMES,
    keys=Keys(eps=("rms_norm_eps",), eps_default=1e-5),
    residual="post",
    layer_fields={"qk_norm": "rms"},
    hook=ConfigHook("exaone4", reads_layer_types=True, pattern="every-nth", pattern_key="sliding_window_pattern",
                    pattern_every=4, rope_on="sliding-if-windowed"),  # fmt: skip
)
