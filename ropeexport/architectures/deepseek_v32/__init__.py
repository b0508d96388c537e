"""DeepSeek V3.2 (``model_type: deepseek_v32``): DeepSeek V3's layers (``architectures.deepseek_v3``) plus DeepSeek
Sparse Attention's indexer on every layer (``components.latent.indexer``).

Read from transformers 5.23's ``deepseek_v32/modular_deepseek_v32.py`` (line numbers there):

- attention: ``DeepseekV32Attention`` (271-355) is DeepSeek V3's latent attention with a query LoRA always (AXK1's
  ``q_a_proj``: "Qlora rank formulation is dropped", 274; ``q_lora_rank`` null refused), its rope slice always
  rotated in interleaved pairs (``apply_rotary_pos_emb_interleave``, 303; the config has no ``rope_interleave``,
  145), the softmax scale DeepSeek V3's (``yarn_apply_mscale``);
- the indexer (``DeepseekV32Indexer``, 174-268): ``index_n_heads`` heads ``index_head_dim`` wide over the query
  LoRA's normed output, one LayerNorm'd key, HALF-SPLIT RoPE on its first ``qk_rope_head_dim`` dims (247), relu
  scores weighted per head, each query keeping its ``index_topk`` best keys (its own key cache per layer);
- MLPs: ``DeepseekV32DecoderLayer`` is GLM-4.7-Flash's (reads ``mlp_layer_types``, 359), whose default
  ``DeepseekV32Config.__post_init__`` makes from ``first_k_dense_replace`` (the first k dense, 154-156): a
  ``first_k_dense_replace`` that contradicts a given ``mlp_layer_types`` is refused;
- defaults (``DeepseekV32Config``, 106-147): DeepSeek V3's widths and router, ``index_topk`` 2048,
  ``index_head_dim`` 128, ``index_n_heads`` 64; the multi-token prediction layer 61 passed over (366);
- checkpoint names: DeepSeek V3's, the indexer's under ``self_attn.indexer``.
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ropeexport.architectures import deepseek_v3 as v3
from ropeexport.architectures.base import Architecture, Keys, number
from ropeexport.architectures.hooks import interleaved
from ropeexport.architectures.layers import LayerSpec
from ropeexport.errors import SpecError

DEFAULTS = {**v3.DEFAULTS, "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 64}
CONFIG = ("DeepseekV32Config", DEFAULTS)
INDEX_KEYS = ("index_topk", "index_head_dim", "index_n_heads")
NAMES_V32 = {
    **v3.NAMES_V3,
    "layers.{i}.indexer.wq_b": "model.layers.{i}.self_attn.indexer.wq_b.weight",
    "layers.{i}.indexer.wk": "model.layers.{i}.self_attn.indexer.wk.weight",
    "layers.{i}.indexer.k_norm": "model.layers.{i}.self_attn.indexer.k_norm.weight",
    "layers.{i}.indexer.k_norm_bias": "model.layers.{i}.self_attn.indexer.k_norm.bias",
    "layers.{i}.indexer.weights_proj": "model.layers.{i}.self_attn.indexer.weights_proj.weight",
}


def read_indexer(config: Mapping[str, Any], where: str, defaults: v3.Defaults) -> tuple[dict[str, Any], dict[str, str]]:
    """The indexer's fields (``index_topk``, ``index_n_heads``, ``index_head_dim``) with their sources; SpecError
    naming the key: a count below 1, or an ``index_head_dim`` below ``qk_rope_head_dim`` (its rotated dims).
    """  # noqa: D205
    fields: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key in INDEX_KEYS:
        value = config.get(key)
        if value is None:
            fields[key], sources[key] = defaults[1][key], f"default ({defaults[1][key]}, transformers' {defaults[0]})"
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"{where}: {key}", f"must be an integer >= 1, got {value!r}")
        fields[key], sources[key] = value, key
    rope = number(where, "qk_rope_head_dim", config.get("qk_rope_head_dim", 64))
    if fields["index_head_dim"] < rope:
        raise SpecError(f"{where}: index_head_dim", f"must be at least qk_rope_head_dim ({rope}): the indexer "
                        f"rotates its first qk_rope_head_dim dims, got {fields['index_head_dim']}")  # fmt: skip
    return fields, sources


def read(arch: Architecture, config: Mapping[str, Any], where: str = "config.json") -> tuple[dict[str, Any],
                                                                                              dict[str, str]]:
    """DeepSeek V3's reading (``deepseek_v3.read``) with DeepseekV32Config's defaults, the indexer's fields, the
    query LoRA required (the attention and its indexer read it).
    """  # noqa: D205
    if "q_lora_rank" in config and config["q_lora_rank"] is None:
        raise SpecError(f"{where}: q_lora_rank", "null is not built for deepseek_v32: its attention always has the "
                        "query LoRA (q_a_proj), whose normed output the indexer's query reads")  # fmt: skip
    fields, sources = v3.read(arch, config, where, CONFIG)
    index, said = read_indexer(config, where, CONFIG)
    return fields | index, sources | said


def mlp_layer_types(config: Mapping[str, Any], count: int, where: str = "config.json",
                    defaults: v3.Defaults = CONFIG) -> list[str]:  # fmt: skip
    """Each layer's ``"dense"`` or ``"sparse"``: ``mlp_layer_types``, else the first ``first_k_dense_replace``
    (default 3) dense (DeepseekV32Config.__post_init__); the two contradicting is a SpecError naming the key.
    """  # noqa: D205
    k, _ = v3.field_value(config, where, "first_k_dense_replace", "count", defaults)
    derived = ["dense" if i < k else "sparse" for i in range(count)]
    said = config.get("mlp_layer_types")
    if said is None:
        return derived
    if not isinstance(said, list) or len(said) != count or any(x not in ("dense", "sparse") for x in said):
        raise SpecError(f"{where}: mlp_layer_types", f"must list {count} entries (num_hidden_layers), each 'dense' "
                        f"or 'sparse', got {said!r}")  # fmt: skip
    if "first_k_dense_replace" in config and said != derived:
        raise SpecError(f"{where}: first_k_dense_replace", f"({k!r}) contradicts mlp_layer_types {said}: "
                        "transformers reads mlp_layer_types; remove one or make them agree")  # fmt: skip
    return list(said)


def _changes(config: Mapping[str, Any], where: str,
             layout: Mapping[str, Any]) -> tuple[list[dict[str, object]], dict[str, str]]:  # fmt: skip
    """``Architecture.changes``: the dense layers (``mlp_layer_types``), a gated MLP ``intermediate_size`` wide."""
    kinds = mlp_layer_types(config, int(layout["num_layers"]), where)
    if "dense" not in kinds:
        return [{} for _ in kinds], {}
    width, _ = v3.field_value(config, where, "intermediate_size", "size", CONFIG)
    return [v3.dense_mlp(width) if k == "dense" else {} for k in kinds], {
        "dense layers": "mlp_layer_types or first_k_dense_replace, intermediate_size"}


def layer(arch: Architecture, fields: Mapping[str, Any]) -> LayerSpec:
    """DeepSeek V3's layer (``deepseek_v3.layer``) with its indexer: half-split RoPE, the query LoRA's query."""
    base = v3.layer(arch, fields)
    index = {"index_topk": fields.get("index_topk", 0), "index_n_heads": fields.get("index_n_heads", 0),
             "index_head_dim": fields.get("index_head_dim", 0), "index_layout": fields.get("index_layout") or "half"}
    return replace(base, attention=replace(base.attention, **index))


ARCHITECTURE = replace(
    v3.ARCHITECTURE,
    model_type="deepseek_v32",
    names=NAMES_V32,
    keys=Keys(eps=("rms_norm_eps",), eps_default=1e-6, reads=(*v3.READS, *INDEX_KEYS)),
    read=read,
    layer=layer,
    changes=_changes,
    hook=interleaved("deepseek_v32", "apply_rotary_pos_emb_interleave: x[..., 0::2], x[..., 1::2]",
                     shared_rope_key=True, full_alias="indexed_attention"),  # fmt: skip
)
