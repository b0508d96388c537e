"""DeepSeek V3 (and Kimi K2, whose checkpoints say ``model_type: deepseek_v3``): latent attention (MLA,
``components.latent``) on every layer; dense gated-SiLU MLPs on the first ``first_k_dense_replace`` layers, DeepSeek's
mixture (``components.moe``: the grouped sigmoid router with its correction bias, routed experts of
``moe_intermediate_size``, shared experts) on the rest; RMSNorm; interleaved RoPE pairs on the ``qk_rope_head_dim``
slice of each head only (``hf``), YaRN with ``mscale`` / ``mscale_all_dim``.

transformers 5.23's ``DeepseekV3Config`` and ``modeling_deepseek_v3`` say each field read here; ``read`` names the key
each came from. A decoder composes the latent component (its expanded cache) and the grouped mixture over these
layers (``decoder.export``, ``decoder.oracle``).
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ropeexport.architectures.base import Architecture, Keys, number, read_layout
from ropeexport.architectures.feedforward import FeedForward
from ropeexport.architectures.hooks import interleaved
from ropeexport.architectures.layers import AttentionLayer, LayerSpec
from ropeexport.architectures.llama import NAMES
from ropeexport.errors import SpecError
from ropeexport.specs import require_int

# The checkpoint's names (transformers 5.23's DeepseekV3ForCausalLM, as save_pretrained writes it): the latent
# attention's projections under ``components.latent``'s canonical names, the dense layers' MLP as Llama's, the
# mixture's under ``components.grouped_moe.shared_moe``'s (each expert's gate, up and down apart, as saved:
# transformers 5 fuses them in memory only).
NAMES_V3 = {
    **{k: v for k, v in NAMES.items() if "self_attn" not in v and ".mlp." not in v},
    "layers.{i}.q_proj": "model.layers.{i}.self_attn.q_proj.weight",  # q_lora_rank null: a plain query projection
    "layers.{i}.q_a_proj": "model.layers.{i}.self_attn.q_a_proj.weight",
    "layers.{i}.q_a_norm": "model.layers.{i}.self_attn.q_a_layernorm.weight",
    "layers.{i}.q_b_proj": "model.layers.{i}.self_attn.q_b_proj.weight",
    "layers.{i}.kv_a_proj": "model.layers.{i}.self_attn.kv_a_proj_with_mqa.weight",
    "layers.{i}.kv_a_norm": "model.layers.{i}.self_attn.kv_a_layernorm.weight",
    "layers.{i}.kv_b_proj": "model.layers.{i}.self_attn.kv_b_proj.weight",
    "layers.{i}.o_proj": "model.layers.{i}.self_attn.o_proj.weight",
    "layers.{i}.gate_proj": "model.layers.{i}.mlp.gate_proj.weight",
    "layers.{i}.up_proj": "model.layers.{i}.mlp.up_proj.weight",
    "layers.{i}.down_proj": "model.layers.{i}.mlp.down_proj.weight",
    "layers.{i}.router_proj": "model.layers.{i}.mlp.gate.weight",
    "layers.{i}.router_correction": "model.layers.{i}.mlp.gate.e_score_correction_bias",
    "layers.{i}.experts_gate_proj": "model.layers.{i}.mlp.experts.{e}.gate_proj.weight",
    "layers.{i}.experts_up_proj": "model.layers.{i}.mlp.experts.{e}.up_proj.weight",
    "layers.{i}.experts_down_proj": "model.layers.{i}.mlp.experts.{e}.down_proj.weight",
    "layers.{i}.shared_gate_proj": "model.layers.{i}.mlp.shared_experts.gate_proj.weight",
    "layers.{i}.shared_up_proj": "model.layers.{i}.mlp.shared_experts.up_proj.weight",
    "layers.{i}.shared_down_proj": "model.layers.{i}.mlp.shared_experts.down_proj.weight",
}
# The keys ``base.REFUSED_KEYS`` lists that this type reads (each below, with its source).
READS = ("n_routed_experts", "moe_intermediate_size", "kv_lora_rank", "q_lora_rank")
# DeepseekV3Config's defaults where a key is absent (transformers 5.23), each said in the field's source.
DEFAULTS = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "v_head_dim": 128,
            "n_routed_experts": 256, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
            "routed_scaling_factor": 2.5, "norm_topk_prob": True, "n_shared_experts": 1,
            "first_k_dense_replace": 3, "moe_intermediate_size": 2048, "intermediate_size": 18432}  # fmt: skip
# (the config class's name, its defaults): what a type that reads DeepSeek V3's keys with other defaults hands
# ``read`` (glm4_moe_lite's Glm4MoeLiteConfig)
Defaults = tuple[str, Mapping[str, Any]]


# Each field read here: its key, its kind (size: an integer >= 1; count: >= 0; factor: a number > 0; flag).
FIELDS = (("kv_lora_rank", "kv_lora_rank", "size"), ("qk_nope_head_dim", "qk_nope_head_dim", "count"),
          ("v_head_dim", "v_head_dim", "size"), ("n_routed_experts", "num_experts", "size"),
          ("num_experts_per_tok", "experts_per_token", "size"), ("n_group", "n_group", "size"),
          ("topk_group", "topk_group", "size"), ("routed_scaling_factor", "routed_scaling_factor", "factor"),
          ("norm_topk_prob", "norm_topk_prob", "flag"), ("n_shared_experts", "n_shared_experts", "count"),
          ("moe_intermediate_size", "intermediate_size", "size"))  # fmt: skip


def field_value(config: Mapping[str, Any], where: str, key: str, kind: str,
           defaults: Defaults = ("DeepseekV3Config", DEFAULTS)) -> tuple[Any, str]:  # fmt: skip
    """(config[key] checked as ``kind``, its source); the config class's default (``defaults``) when absent."""
    value = config.get(key)
    if value is None:
        return defaults[1][key], f"default ({defaults[1][key]}, transformers' {defaults[0]})"
    if kind == "flag":
        if not isinstance(value, bool):
            raise SpecError(f"{where}: {key}", f"must be true or false, got {value!r}")
        return value, key
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise SpecError(f"{where}: {key}", f"must be a finite number, got {value!r}")
    if kind == "factor":
        if not value:
            raise SpecError(f"{where}: {key}", f"must be a number > 0, got {value!r}")
        return float(value), key
    if kind == "count" and value == 0:
        return 0, key
    return number(where, key, value), key


