"""gpt-oss: Llama's attention with biases and a sink per head, alternating sliding and full layers (``hf``), YaRN; in
place of the MLP a top-k mixture of clamped-SwiGLU experts (``components.moe``). Its RMSNorm multiplies by the weight
in float32.
"""  # noqa: D205

from __future__ import annotations

from dataclasses import replace

from ropeexport.architectures.base import MOE_KEYS
from ropeexport.architectures.hooks import ConfigHook
from ropeexport.architectures.llama import BODY, KEYS, NAMES

ARCHITECTURE = replace(
    BODY,
    model_type="gpt_oss",
    names={
        **{k: v for k, v in NAMES.items() if ".mlp." not in v},
        "layers.{i}.sinks": "model.layers.{i}.self_attn.sinks",
        "layers.{i}.router_proj": "model.layers.{i}.mlp.router.weight",
        "layers.{i}.router_bias": "model.layers.{i}.mlp.router.bias",
        "layers.{i}.experts_gate_up_proj": "model.layers.{i}.mlp.experts.gate_up_proj",
        "layers.{i}.experts_gate_up_bias": "model.layers.{i}.mlp.experts.gate_up_proj_bias",
        "layers.{i}.experts_down_proj": "model.layers.{i}.mlp.experts.down_proj",
        "layers.{i}.experts_down_bias": "model.layers.{i}.mlp.experts.down_proj_bias",
    },
    keys=replace(KEYS, eps_default=1e-5, qkv_bias=("attention_bias", True), o_bias=("attention_bias", True),
                 reads=MOE_KEYS),  # fmt: skip
    norm="rms_wide",
    layer_fields={"sinks": True, "mlp": "moe", "router": "topk_softmax"},
    hook=ConfigHook("gpt_oss", default_theta=150_000.0, reads_layer_types=True, pattern="alternating",
                    theta_required="missing: gpt_oss's transformers config fills in YaRN x32 at theta 150000 when "
                    "absent; write the model's own rope_parameters into the config"),  # fmt: skip
)
