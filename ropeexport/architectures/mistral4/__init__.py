"""Mistral Small 4 (``model_type: mistral4``): DeepSeek V3's latent attention with Ministral 3's query scale on the
whole query, Qwen2-MoE's gated MLP on the first ``first_k_dense_replace`` layers, a softmax grouped router elsewhere.

Read from transformers 5.23's ``modular_mistral4.py`` and ``configuration_mistral4.py``; what it computes beyond
DeepSeek V3's layers (``architectures.deepseek_v3``):

- attention: ``Mistral4Attention.forward`` (modular 104-160) is DeepSeek V3's latent attention (a query LoRA when
  ``q_lora_rank`` is set, else a plain ``q_proj``: lines 117-120; interleaved pairs on the ``qk_rope_head_dim`` slice
  when ``rope_interleave``, true by default; the softmax scale ``DeepseekV3Attention``'s, YaRN's
  ``mscale(factor, mscale_all_dim)`` squared in it), then the WHOLE query, nope and rotated rope parts concatenated,
  times ``get_llama_4_attn_scale(position_ids, llama_4_scaling_beta, original_max_position_embeddings)`` read from
  ``rope_parameters`` (lines 142-149): the layer's ``query_scale`` of kind ``log_floor`` (``ministral3.query_scale``);
- RoPE: ``Mistral4RotaryEmbedding`` is Llama's over ``head_dim`` = nope + rope times ``partial_rotary_factor``
  (``Mistral4Config.__post_init__`` sets it to rope / (nope + rope)): the rope slice, every channel
  (``ConfigHook.partial_of_qk_head``); a factor that does not come to the slice is refused;
- router: ``Mistral4TopkRouter`` (lines 63-93): the softmax of the logits over every expert, a group scored by its
  two best, ``topk_group`` kept, the others masked to 0, the k best chosen and weighted by their softmax, over their
  sum + 1e-20 when ``norm_topk_prob``, times ``routed_scaling_factor``; no correction bias (``grouped_softmax``,
  ``components.grouped_moe.KINDS``);
- experts and shared experts: ``Mistral4MoE`` is ``DeepseekV3MoE`` (the shared experts one gated MLP
  ``moe_intermediate_size * n_shared_experts`` wide); the experts saved fused, ``experts.gate_up_proj`` [E, 2m, n]
  (the gate's rows, then the up's: ``chunk(2)``) and ``experts.down_proj`` [E, n, m] (mistral4 has no entry in
  ``conversion_mapping``: saved as held);
- dense layers: ``Mistral4DecoderLayer`` builds ``Mistral4MLP`` (``Qwen2MoeMLP``: gated, ``intermediate_size``)
  below ``first_k_dense_replace``, the mixture from there;
- defaults (``Mistral4Config``): ``q_lora_rank`` 1024, ``kv_lora_rank`` 256, ``qk_nope_head_dim`` 64,
  ``qk_rope_head_dim`` 64, ``v_head_dim`` 128, 128 routed experts, 4 a token, ``n_group`` / ``topk_group`` 1,
  ``routed_scaling_factor`` 1, ``norm_topk_prob`` true, one shared expert, ``first_k_dense_replace`` 0,
  ``moe_intermediate_size`` 2048, ``intermediate_size`` 12288, ``rms_norm_eps`` 1e-6; with no ``rope_parameters``
  the config class fills in YaRN x128 over 8192 with beta 0.1: refused here, as for Ministral 3 (give them).
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ropeexport.architectures import deepseek_v3 as v3
from ropeexport.architectures.base import Architecture, Keys
from ropeexport.architectures.hooks import ConfigHook
from ropeexport.architectures.layers import LayerSpec
from ropeexport.architectures.ministral3 import BETA, query_scale

DEFAULTS = {"q_lora_rank": 1024, "kv_lora_rank": 256, "qk_nope_head_dim": 64, "v_head_dim": 128,
            "n_routed_experts": 128, "num_experts_per_tok": 4, "n_group": 1, "topk_group": 1,
            "routed_scaling_factor": 1.0, "norm_topk_prob": True, "n_shared_experts": 1, "first_k_dense_replace": 0,
            "moe_intermediate_size": 2048, "intermediate_size": 12288}  # fmt: skip
CONFIG = ("Mistral4Config", DEFAULTS)
# DeepSeek V3's names with the experts as saved fused (Gemma 4's row layout: [E, 2m, n] gate then up, [E, n, m]) and
# no correction bias
NAMES = {
    **{k: v for k, v in v3.NAMES_V3.items()
       if not k.startswith(("layers.{i}.experts_", "layers.{i}.router_correction"))},  # fmt: skip
    "layers.{i}.experts_gate_up_rows": "model.layers.{i}.mlp.experts.gate_up_proj",
    "layers.{i}.experts_down_rows": "model.layers.{i}.mlp.experts.down_proj",
}


def read(arch: Architecture, config: Mapping[str, Any],
         where: str = "config.json") -> tuple[dict[str, Any], dict[str, str]]:  # fmt: skip
    """DeepSeek V3's reading (``deepseek_v3.read``) with Mistral4Config's defaults, and every layer's query scale from
    ``rope_parameters`` (``ministral3.query_scale``).
    """  # noqa: D205
    fields, sources = v3.read(arch, config, where, CONFIG)
    scale, source = query_scale(config, where, "mistral4")
    if source:
        fields["query_scale"], sources["query_scale"] = scale, source
    return fields, sources


def layer(arch: Architecture, fields: Mapping[str, Any]) -> LayerSpec:
    """DeepSeek V3's default layer with Mistral 4's router (``grouped_softmax``) and the query scale."""
    return v3.layer(arch, {**fields, "router": "grouped_softmax"})


ARCHITECTURE = replace(
    v3.ARCHITECTURE,
    model_type="mistral4",
    names=NAMES,
    keys=Keys(eps=("rms_norm_eps",), eps_default=1e-6, reads=v3.READS),
    read=read,
    layer=layer,
    changes=v3.dense_changes(CONFIG),  # first_k_dense_replace, Mistral4Config's default 0
    passed_over="",  # Mistral4PreTrainedModel._keys_to_ignore_on_load_unexpected is empty
    wrappers=("mistral3",),  # Mistral 3's wrapper takes any text_config (Mistral3Config), a mistral4 one too
    hook=ConfigHook("mistral4", pairing="interleaved",
                    pairing_why="pairs (2i, 2i + 1) (apply_rotary_pos_emb_interleave under rope_interleave)",
                    shared_rope_key=True, partial_of_qk_head=True, rope_extra_keys=(BETA, "max_position_embeddings"),
                    theta_required="missing: transformers' mistral4 config fills in YaRN x128 over 8192 positions "
                    f"with {BETA} 0.1 when rope_parameters is absent; give rope_parameters"),  # fmt: skip
)
