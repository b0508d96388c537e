"""Gemma 4 (text): Gemma 3's sandwich with the layers' own head_dim, read as transformers 5.23 reads it
(``configuration_gemma4.py`` / ``modeling_gemma4.py``); also the text model of a multimodal ``gemma4`` checkpoint.

What its text model computes, each from its code: sliding layers (``sliding_window``) with the default RoPE at theta
1e4 over ``head_dim``; full layers with their own head_dim (``global_head_dim`` / ``per_layer_config``: 512 against
256 in the released sizes) and proportional RoPE (``rope_type: proportional``, ``partial_rotary_factor`` 0.25, theta
1e6: the real pairs, then zero-frequency ones, rotate-half over every channel); every 6th layer full and the last
one always (``__post_init__``); ``Gemma4RMSNorm`` (normed * weight, in float32, then cast: ``rms_wide``) for the four
sandwich norms, the final norm and the q/k norms; a weightless RMSNorm of the values (``v_norm``); logits q . k with
``scaling = 1.0``; the residual stream times ``layer_scalar`` after each layer; the embeddings times sqrt(hidden); the
output logits soft-capped (``final_logit_softcapping``). Under ``attention_k_eq_v`` the full layers read their values
off the key projection (no v_proj), with ``num_global_key_value_heads`` key/value heads.

Key/value shared across layers (``num_kv_shared_layers``): the last ones read the keys and values of the last earlier
layer of their type (``shared``; ``architectures.sharing``), with no cache of their own, and under
``use_double_wide_mlp`` an MLP twice as wide.

Per-layer input embeddings (``hidden_size_per_layer_input`` > 0, 256 when absent: the E2B / E4B sizes): each layer's
small input from its own token table and a projection of the embeddings, added after its feed-forward
(``decoder.per_layer``; ``per_layer_input`` / ``per_layer_vocab`` in decoder.json).

The mixture of experts beside the MLP (``enable_moe_block``: 26B-A4B): on every layer, ``num_experts`` gated experts
``moe_intermediate_size`` wide, ``top_k_experts`` a token, routed by ``Gemma4TextRouter`` from the residual stream,
with their own norms (``components.gemma4_moe``; the layer's ``router`` ``gemma4``, its dense MLP written as
``n_shared_experts`` x ``moe_intermediate_size``: an ``intermediate_size`` that is not a multiple of it is refused).

Refused by their keys (not built; each one line, exit 2): bidirectional attention
(``use_bidirectional_attention: all``), and a ``layer_types`` whose last layer is not full (transformers forces it
full: the config would say two things).
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ropeexport.architectures.base import Architecture, read_layout
from ropeexport.architectures.gemma3_text import ARCHITECTURE as GEMMA3
from ropeexport.architectures.hooks import ConfigHook
from ropeexport.errors import SpecError

# Gemma4TextConfig's mixture keys (``enable_moe_block``), each read as the decoder's layer field it gives
MOE = (("num_experts", "num_experts"), ("top_k_experts", "experts_per_token"),
       ("moe_intermediate_size", "intermediate_size"))  # fmt: skip
# Gemma4TextConfig's per-layer input embeddings: (its key, the config class's default, the decoder's field)
PER_LAYER = (("hidden_size_per_layer_input", 256, "per_layer_input"),
             ("vocab_size_per_layer_input", 262144, "per_layer_vocab"))  # fmt: skip


def read(arch: Architecture, config: Mapping[str, Any], where: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Gemma 3's model-wide fields (``read_layout``) with Gemma 4's: the logit scale 1.0 (``Gemma4TextAttention.
    scaling``; Gemma 3's ``query_pre_attn_scalar`` is not read, as transformers' Gemma 4 never reads it), and its
    unbuilt features refused by their keys (module doc).
    """  # noqa: D205
    if config.get("use_bidirectional_attention") == "all":
        raise SpecError(f"{where}: use_bidirectional_attention", "is 'all': bidirectional attention (no causal mask) "
                        "is not built; a decoder is causal")  # fmt: skip
    types, count = config.get("layer_types"), config.get("num_hidden_layers")
    if types is None and isinstance(count, int) and count % 6:  # the class's pattern, then the last layer forced full
        raise SpecError(f"{where}: layer_types", f"missing with {count} layers: transformers' Gemma 4 makes every 6th "
                        "layer full and forces the last one full too; give layer_types (a saved config has them)")
    if isinstance(types, list) and types and types[-1] != "full_attention":
        raise SpecError(f"{where}: layer_types", f"ends with {types[-1]!r}: transformers' Gemma 4 forces the last "
                        "layer to full_attention (a warning), so the config says two things; make it full_attention")
    fields, sources = read_layout(arch, config, where)
    fields["attn_scale"], sources["attn_scale"] = 1.0, "Gemma4TextAttention.scaling = 1.0 (architecture)"
    width = config.get("hidden_size_per_layer_input", 256)
    for key, default, name in PER_LAYER if width else ():  # null or 0: none (the modeling code's ``if``)
        value = config[key] if key in config else default
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"{where}: {key}", f"must be a whole number >= 1 (0 or null on hidden_size_per_layer_input"
                            f": no per-layer input embeddings), got {value!r}")  # fmt: skip
        fields[name] = value
        sources[name] = key if key in config else f"absent: Gemma4TextConfig's default {key} {default}"
    return fields, sources


