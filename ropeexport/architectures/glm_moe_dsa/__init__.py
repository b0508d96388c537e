"""GLM-5 (``model_type: glm_moe_dsa``): DeepSeek V3.2's layers (``architectures.deepseek_v32``) with GLM's defaults,
its indexer's RoPE in interleaved pairs, and layers that reuse the previous full indexer layer's selection.

Read from transformers 5.23's ``glm_moe_dsa/modular_glm_moe_dsa.py`` (line numbers there):

- the indexer (``GlmMoeDsaIndexer``, 133-192): DeepSeek V3.2's with INTERLEAVED RoPE on its first
  ``qk_rope_head_dim`` dims (``apply_rotary_pos_emb_interleave``, 170-171);
- ``indexer_types`` (104-122): per layer ``"full"`` (its own indexer, weights and key cache) or ``"shared"`` (no
  indexer: the top-k of the previous layer, carried from the last full one, 244-257, 372-381); absent, derived as
  the config class derives it from ``index_topk_pattern`` ("F"/"S" per layer) or ``index_topk_freq`` (default 1) and
  ``index_skip_topk_offset`` (default 2); a first layer that is shared has no selection to reuse: refused;
- the attention, MLPs and router: DeepSeek V3.2's (``GlmMoeDsaAttention`` is V3.2's with the shared branch;
  ``GlmMoeDsaDecoderLayer`` is V3.2's);
- defaults (``GlmMoeDsaConfig``, 82-103): ``q_lora_rank`` 2048, ``kv_lora_rank`` 512, ``qk_nope_head_dim`` 192,
  ``v_head_dim`` 256, 256 experts, 8 a token, one group, ``routed_scaling_factor`` 2.5, ``index_n_heads`` 32,
  ``rms_norm_eps`` 1e-5; the multi-token prediction layer 78 passed over (329).
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ropeexport.architectures import deepseek_v3 as v3
from ropeexport.architectures import deepseek_v32 as v32
from ropeexport.architectures.base import Architecture, Keys
from ropeexport.architectures.hooks import interleaved
from ropeexport.architectures.layers import LayerSpec
from ropeexport.errors import SpecError

DEFAULTS = {**v32.DEFAULTS, "q_lora_rank": 2048, "qk_nope_head_dim": 192, "v_head_dim": 256, "n_group": 1,
            "topk_group": 1, "intermediate_size": 12288, "index_n_heads": 32}  # fmt: skip
CONFIG = ("GlmMoeDsaConfig", DEFAULTS)
KINDS = {"F": "full", "S": "shared"}


def read(arch: Architecture, config: Mapping[str, Any], where: str = "config.json") -> tuple[dict[str, Any],
                                                                                              dict[str, str]]:
    """DeepSeek V3.2's reading (``deepseek_v32.read``) with GlmMoeDsaConfig's defaults."""
    if "q_lora_rank" in config and config["q_lora_rank"] is None:
        raise SpecError(f"{where}: q_lora_rank", "null is not built for glm_moe_dsa: its attention always has the "
                        "query LoRA (q_a_proj), whose normed output the indexer's query reads")  # fmt: skip
    fields, sources = v3.read(arch, config, where, CONFIG)
    index, said = v32.read_indexer(config, where, CONFIG)
    return fields | index, sources | said


def indexer_types(config: Mapping[str, Any], count: int, where: str = "config.json") -> tuple[list[str], str]:
    """Each layer's ``"full"`` or ``"shared"`` indexer and where it came from (module doc); SpecError naming the key."""
    said = config.get("indexer_types")
    if said is not None:
        if not isinstance(said, list) or len(said) != count or any(k not in KINDS.values() for k in said):
            raise SpecError(f"{where}: indexer_types", f"must list {count} entries (num_hidden_layers), each 'full' "
                            f"or 'shared', got {said!r}")  # fmt: skip
        kinds, source = list(said), "indexer_types"
    elif config.get("index_topk_pattern") is not None:
        pattern = config["index_topk_pattern"]
        if not isinstance(pattern, str) or len(pattern) != count or set(pattern) - set(KINDS):
            raise SpecError(f"{where}: index_topk_pattern", f"must be {count} letters F (full) or S (shared), got "
                            f"{pattern!r}")  # fmt: skip
        kinds, source = [KINDS[c] for c in pattern], "index_topk_pattern"
    else:
        freq, offset = config.get("index_topk_freq", 1), config.get("index_skip_topk_offset", 2)
        for key, value in (("index_topk_freq", freq), ("index_skip_topk_offset", offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(f"{where}: {key}", f"must be an integer >= 0, got {value!r}")
        freq = max(freq, 1)
        kinds = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(count)]
        source = f"index_topk_freq {freq}, index_skip_topk_offset {offset} (GlmMoeDsaConfig's derivation)"
    if kinds and kinds[0] == "shared":
        raise SpecError(f"{where}: {source.split(' ')[0]}", "layer 0 is 'shared': a shared layer reuses the previous "
                        "full indexer layer's selection, and none comes before it")  # fmt: skip
    return kinds, source


def _changes(config: Mapping[str, Any], where: str,
             layout: Mapping[str, Any]) -> tuple[list[dict[str, object]], dict[str, str]]:  # fmt: skip
    """``Architecture.changes``: the dense layers (DeepSeek V3.2's reading) and the shared indexer layers."""
    count = int(layout["num_layers"])
    kinds = v32.mlp_layer_types(config, count, where, CONFIG)
    width, _ = v3.field_value(config, where, "intermediate_size", "size", CONFIG)
    indexers, source = indexer_types(config, count, where)
    per_layer = [({**v3.dense_mlp(width)} if k == "dense" else {}) | ({"index_shared": True} if x == "shared" else {})
                 for k, x in zip(kinds, indexers, strict=True)]  # fmt: skip
    sources = {"dense layers": "mlp_layer_types or first_k_dense_replace, intermediate_size"} if (
        "dense" in kinds) else {}  # fmt: skip
    if "shared" in indexers:
        sources["shared indexer layers"] = source
    return per_layer, sources


def layer(arch: Architecture, fields: Mapping[str, Any]) -> LayerSpec:
    """DeepSeek V3.2's layer with the indexer's RoPE in interleaved pairs."""
    return v32.layer(arch, {**fields, "index_layout": fields.get("index_layout") or "interleaved"})


ARCHITECTURE = replace(
    v32.ARCHITECTURE,
    model_type="glm_moe_dsa",
    keys=Keys(eps=("rms_norm_eps",), eps_default=1e-5, reads=(*v3.READS, *v32.INDEX_KEYS)),
    read=read,
    layer=layer,
    changes=_changes,
    passed_over=r"model\.layers\.78\.",
    hook=interleaved("glm_moe_dsa", "apply_rotary_pos_emb_interleave: x[..., 0::2], x[..., 1::2]",
                     shared_rope_key=True, full_alias="indexed_attention"),  # fmt: skip
)
