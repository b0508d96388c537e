"""DeepSeek-V2 and DeepSeek-V2-Lite (``model_type: deepseek_v2``): DeepSeek V3's layers (``architectures.deepseek_v3``)
with DeepSeek V2's router and defaults.

Read from transformers 5.23's ``modular_deepseek_v2.py`` and ``configuration_deepseek_v2.py``; what it computes
beside DeepSeek V3's layers:

- attention: ``DeepseekV2Attention`` (modular 251-379) is DeepSeek V3's latent attention; its rotation
  ``apply_rotary_emb`` (143-156) takes each head's rope slice as complex pairs (2i, 2i + 1) (``view_as_complex``) times
  ``freqs_cis`` (``DeepseekV2RotaryEmbedding``, 225-233: ``polar(1, pos x inv_freq)`` times YaRN's attention factor,
  Llama's cos and sin in complex form), written back interleaved, where V3 writes the rotated pairs de-interleaved:
  the same rotation of the same pairs, the channels of query and key permuted alike, so the same logits; it rotates
  in float32 (``xq.float()``) whatever the model's dtype. The softmax scale is ``yarn_apply_mscale`` (307, 242-248),
  V3's: (nope + rope) ** -0.5 times ``mscale(factor, mscale_all_dim)`` squared under a rope type other than default;
- router: ``DeepseekV2TopkRouter`` (163-191): the softmax of float32 logits over every expert; ``topk_method``
  ``greedy`` the k best of all (one group; ``n_group`` not read), ``group_limited_greedy`` the ``topk_group`` best of
  ``n_group`` groups each scored by its best expert, the others masked to 0, then the k best; weighted by their
  softmax as it is (never renormalized: ``norm_topk_prob`` is deleted, 166) times ``routed_scaling_factor``
  (``grouped_softmax_max``, ``components.grouped_moe.KINDS``). Another ``topk_method`` leaves transformers' weights
  unbound (an error there): refused by name, as is a ``norm_topk_prob`` true (transformers would not read it);
- experts: ``Qwen2MoeExperts`` (each saved apart, as V3's: ``conversion_mapping`` maps deepseek_v2 as qwen2_moe),
  the shared experts one ``DeepseekV2MLP`` ``moe_intermediate_size * n_shared_experts`` wide, the dense MLP Llama's
  below ``first_k_dense_replace`` (``DeepseekV2DecoderLayer``, 382-390); ``mlp_bias`` true refused (its experts have
  none, its dense and shared MLPs would);
- defaults (``DeepseekV2Config``): ``q_lora_rank`` 1536, ``kv_lora_rank`` 512, ``qk_nope_head_dim`` 128,
  ``v_head_dim`` 128, 64 routed experts, ``topk_method`` greedy, ``routed_scaling_factor`` 1, two shared experts,
  ``first_k_dense_replace`` 0, ``moe_intermediate_size`` 1407, ``intermediate_size`` 11008, ``rms_norm_eps`` 1e-6;
  ``num_experts_per_tok`` has none (None: transformers' router cannot run), so a config must say it.
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ropeexport.architectures import deepseek_v3 as v3
from ropeexport.architectures.base import Architecture, Keys
from ropeexport.architectures.hooks import interleaved
from ropeexport.architectures.layers import LayerSpec
from ropeexport.errors import SpecError

DEFAULTS = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "v_head_dim": 128,
            "n_routed_experts": 64, "n_group": 1, "topk_group": 1, "routed_scaling_factor": 1.0,
            "norm_topk_prob": False, "n_shared_experts": 2, "first_k_dense_replace": 0,
            "moe_intermediate_size": 1407, "intermediate_size": 11008}  # fmt: skip
CONFIG = ("DeepseekV2Config", DEFAULTS)
METHODS = ("greedy", "group_limited_greedy")
NAMES = {k: v for k, v in v3.NAMES_V3.items() if k != "layers.{i}.router_correction"}  # no correction bias


def read(arch: Architecture, config: Mapping[str, Any],
         where: str = "config.json") -> tuple[dict[str, Any], dict[str, str]]:  # fmt: skip
    """DeepSeek V3's reading (``deepseek_v3.read``) with DeepseekV2Config's defaults and V2's router (module doc):
    ``topk_method`` greedy reads as one group; SpecError naming the key at fault.
    """  # noqa: D205
    method = config.get("topk_method", "greedy")
    if method not in METHODS:
        raise SpecError(f"{where}: topk_method", f"must be one of {', '.join(METHODS)} (transformers 5.23's "
                        f"DeepseekV2TopkRouter), got {method!r}")  # fmt: skip
    if config.get("norm_topk_prob"):
        raise SpecError(f"{where}: norm_topk_prob", "true is not read by transformers 5.23's deepseek_v2 (its router "
                        "never renormalizes the k weights): set it false, or give the model a type that reads it")
    if config.get("mlp_bias"):
        raise SpecError(f"{where}: mlp_bias", "true is not built: DeepSeek V2's experts have no bias beside a biased "
                        "dense and shared MLP")  # fmt: skip
    if config.get("num_experts_per_tok") is None:
        raise SpecError(f"{where}: num_experts_per_tok", "missing: DeepseekV2Config has no default for it (None: its "
                        "router cannot run)")  # fmt: skip
    said = dict(config)
    if method == "greedy":  # one group: n_group and topk_group are not read
        said |= {"n_group": 1, "topk_group": 1}
    else:
        for key in ("n_group", "topk_group"):
            if config.get(key) is None:
                raise SpecError(f"{where}: {key}", "missing: topk_method group_limited_greedy groups the experts by "
                                "it (DeepseekV2Config has no default)")  # fmt: skip
    fields, sources = v3.read(arch, said, where, CONFIG)
    if method == "greedy":
        sources["n_group"] = sources["topk_group"] = "topk_method greedy: one group (n_group, topk_group not read)"
    sources["norm_topk_prob"] = "never renormalized (DeepseekV2TopkRouter does not read norm_topk_prob)"
    return fields, sources


def layer(arch: Architecture, fields: Mapping[str, Any]) -> LayerSpec:
    """DeepSeek V3's default layer with DeepSeek V2's router (``grouped_softmax_max``)."""
    return v3.layer(arch, {**fields, "router": "grouped_softmax_max"})


ARCHITECTURE = replace(
    v3.ARCHITECTURE,
    model_type="deepseek_v2",
    names=NAMES,
    keys=Keys(eps=("rms_norm_eps",), eps_default=1e-6, reads=v3.READS),
    read=read,
    layer=layer,
    changes=v3.dense_changes(CONFIG),  # first_k_dense_replace, DeepseekV2Config's default 0
    passed_over="",  # DeepSeek-V2's checkpoints carry no multi-token prediction layer
    hook=interleaved("deepseek_v2", "view_as_complex", shared_rope_key=True),
)