def read(arch: Architecture, config: Mapping[str, Any], where: str = "config.json",
         defaults: Defaults = ("DeepseekV3Config", DEFAULTS)) -> tuple[dict[str, Any], dict[str, str]]:  # fmt: skip
    """The decoder's model-wide fields of a DeepSeek V3 config (the default layer: latent attention, the mixture;
    ``dense_layers`` the first ones), each with its key, ``defaults`` where a key is absent; SpecError naming the key
    at fault (one line).
    """  # noqa: D205
    from ropeexport.components.latent import softmax_scale  # onnx-free; lazily: components import the catalog

    if config.get("kv_lora_rank") is not None and config.get("qk_rope_head_dim") is None:
        raise SpecError(f"{where}: qk_rope_head_dim", "missing: kv_lora_rank (latent attention) rotates only the "
                        "qk_rope_head_dim slice of each head; the config must say its width")  # fmt: skip
    if config.get("rope_interleave") is False:
        raise SpecError(f"{where}: rope_interleave", "false is not built: DeepSeek V3's rotary pairs are read as "
                        "interleaved (2i, 2i + 1), transformers' default (rope_interleave true)")  # fmt: skip
    if config.get("attention_bias"):
        raise SpecError(f"{where}: attention_bias", "true is not built: DeepSeek V3's attention projections have "
                        "no bias here")  # fmt: skip
    fields, sources = read_layout(replace(arch, layer_fields={}), config, where)
    del fields["intermediate_size"], sources["intermediate_size"]  # the dense layers' (``dense_layers``)
    q_rank = config.get("q_lora_rank", defaults[1]["q_lora_rank"])  # null: a plain q_proj (DeepSeek-V2-Lite)
    fields["q_lora_rank"] = 0 if q_rank is None else number(where, "q_lora_rank", q_rank)
    sources["q_lora_rank"] = ("q_lora_rank (null: a plain q_proj)" if "q_lora_rank" in config
                              else f"default ({defaults[1]['q_lora_rank']}, transformers' {defaults[0]})")  # fmt: skip
    for key, name, kind in FIELDS:
        fields[name], sources[name] = field_value(config, where, key, kind, defaults)
    experts, groups = fields["num_experts"], fields["n_group"]
    if experts % groups:
        raise SpecError(f"{where}: n_group", f"must divide n_routed_experts ({experts}), got {groups}")
    if fields["experts_per_token"] > experts:
        raise SpecError(f"{where}: num_experts_per_tok", f"must be at most n_routed_experts ({experts}), got "
                        f"{fields['experts_per_token']}")  # fmt: skip
    rope = number(where, "qk_rope_head_dim", config["qk_rope_head_dim"]) if "qk_rope_head_dim" in config else 64
    parameters = config.get("rope_parameters") or config.get("rope_scaling") or {}
    fields["attn_scale"] = softmax_scale(int(fields["qk_nope_head_dim"]) + int(rope), parameters)
    sources["attn_scale"] = ("(qk_nope_head_dim + qk_rope_head_dim) ** -0.5, times mscale(factor, mscale_all_dim) "
                             "** 2 under YaRN (transformers' yarn_apply_mscale)")  # fmt: skip
    return fields, sources


