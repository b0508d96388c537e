"""GLM-4.7-Flash (``model_type: glm4_moe_lite``): DeepSeek V3's layers (``architectures.deepseek_v3``) with GLM's
defaults and its own dense/sparse pattern.

Read from transformers 5.23's ``modeling_glm4_moe_lite.py`` and ``configuration_glm4_moe_lite.py``; what transformers
computes is DeepSeek V3's (the modeling file differs from ``modeling_deepseek_v3.py`` in these places only):

- attention: ``Glm4MoeLiteAttention`` is ``DeepseekV3Attention`` (modular line 138): latent attention, interleaved
  pairs on the ``qk_rope_head_dim`` slice (``rope_interleave`` true by default), the softmax scale times YaRN's
  ``mscale(factor, mscale_all_dim)`` squared (``yarn_apply_mscale``, modeling line 278);
- RoPE: ``Glm4MoeLiteRotaryEmbedding.compute_default_rope_parameters`` (modeling lines 77-80) reads
  ``partial_rotary_factor`` where DeepSeek V3's does not: ``int(qk_rope_head_dim * factor)`` channels of frequency
  for a rope slice ``qk_rope_head_dim`` wide, which ``apply_rotary_pos_emb_interleave`` cannot broadcast unless the
  factor is 1: refused by name (``head_dim`` is ``qk_rope_head_dim``, the config's ``attribute_map``);
- router, experts, shared experts, norms: the same code (``Glm4MoeLiteTopkRouter``: sigmoid scores plus
  ``e_score_correction_bias``, the top 2 of each of ``n_group`` groups summed, ``topk_group`` groups kept,
  renormalized with ``norm_topk_prob``, times ``routed_scaling_factor``; ``Glm4MoeLiteMoE`` adds the shared experts,
  ``moe_intermediate_size * n_shared_experts`` wide; RMSNorm before attention and MLP; lm_head untied by default);
- dense layers: ``Glm4MoeLiteDecoderLayer`` (modeling line 506) builds the mixture where ``mlp_layer_types[i]`` is
  ``"sparse"``, else a gated MLP ``intermediate_size`` wide; ``Glm4MoeLiteConfig.__post_init__`` fills
  ``["dense"] + ["sparse"] * (num_hidden_layers - 1)`` when absent. ``first_k_dense_replace`` is not read by
  transformers here (kept on the config, unused): one that contradicts ``mlp_layer_types`` is refused rather than
  silently dropped;
- defaults (``Glm4MoeLiteConfig``): ``q_lora_rank`` 768, ``kv_lora_rank`` 512, ``qk_nope_head_dim`` 192,
  ``v_head_dim`` 256, 64 routed experts, 4 a token, ``n_group`` / ``topk_group`` 1, ``routed_scaling_factor`` 1.8,
  ``moe_intermediate_size`` 1536, ``intermediate_size`` 10240, ``rms_norm_eps`` 1e-5;
- checkpoint names: DeepSeek V3's (``conversion_mapping``: both save each expert apart, as qwen2_moe does).
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ropeexport.architectures import deepseek_v3 as v3
from ropeexport.architectures.base import Architecture, Keys
from ropeexport.architectures.hooks import interleaved
from ropeexport.errors import SpecError

# Glm4MoeLiteConfig's defaults where a key is absent (transformers 5.23)
DEFAULTS = {"q_lora_rank": 768, "kv_lora_rank": 512, "qk_nope_head_dim": 192, "v_head_dim": 256,
            "n_routed_experts": 64, "num_experts_per_tok": 4, "n_group": 1, "topk_group": 1,
            "routed_scaling_factor": 1.8, "norm_topk_prob": True, "n_shared_experts": 1,
            "moe_intermediate_size": 1536, "intermediate_size": 10240}  # fmt: skip
MLP_KINDS = ("dense", "sparse")


def read(
    arch: Architecture, config: Mapping[str, Any], where: str = "config.json"
) -> tuple[dict[str, Any], dict[str, str]]:
    """DeepSeek V3's reading (``deepseek_v3.read``) with Glm4MoeLiteConfig's defaults; a ``partial_rotary_factor``
    other than 1 refused (transformers' rotation cannot apply it to the rope slice).
    """  # noqa: D205
    for scope, table in (("", config), ("rope_parameters.", config.get("rope_parameters") or {}),
                         ("rope_scaling.", config.get("rope_scaling") or {})):  # fmt: skip
        factor = table.get("partial_rotary_factor") if isinstance(table, Mapping) else None
        if factor is not None and factor != 1:
            raise SpecError(f"{where}: {scope}partial_rotary_factor", f"must be 1 for glm4_moe_lite, got {factor!r}: "
                            "transformers computes int(qk_rope_head_dim x factor) channels of frequency for a rope "
                            "slice qk_rope_head_dim wide, which its rotation cannot apply")  # fmt: skip
    return v3.read(arch, config, where, ("Glm4MoeLiteConfig", DEFAULTS))


def mlp_layer_types(config: Mapping[str, Any], count: int, where: str = "config.json") -> tuple[list[str], str]:
    """Each layer's ``"dense"`` or ``"sparse"`` (``count`` layers) and where it came from: ``mlp_layer_types``, or
    Glm4MoeLiteConfig's default (layer 0 dense, the rest sparse); SpecError naming the key at fault.
    """  # noqa: D205
    said = config.get("mlp_layer_types")
    if said is None:
        kinds = ["dense"] + ["sparse"] * (count - 1)
        source = "default (layer 0 dense, the rest sparse: Glm4MoeLiteConfig)"
    else:
        if not isinstance(said, list) or len(said) != count or any(k not in MLP_KINDS for k in said):
            raise SpecError(f"{where}: mlp_layer_types", f"must list {count} entries (num_hidden_layers), each "
                            f"'dense' or 'sparse', got {said!r}")  # fmt: skip
        kinds, source = list(said), "mlp_layer_types"
    k = config.get("first_k_dense_replace")
    if k is not None and kinds != ["dense" if i < k else "sparse" for i in range(count)]:
        raise SpecError(f"{where}: first_k_dense_replace", f"({k!r}) contradicts the layers' MLPs {kinds} "
                        f"({source}): glm4_moe_lite reads mlp_layer_types only; remove first_k_dense_replace or "
                        "make them agree")  # fmt: skip
    return kinds, source


def _changes(config: Mapping[str, Any], where: str,
             layout: Mapping[str, Any]) -> tuple[list[dict[str, object]], dict[str, str]]:  # fmt: skip
    """``Architecture.changes``: the dense layers (``mlp_layer_types``), a gated MLP ``intermediate_size`` wide."""
    kinds, source = mlp_layer_types(config, int(layout["num_layers"]), where)
    if "dense" not in kinds:
        return [{} for _ in kinds], {}
    width, _ = v3.field_value(config, where, "intermediate_size", "size", ("Glm4MoeLiteConfig", DEFAULTS))
    return [v3.dense_mlp(width) if k == "dense" else {} for k in kinds], {"dense layers": f"{source}, "
                                                                          "intermediate_size"}  # fmt: skip


ARCHITECTURE = replace(
    v3.ARCHITECTURE,
    model_type="glm4_moe_lite",
    keys=Keys(eps=("rms_norm_eps",), eps_default=1e-5, reads=v3.READS),  # Glm4MoeLiteConfig's rms_norm_eps 1e-5
    read=read,
    changes=_changes,
    # the multi-token prediction layer, not part of transformers' model (Glm4MoeLitePreTrainedModel's
    # _keys_to_ignore_on_load_unexpected, modeling line 562)
    passed_over=r"model\.layers\.47\.",
    hook=interleaved(
        "glm4_moe_lite", "apply_rotary_pos_emb_interleave: x[..., 0::2], x[..., 1::2]", shared_rope_key=True
    ),  # fmt: skip
)