def changes(config: Mapping[str, Any], where: str, layout: Mapping[str, Any]) -> tuple[list[dict[str, object]],
                                                                                   dict[str, str]]:  # fmt: skip
    """Per layer: under ``attention_k_eq_v`` the full layers read their values off the key projection (``k_eq_v``;
    ``Gemma4TextAttention.use_alternative_attention``), the sliding ones keep their v_proj; the last
    ``num_kv_shared_layers`` read their keys and values from an earlier layer (``kv_from``, ``shared``).
    """  # noqa: D205
    count = int(layout["num_layers"])
    types = config.get("layer_types") or ["full_attention" if (i + 1) % 6 == 0 or i == count - 1 else
                                          "sliding_attention" for i in range(count)]  # fmt: skip
    out: list[dict[str, object]] = [{} for _ in range(count)]
    said: dict[str, str] = {}
    if config.get("attention_k_eq_v"):
        out = [{"k_eq_v": True} if t == "full_attention" else {} for t in types]
        said["k_eq_v"] = "attention_k_eq_v (the full layers: values off the key projection)"
    for i, layer in enumerate(shared(config, where, types, int(layout["intermediate_size"]))):
        out[i] |= layer
    if any("kv_from" in layer for layer in out):
        said["kv_from"] = ("num_kv_shared_layers (the last ones read the last earlier layer of their type: "
                           "Gemma4TextConfig.kv_sharing_modes)")
    if config.get("enable_moe_block"):  # null or absent: off (the class's default False, the modeling code's ``if``)
        moe = experts(config, where)
        for layer in out:
            dense = int(str(layer.get("intermediate_size", layout["intermediate_size"])))  # a double-wide MLP's too
            if dense % moe["intermediate_size"]:
                raise SpecError(f"{where}: intermediate_size", f"{dense} is not a multiple of moe_intermediate_size "
                                f"({moe['intermediate_size']}): Gemma 4's MLP beside its experts is built as "
                                "n_shared_experts x moe_intermediate_size wide (26B-A4B: 3 x 704)")  # fmt: skip
            layer |= moe | {"n_shared_experts": dense // moe["intermediate_size"]}
        said["experts"] = ("enable_moe_block: num_experts, top_k_experts, moe_intermediate_size; the MLP beside them "
                           "(intermediate_size) as n_shared_experts x moe_intermediate_size")  # fmt: skip
    return out, said


def experts(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The layer fields of Gemma 4's mixture (``MOE``; ``components.gemma4_moe``), each key a whole number >= 1
    (transformers' class defaults are None: the config must give them), top_k_experts at most num_experts.
    """  # noqa: D205
    sizes: dict[str, int] = {}
    for key, name in MOE:
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"{where}: {key}", f"must be a whole number >= 1 with enable_moe_block, got {value!r}")
        sizes[name] = value
    if sizes["experts_per_token"] > sizes["num_experts"]:
        raise SpecError(f"{where}: top_k_experts", f"must be at most num_experts ({sizes['num_experts']}), got "
                        f"{sizes['experts_per_token']}")  # fmt: skip
    return {"mlp": "moe", "router": "gemma4", "expert": "gated", **sizes}


def shared(config: Mapping[str, Any], where: str, types: list[str], inner: int) -> list[dict[str, object]]:
    """Per layer what key/value sharing changes (transformers 5.23's ``Gemma4TextConfig.kv_sharing_modes``): the last
    ``num_kv_shared_layers`` layers "reuse" the keys and values of the last layer before them of their own type
    (``kv_from``; no k_proj, v_proj, k_norm or v_norm of their own: ``Gemma4TextAttention``), their MLP twice as wide
    under ``use_double_wide_mlp`` (``Gemma4TextMLP``). A type that only shared layers have is one line (transformers
    raises).
    """  # noqa: D205
    count = len(types)
    n = config.get("num_kv_shared_layers") or 0
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < count:
        raise SpecError(f"{where}: num_kv_shared_layers", f"must be a whole number from 0 to {count - 1} (the layers "
                        f"that read an earlier layer's keys and values), got {n!r}")  # fmt: skip
    first = count - n
    out: list[dict[str, object]] = [{} for _ in range(count)]
    for i in range(first, count):
        earlier = [j for j in range(first) if types[j] == types[i]]
        if not earlier:
            raise SpecError(f"{where}: num_kv_shared_layers", f"{n} leaves no layer before layer {first} of type "
                            f"{types[i]!r} to compute layer {i}'s keys and values (transformers raises)")  # fmt: skip
        out[i] = {"kv_from": earlier[-1], "v_norm": False, "k_eq_v": False}
        if config.get("use_double_wide_mlp"):
            out[i]["intermediate_size"] = 2 * inner
    return out


_NAMES = {**GEMMA3.names, "layers.{i}.layer_scalar": "model.layers.{i}.layer_scalar",
          # the per-layer input embeddings (``decoder.per_layer``)
          "embed_per_layer": "model.embed_tokens_per_layer.weight",
          "per_layer_model_projection": "model.per_layer_model_projection.weight",
          "per_layer_projection_norm.weight": "model.per_layer_projection_norm.weight",
          "layers.{i}.per_layer_input_gate": "model.layers.{i}.per_layer_input_gate.weight",
          "layers.{i}.per_layer_projection": "model.layers.{i}.per_layer_projection.weight",
          "layers.{i}.per_layer_norm.weight": "model.layers.{i}.post_per_layer_input_norm.weight",
          # the mixture beside the MLP (``components.gemma4_moe``)
          "layers.{i}.router_proj": "model.layers.{i}.router.proj.weight",
          "layers.{i}.router_scale": "model.layers.{i}.router.scale",
          "layers.{i}.router_expert_scale": "model.layers.{i}.router.per_expert_scale",
          "layers.{i}.experts_gate_up_rows": "model.layers.{i}.experts.gate_up_proj",
          "layers.{i}.experts_down_rows": "model.layers.{i}.experts.down_proj",
          "layers.{i}.post_mlp_norm.weight": "model.layers.{i}.post_feedforward_layernorm_1.weight",
          "layers.{i}.pre_experts_norm.weight": "model.layers.{i}.pre_feedforward_layernorm_2.weight",
          "layers.{i}.post_experts_norm.weight": "model.layers.{i}.post_feedforward_layernorm_2.weight"}  # fmt: skip
ARCHITECTURE = replace(
    GEMMA3,
    model_type="gemma4_text",
    names=_NAMES,
    norm="rms_wide",  # Gemma4RMSNorm: normed * weight in float32, then cast (Gemma 3's was 1 + weight)
    layer_fields={"qk_norm": "rms", "v_norm": True, "layer_scale": True},
    # no attention soft cap either; the mixture's keys read where enable_moe_block is on (``changes``)
    keys=replace(GEMMA3.keys, scale_key="", reads=("final_logit_softcapping", "num_experts", "moe_intermediate_size")),
    read=read,
    changes=changes,
    # every 6th layer full, the rest sliding (no pattern key: the config class's ``sliding_window_pattern = 6``);
    # each layer type's rope_parameters given by the config (the class fills in both: a saved config has them)
    hook=ConfigHook("gemma4_text", reads_layer_types=True, pattern="every-nth", pattern_every=6,
                    theta_required="Gemma 4's RoPE is per layer type (sliding: default, theta 1e4; full: proportional "
                    "0.25, theta 1e6): give rope_parameters nested by layer type, as transformers saves it",
                    global_head_dim=512),
    wrappers=("gemma4",),  # Gemma 4 ships as gemma4, the text model's config under text_config
)