def dense_layers(config: Mapping[str, Any], count: int, where: str = "config.json",
                 defaults: Defaults = ("DeepseekV3Config", DEFAULTS)) -> list[dict[str, object]]:  # fmt: skip
    """Per layer the fields where it differs from the default one: the first ``first_k_dense_replace`` layers are
    dense gated MLPs of ``intermediate_size``, no experts (transformers' ``DeepseekV3DecoderLayer``; Mistral 4's and
    DeepSeek V2's alike), ``defaults`` where a key is absent.
    """  # noqa: D205
    k, _ = field_value(config, where, "first_k_dense_replace", "count", defaults)
    if not k:
        return [{} for _ in range(count)]
    width, _ = field_value(config, where, "intermediate_size", "size", defaults)
    return [dense_mlp(width) if i < k else {} for i in range(count)]


def dense_mlp(width: int) -> dict[str, object]:
    """A dense layer's fields where they differ from the default (mixture) layer's: a gated MLP ``width`` wide."""
    return {"mlp": "gated", "intermediate_size": width, "num_experts": 0, "experts_per_token": 0, "router": "",
            "n_group": 0, "topk_group": 0, "norm_topk_prob": False, "routed_scaling_factor": 0.0,
            "n_shared_experts": 0}  # fmt: skip


Changes = Callable[[Mapping[str, Any], str, Mapping[str, Any]], tuple[list[dict[str, object]], dict[str, str]]]


def dense_changes(defaults: Defaults = ("DeepseekV3Config", DEFAULTS)) -> Changes:
    """``Architecture.changes`` of a type whose first ``first_k_dense_replace`` layers are dense (``dense_layers``,
    its config class's ``defaults`` where a key is absent: DeepSeek V3's, V2's, Mistral 4's) and the keys they come
    from.
    """  # noqa: D205

    def changes(config: Mapping[str, Any], where: str,
                layout: Mapping[str, Any]) -> tuple[list[dict[str, object]], dict[str, str]]:  # fmt: skip
        said = dense_layers(config, int(layout["num_layers"]), where, defaults)
        return said, ({"dense first layers": "first_k_dense_replace, intermediate_size"} if any(said) else {})

    return changes


_changes = dense_changes()


def layer(arch: Architecture, fields: Mapping[str, Any]) -> LayerSpec:
    """The default layer: latent attention (one key/value head per query head; the position's head_dim is the rope
    slice) and DeepSeek's mixture; RMSNorm before each, a sequential residual.
    """  # noqa: D205
    position = fields["position"]
    if not isinstance(position, Mapping):
        raise SpecError("position", f"must be a table of the encoding's fields, got {position!r}")
    heads = require_int("position.num_heads", position.get("num_heads"), 1)
    attention = AttentionLayer(heads, heads, require_int("position.head_dim", position.get("head_dim"), 1),
                               kind="latent", scale=fields.get("attn_scale", 0.0),
                               q_lora_rank=fields.get("q_lora_rank", 0), kv_lora_rank=fields.get("kv_lora_rank", 0),
                               qk_nope_head_dim=fields.get("qk_nope_head_dim", 0),
                               v_head_dim=fields.get("v_head_dim", 0))  # fmt: skip
    ffn = FeedForward("moe", fields["act"], fields["intermediate_size"], experts=fields.get("num_experts", 0),
                      top_k=fields.get("experts_per_token", 0), router=fields.get("router", "grouped"),
                      groups=fields.get("n_group", 0),
                      topk_group=fields.get("topk_group", 0), norm_topk_prob=fields.get("norm_topk_prob", False),
                      scaling=fields.get("routed_scaling_factor", 0.0),
                      shared=fields.get("n_shared_experts", 0))  # fmt: skip
    return LayerSpec(attention, ffn, position, query_scale=fields.get("query_scale"))


ARCHITECTURE = Architecture(
    "deepseek_v3",
    base="model.",
    names=NAMES_V3,
    keys=Keys(eps=("rms_norm_eps",), eps_default=1e-6, reads=READS),
    read=read,
    layer=layer,
    changes=_changes,
    hook=interleaved("deepseek_v3", "view_as_complex", shared_rope_key=True),
    # the multi-token prediction layer the released checkpoints carry, not part of transformers' model
    # (DeepseekV3PreTrainedModel._keys_to_ignore_on_load_unexpected)
    passed_over=r"model\.layers\.61\.",
)
