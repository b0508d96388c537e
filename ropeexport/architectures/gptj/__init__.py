"""GPT-J: LayerNorm, one norm read by attention and MLP alike (the shared residual), a plain MLP, a head bias."""

from __future__ import annotations

from ropeexport.architectures.base import Architecture, Keys
from ropeexport.architectures.hooks import interleaved

ARCHITECTURE = Architecture(
    "gptj",
    base="transformer.",
    names={
        "embed": "transformer.wte.weight",
        "layers.{i}.norm1.weight": "transformer.h.{i}.ln_1.weight",
        "layers.{i}.norm1.bias": "transformer.h.{i}.ln_1.bias",
        "layers.{i}.q_proj": "transformer.h.{i}.attn.q_proj.weight",
        "layers.{i}.k_proj": "transformer.h.{i}.attn.k_proj.weight",
        "layers.{i}.v_proj": "transformer.h.{i}.attn.v_proj.weight",
        "layers.{i}.o_proj": "transformer.h.{i}.attn.out_proj.weight",
        "layers.{i}.up_proj": "transformer.h.{i}.mlp.fc_in.weight",
        "layers.{i}.up_bias": "transformer.h.{i}.mlp.fc_in.bias",
        "layers.{i}.down_proj": "transformer.h.{i}.mlp.fc_out.weight",
        "layers.{i}.down_bias": "transformer.h.{i}.mlp.fc_out.bias",
        "final_norm.weight": "transformer.ln_f.weight",
        "final_norm.bias": "transformer.ln_f.bias",
        "lm_head": "lm_head.weight",
        "lm_head_bias": "lm_head.bias",
    },
    keys=Keys(eps=("layer_norm_epsilon",), act=("activation_function",), act_default="gelu_new", inner=("n_inner",),
              inner_factor=4, mlp_bias=True),  # fmt: skip
    norm="layer",
    residual="shared",
    layer_fields={"mlp": "plain"},
    hook=interleaved("gptj", "rotate_every_two"),
)
