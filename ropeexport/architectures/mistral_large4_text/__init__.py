"""Mistral Large 4 (``model_type: mistral_large4_text``; the text model of a ``mistral_large4`` checkpoint, its
``text_config``, read as Mistral 3's is): latent attention (``components.latent``) without a query LoRA, per layer
NoPE, a learned query scale and latent caches shared across layers, DeepSeek sparse attention, dense first layers.

Read from transformers 5.23's ``models/mistral_large4/modular_mistral_large4.py`` (``modeling_mistral_large4.py`` is
generated from it; its line numbers where they differ). What transformers computes beyond DeepSeek V3:

- RoPE (LeRoPE, modular 226-245): ``inv_freq * exp(alpha)``, ``alpha`` a learned buffer of the checkpoint
  (``lerope.alpha`` as saved, zeros at init), the product in float32; YaRN by default (``__post_init__`` 144-155:
  factor 2048 over 512 positions, ``attention_factor`` 1, theta 1e4, beta 32 / 1), interleaved pairs on the
  ``qk_rope_head_dim`` slice (``apply_rotary_pos_emb_interleave``, 252-292, unconditional: no ``rope_interleave``);
- the query (399-403): ``q_proj`` directly, no LoRA (``q_lora_rank`` is not a field of the config: refused if set);
  the logit scale ``(qk_nope_head_dim + qk_rope_head_dim) ** -0.5`` times YaRN's mscale squared only with
  ``mscale_all_dim`` (``yarn_apply_mscale``, modeling 320-326), on every layer, NoPE ones included;
- a learned query scale (295-308, applied at 462 to the whole query after the nope | rope concatenation):
  ``scale[h] * log(position_ids + 1) + bias[h]`` per head (``attention.ssmax_scaling.s`` / ``.b`` as saved; 0 and 1 at
  init): the layer's ``query_scale`` of kind ``learned_log``;
- NoPE layers (``no_rope_layers``, 1 = RoPE; every 4th layer NoPE by default, 157-161): the rope slice joins the
  nope part (``qk_nope_head_dim + qk_rope_head_dim`` never rotated, 405-406) and ``kv_a_proj_with_mqa`` outputs
  ``kv_lora_rank`` only (407-411); ``kv_b_proj`` is ``H * (nope + rope + v)`` wide there (modeling 358-362);
- latent caches shared across layers (``kv_source_layers``, config 163-195, attention 434-458): a layer whose entry
  is not its own index has no ``kv_a_proj_with_mqa`` / ``kv_a_layernorm`` and reads
  ``shared_kv_states["rope" if use_rope else "nope"]``, which the *last* earlier storing layer with the same RoPE-ness
  wrote (a layer stores when a later entry names it): not necessarily ``kv_source_layers[i]``. ``kv_from`` here is
  the layer transformers reads (``sources``), and a reusing layer with no earlier storing layer of its RoPE-ness (a
  KeyError in transformers) is refused. The reusing layer expands that latent through its own ``kv_b_proj``;
- DeepSeek sparse attention (DSA, 466-491): an indexer keeps each query's ``min(index_topk, T)`` best keys over the
  T keys of the cache and the new tokens (deepseek_v32's ``topk(min(index_topk, T))`` at 386): with T <= index_topk
  every index of the row is kept (the masked future keys of a prefill too, their scores -inf but inside the top T), so
  the mask it adds is all-False and attention is dense and causal. Built as ``components.latent.indexer``'s
  ``hidden`` query (``MistralLarge4TextIndexer``, 311-387: ``wq_b`` over LayerNorm(x) times the per-head log scale,
  RoPE in interleaved pairs from LeRoPE's one cos / sin, none on a NoPE layer); ``indexer_types`` "shared" layers
  reuse the previous full layer's selection (GLM-5's reading); a layer reading another's latent
  (``reuse_but_indexer``) keeps its own indexer and its key cache (``past_key_values.{i}.index_key`` alone);
- dense layers (``mlp_layer_types``, read by the decoder layer, modeling 623; derived from ``first_k_dense_replace``,
  default 1, by ``GlmMoeDsaConfig.__post_init__`` 153-156 only when absent: saved configs carry both, and
  ``first_k_dense_replace`` is then unread);
- the router of the sparse layers (520-550: the softmax in float32 of all experts, groups scored by their top-2 sum,
  always renormalised, times ``routed_scaling_factor``, no correction bias): ``components.grouped_moe``'s
  ``grouped_softmax`` with ``norm_topk_prob`` true (the config has no such field), beside the shared experts;
- the output logits soft-capped at ``final_logit_softcapping`` (30) by ``MistralLarge4ForConditionalGeneration``
  (850-853, read from the text config at 789): transformers has no causal LM of the text model alone
  (``mistral_large4_text`` maps to ``MistralLarge4TextModel``, no head), so the decoder of either type applies the
  text config's cap as the wrapper does.

Defaults where a key is absent: ``MistralLarge4TextConfig`` (modular 111-138).
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ropeexport.architectures import deepseek_v3 as v3
from ropeexport.architectures import deepseek_v32 as v32
from ropeexport.architectures import glm_moe_dsa as glm
from ropeexport.architectures.base import Architecture, Keys
from ropeexport.architectures.hooks import ConfigHook
from ropeexport.architectures.layers import LayerSpec
from ropeexport.errors import SpecError

# MistralLarge4TextConfig's defaults where a key is absent (transformers 5.23, modular 111-138); q_lora_rank None:
# the config has no such field (``q_lora_rank = AttributeError()``), a plain q_proj
DEFAULTS = {"q_lora_rank": None, "kv_lora_rank": 512, "qk_nope_head_dim": 64, "v_head_dim": 128,
            "n_routed_experts": 128, "num_experts_per_tok": 4, "n_group": 1, "topk_group": 1,
            "routed_scaling_factor": 1.0, "norm_topk_prob": True, "n_shared_experts": 1,
            "first_k_dense_replace": 1, "moe_intermediate_size": 6144, "intermediate_size": 24576,
            "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 32}  # fmt: skip
CLASS = ("MistralLarge4TextConfig", DEFAULTS)
# The checkpoint's names: Mistral's own format, which transformers 5.23 reads and writes for ``mistral_large4``
# (``conversion_mapping.py`` 2484-2546: ``save_pretrained`` reverses its renaming), the text model's tensors at the
# root beside the vision tower's; each canonical name as in ``deepseek_v3`` (its latent attention, its mixture's
# experts apart), the learned query scale ``q_scale`` / ``q_scale_bias`` (``ssmax_scaling.s`` / ``.b``).
NAMES = {
    "embed": "tok_embeddings.weight",
    "final_norm.weight": "norm.weight",
    "lm_head": "output.weight",
    "layers.{i}.norm1.weight": "layers.{i}.attention_norm.weight",
    "layers.{i}.norm2.weight": "layers.{i}.ffn_norm.weight",
    "layers.{i}.q_proj": "layers.{i}.attention.wq.weight",
    "layers.{i}.kv_a_proj": "layers.{i}.attention.wkv_a_with_mqa.weight",
    "layers.{i}.kv_a_norm": "layers.{i}.attention.kv_a_norm.weight",
    "layers.{i}.kv_b_proj": "layers.{i}.attention.wkv_b.weight",
    "layers.{i}.o_proj": "layers.{i}.attention.wo.weight",
    "layers.{i}.q_scale": "layers.{i}.attention.ssmax_scaling.s",
    "layers.{i}.q_scale_bias": "layers.{i}.attention.ssmax_scaling.b",
    # the DSA indexer (``MistralLarge4TextIndexer``): its query's LayerNorm and log scale beside V3.2's weights
    "layers.{i}.indexer.wq_b": "layers.{i}.attention.indexer.wq_b.weight",
    "layers.{i}.indexer.wk": "layers.{i}.attention.indexer.wk.weight",
    "layers.{i}.indexer.k_norm": "layers.{i}.attention.indexer.k_norm.weight",
    "layers.{i}.indexer.k_norm_bias": "layers.{i}.attention.indexer.k_norm.bias",
    "layers.{i}.indexer.weights_proj": "layers.{i}.attention.indexer.weights_proj.weight",
    "layers.{i}.indexer.q_norm": "layers.{i}.attention.indexer.q_input_norm.weight",
    "layers.{i}.indexer.q_norm_bias": "layers.{i}.attention.indexer.q_input_norm.bias",
    "layers.{i}.indexer.q_scale": "layers.{i}.attention.indexer.ssmax_scaling.s",
    "layers.{i}.indexer.q_bias": "layers.{i}.attention.indexer.ssmax_scaling.b",
    "layers.{i}.gate_proj": "layers.{i}.feed_forward.w1.weight",
    "layers.{i}.down_proj": "layers.{i}.feed_forward.w2.weight",
    "layers.{i}.up_proj": "layers.{i}.feed_forward.w3.weight",
    "layers.{i}.router_proj": "layers.{i}.gate.weight",
    "layers.{i}.experts_gate_proj": "layers.{i}.experts.{e}.w1.weight",
    "layers.{i}.experts_down_proj": "layers.{i}.experts.{e}.w2.weight",
    "layers.{i}.experts_up_proj": "layers.{i}.experts.{e}.w3.weight",
    "layers.{i}.shared_gate_proj": "layers.{i}.shared_experts.w1.weight",
    "layers.{i}.shared_down_proj": "layers.{i}.shared_experts.w2.weight",
    "layers.{i}.shared_up_proj": "layers.{i}.shared_experts.w3.weight",
}


def read(arch: Architecture, config: Mapping[str, Any], where: str = "config.json") -> tuple[dict[str, Any],
                                                                                           dict[str, str]]:  # fmt: skip
    """DeepSeek V3's reading (``deepseek_v3.read``) with MistralLarge4TextConfig's defaults, no query LoRA, the
    sparse attention's ``index_topk`` and the learned query scale of every layer; SpecError naming the key at fault.
    """  # noqa: D205
    if config.get("q_lora_rank") is not None:
        raise SpecError(f"{where}: q_lora_rank", f"must be absent or null for mistral_large4_text, got "
                        f"{config['q_lora_rank']!r}: its attention projects the query with q_proj directly (no query "
                        "LoRA; the config class has no such field)")  # fmt: skip
    if config.get("rope_parameters") is None and config.get("rope_scaling") is None:
        raise SpecError(f"{where}: rope_parameters", "missing: MistralLarge4TextConfig fills in YaRN x2048 over 512 "
                        "positions with attention_factor 1 when absent (transformers' saved configs carry it); give "
                        "rope_parameters")  # fmt: skip
    fields, sources = v3.read(arch, config, where, CLASS)
    index, said = v32.read_indexer(config, where, CLASS)
    fields |= index
    sources |= said
    if "final_logit_softcapping" in config and config["final_logit_softcapping"] is None:
        raise SpecError(f"{where}: final_logit_softcapping", "must be a positive number (default 30): transformers' "
                        "MistralLarge4ForConditionalGeneration divides the logits by it unconditionally")  # fmt: skip
    if "final_softcap" not in fields:
        fields["final_softcap"], sources["final_softcap"] = 30.0, "default (30.0, MistralLarge4TextConfig)"
    fields["query_scale"] = {"kind": "learned_log"}
    sources["query_scale"] = ("learned_log: scale[h] * log(position + 1) + bias[h] (self_attn.softmax_scaling, "
                              "MistralLarge4TextSoftmaxScaling)")  # fmt: skip
    return fields, sources


def _flags(config: Mapping[str, Any], count: int, where: str) -> list[int]:
    """Per layer 1 (RoPE) or 0 (NoPE): ``no_rope_layers`` or the config class's every-4th default (its shape is
    checked where the encoding is read, ``ropeexport.hf``).
    """  # noqa: D205
    said = config.get("no_rope_layers")
    if said is None:
        every = config.get("no_rope_layer_interval", 4)
        return [int((i + 1) % every != 0) for i in range(count)]
    if not isinstance(said, list) or len(said) != count or any(f not in (0, 1) or isinstance(f, bool) for f in said):
        raise SpecError(f"{where}: no_rope_layers", f"must list {count} entries (num_hidden_layers), each 1 (RoPE) or "
                        f"0 (NoPE), got {said!r}")  # fmt: skip
    return list(said)


def kv_sources(config: Mapping[str, Any], count: int, where: str = "config.json") -> list[int | None]:
    """Per layer the layer whose latent cache it reads as transformers reads it (None: its own), module doc.

    ``kv_source_layers`` must be transformers' valid pattern (one entry per layer, each an earlier layer that owns its
    cache, ``validate_architecture``); a reusing layer reads the last earlier storing layer of its own RoPE-ness
    (``shared_kv_states["rope" | "nope"]``), which must exist. SpecError naming the key otherwise.
    """
    said = config.get("kv_source_layers")
    if said is None:
        return [None] * count
    key = f"{where}: kv_source_layers"
    if not isinstance(said, list) or len(said) != count:
        raise SpecError(key, f"must list {count} entries (num_hidden_layers), got {said!r}")
    for i, j in enumerate(said):
        if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j <= i or said[j] != j:
            raise SpecError(key, f"entry {i} must name layer {i} or an earlier layer that owns its cache (its own "
                            f"entry its index), got {j!r}")  # fmt: skip
    flags = _flags(config, count, where)
    stores = {j for i, j in enumerate(said) if j != i}
    out: list[int | None] = []
    for i, j in enumerate(said):
        if j == i:
            out.append(None)
            continue
        read = [s for s in sorted(stores) if s < i and flags[s] == flags[i]]
        if not read:
            kind = "RoPE" if flags[i] else "NoPE"
            raise SpecError(key, f"entry {i} ({j}): transformers reads the last earlier storing {kind} layer's cache "
                            f"(shared_kv_states[{'rope' if flags[i] else 'nope'!r}]) and there is none before layer "
                            f"{i} (no_rope_layers)")  # fmt: skip
        out.append(read[-1])
    return out


def mlp_kinds(config: Mapping[str, Any], count: int, where: str = "config.json") -> tuple[list[str], str]:
    """Each layer's ``"dense"`` or ``"sparse"`` and where it came from: ``mlp_layer_types``, else
    ``first_k_dense_replace`` (default 1) dense first layers (module doc).
    """  # noqa: D205
    k, _ = v3.field_value(config, where, "first_k_dense_replace", "count", CLASS)
    derived = ["dense" if i < k else "sparse" for i in range(count)]
    said = config.get("mlp_layer_types")
    if said is None:
        return derived, "first_k_dense_replace"
    if not isinstance(said, list) or len(said) != count or any(s not in ("dense", "sparse") for s in said):
        raise SpecError(f"{where}: mlp_layer_types", f"must list {count} entries (num_hidden_layers), each 'dense' "
                        f"or 'sparse', got {said!r}")  # fmt: skip
    # transformers saves first_k_dense_replace (1 by default) beside any mlp_layer_types and reads the latter only
    return list(said), "mlp_layer_types (first_k_dense_replace unread beside it, as transformers)"


def _changes(config: Mapping[str, Any], where: str,
             layout: Mapping[str, Any]) -> tuple[list[dict[str, object]], dict[str, str]]:  # fmt: skip
    """``Architecture.changes``: the dense layers, the shared latent caches (``kv_sources``) and the shared indexer
    layers (``indexer_types``, read and derived as GLM-5's: ``glm_moe_dsa.indexer_types``).
    """  # noqa: D205
    count = int(layout["num_layers"])
    kinds, source = mlp_kinds(config, count, where)
    width, _ = v3.field_value(config, where, "intermediate_size", "size", CLASS)
    reads = kv_sources(config, count, where)
    indexers, index_source = glm.indexer_types(config, count, where)
    out: list[dict[str, object]] = [{**(v3.dense_mlp(width) if kind == "dense" else {}),
                                     **({"kv_from": j} if j is not None else {}),
                                     **({"index_shared": True} if x == "shared" else {})}
                                    for kind, j, x in zip(kinds, reads, indexers, strict=True)]  # fmt: skip
    said = {"dense layers": f"{source}, intermediate_size"} if "dense" in kinds else {}
    if "shared" in indexers:
        said["shared indexer layers"] = index_source
    if any(j is not None for j in reads):
        said["shared latent caches"] = "kv_source_layers, no_rope_layers (the last storing layer of the same kind)"
    return out, said


def layer(arch: Architecture, fields: Mapping[str, Any]) -> LayerSpec:
    """DeepSeek V3's layer (``deepseek_v3.layer``) with a plain q_proj, its DSA indexer (RoPE in interleaved pairs,
    the query over LayerNorm(x): ``decoder.parts.indexer_spec``), the learned query scale and Mistral Large 4's router
    (``grouped_softmax``, always renormalised).
    """  # noqa: D205
    base = v3.layer(arch, fields)
    attention = replace(base.attention, index_topk=int(fields.get("index_topk", 0)),
                        index_n_heads=int(fields.get("index_n_heads", 0)),
                        index_head_dim=int(fields.get("index_head_dim", 0)),
                        index_layout=str(fields.get("index_layout") or "interleaved"))  # fmt: skip
    ffn = replace(base.ffn, router="grouped_softmax", norm_topk_prob=True)
    return replace(base, attention=attention, ffn=ffn, query_scale=fields.get("query_scale"))


ARCHITECTURE = replace(
    v3.ARCHITECTURE,
    model_type="mistral_large4_text",
    base="",
    names=NAMES,
    keys=Keys(eps=("rms_norm_eps",), eps_default=1e-5, reads=(*v3.READS, "final_logit_softcapping")),
    read=read,
    layer=layer,
    changes=_changes,
    latent_norm_eps=0.0,  # MistralLarge4RMSNorm(kv_lora_rank, eps=config.rms_norm_eps) (modular 412-414)
    rope_buffer=("lerope.alpha", "alpha"),  # LeRoPE: read into rope_parameters (``hf.learned_rope``)
    # the multi-token prediction head transformers does not load (_keys_to_ignore_on_load_unexpected, modular 609)
    passed_over=r"(mtp_dspark\.|lerope\.alpha$)",
    hook=ConfigHook("mistral_large4_text", pairing="interleaved",
                    pairing_why="(2i, 2i + 1) pairs (apply_rotary_pos_emb_interleave: x[..., 0::2], x[..., 1::2])",
                    shared_rope_key=True, reads_no_rope_layers=True, no_rope_interval=4, indexed=True),  # fmt: skip
    wrappers=("mistral_large4",),  # Mistral Large 4 with its vision tower: text_config
)
