"""What an architecture is: ``Architecture``, its config hook (``Keys``, ``read_layout``) and its layer builder.

Torch-free. An architecture says three things about a transformers ``model_type``:

- what its model computes around the layers (``norm``, ``embed_scale``) and where each weight sits in its
  checkpoint (``names``, ``base``, ``aliases``, ``fused_qkv``);
- how its config reads (``Keys`` and ``read_layout``, or a ``read`` hook of its own): the decoder's model-wide fields,
  each with the config key it came from; a key that changes the computation in a way nothing here expresses is a
  one-line error naming it, never a guess (``REFUSED_KEYS``);
- what each layer computes (``layer``: the builder, the model's fields -> its default ``LayerSpec``; ``layer_fields``:
  what every layer of the type computes beyond its config's fields, in the layer's wire names, e.g. Qwen3's
  ``{"qk_norm": "rms"}``). Where layers differ (windows, encodings, no RoPE), ``ropeexport.hf`` says so per layer.

Canonical weight names (``decoder.checkpoint``), each stored as MatMul reads it ([in, out]; transformers' ``nn.Linear``
keeps [out, in]): ``embed`` [vocab, hidden], ``embed_norm.weight|bias``, per layer ``layers.{i}.`` +
``norm1.weight|bias``, ``q_proj k_proj v_proj o_proj`` and ``q_bias k_bias v_bias o_bias``, ``q_norm k_norm``
[head_dim] (per-head norms before the rotation), ``norm2.weight|bias``, ``gate_proj up_proj down_proj`` and
``up_bias down_bias``; ``final_norm.weight|bias``, ``lm_head`` [hidden, vocab], ``lm_head_bias``. gpt-oss's layers add
``sinks`` [heads] and, in place of the MLP, a mixture of experts (``components.moe``): ``router_proj`` [hidden, E],
``router_bias`` [E], ``experts_gate_proj experts_up_proj`` [E, hidden, m], ``experts_down_proj`` [E, m, hidden] and
``experts_gate_bias experts_up_bias`` [E, m], ``experts_down_bias`` [E, hidden].
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ropeexport.architectures.feedforward import FeedForward
from ropeexport.architectures.hooks import ConfigHook
from ropeexport.architectures.layers import RESIDUAL_NORMS, AttentionLayer, LayerSpec
from ropeexport.errors import SpecError
from ropeexport.specs import require_int

# Activations by their transformers names -> the formula the graph and the float64 recompute write out.
ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",  # erf form
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "bloom_gelu": "gelu_tanh",  # BLOOM's tanh approximation (its 0.79788456 is sqrt(2/pi) to 8 digits)
    "relu": "relu",
}
# A model's norms, by what they compute (``components.norm``): (kind, offset, wide). ``rms``: Llama's RMSNorm, the
# normed cast to the dtype, then times the weight; ``rms_gemma``: normed * (1 + weight) in float32, then cast;
# ``rms_wide``: times the weight in float32, then cast (gpt-oss); ``layer``: LayerNorm with its bias.
NORMS = {"rms": ("rms", 0.0, False), "rms_gemma": ("rms", 1.0, False), "rms_wide": ("rms", 0.0, True),
         "layer": ("layer", 0.0, False)}  # fmt: skip
# A config key whose presence (with a value that changes the computation) no architecture here expresses, unless the
# architecture's ``Keys.reads`` says it reads it.
REFUSED_KEYS = {
    "num_local_experts": "a mixture of experts outside gpt-oss and qwen3_moe",
    "num_experts": "a mixture of experts outside gpt-oss and qwen3_moe",
    "n_routed_experts": "a mixture of experts",
    "moe_intermediate_size": "a mixture of experts outside qwen3_moe",
    "quantization_config": "quantized weights (gpt-oss ships MXFP4 experts): dequantize them into a float checkpoint",
    "kv_lora_rank": "multi-head latent attention",
    "q_lora_rank": "multi-head latent attention",
    "mrope_section": "multimodal RoPE sections",
    "attn_logit_softcapping": "soft-capped attention logits",
    "final_logit_softcapping": "soft-capped output logits",
    "qk_layernorm": "norms on query and key",
    "apply_residual_connection_post_layernorm": "BLOOM's residual taken after the norm",
    "slow_but_exact": "BLOOM's tensor-parallel slicing of its linears",
}
SOFTCAPS = {"attn_logit_softcapping": "attn_softcap", "final_logit_softcapping": "final_softcap"}
MOE_KEYS = ("num_local_experts", "num_experts")  # what a mixture's config names its expert count
# gpt-oss's clamped SwiGLU where the config has no value: transformers' GptOssConfig defaults.
SWIGLU_DEFAULTS = {"swiglu_alpha": 1.702, "swiglu_limit": 7.0}
Flag = tuple[str, bool] | bool  # (config key, transformers' default when absent), or a fixed answer


@dataclass(frozen=True)
class Keys:
    """How a model type's config names the decoder's model-wide fields (``read_layout``).

    ``eps``, ``act``, ``inner``: the keys tried in order (``eps_default``, ``act_default``: transformers' value when
    none is set; ``inner_factor`` > 0: the inner width is that times hidden when unset, GPT-J and BLOOM). The biases:
    ``Flag``s. ``windowed``: the config's ``sliding_window`` applies to every layer (Mistral, Phi-3). ``scale_key``: the
    key whose value ** -0.5 is the logit scale (Gemma: query_pre_attn_scalar). ``reads``: keys of ``REFUSED_KEYS`` this
    type reads (Gemma's soft caps, gpt-oss's expert counts).
    """

    eps: tuple[str, ...]
    eps_default: float = 1e-5
    act: tuple[str, ...] = ("hidden_act",)
    act_default: str = "silu"
    inner: tuple[str, ...] = ("intermediate_size",)
    inner_factor: int = 0
    qkv_bias: Flag = False
    o_bias: Flag = False
    mlp_bias: Flag = False
    tie_default: bool = False
    windowed: bool = False
    scale_key: str = ""
    reads: tuple[str, ...] = ()


Reader = Callable[["Architecture", Mapping[str, Any], str], tuple[dict[str, Any], dict[str, str]]]
Builder = Callable[["Architecture", Mapping[str, Any]], LayerSpec]
# (config, where, the model-wide fields) -> per layer the wire fields where its feed-forward differs from the default
# layer's (Qwen3-MoE's dense layers among sparse ones, DeepSeek's dense first layers), and {what: the config keys it
# came from}
Changes = Callable[[Mapping[str, Any], str, Mapping[str, Any]], tuple[list[dict[str, object]], dict[str, str]]]


def standard_layer(arch: Architecture, fields: Mapping[str, Any]) -> LayerSpec:
    """The default layer of a decoder's model-wide fields (decoder.json's: ``position`` with the model's heads and
    head_dim, ``sliding_window``, the biases, ``attn_scale``, ``attn_softcap``, the MLP's ``act``,
    ``intermediate_size`` and experts, ``residual``), with what the type adds (``arch.layer_fields``).
    """  # noqa: D205
    position = fields["position"]
    if not isinstance(position, Mapping):
        raise SpecError("position", f"must be a table of the encoding's fields, got {position!r}")
    heads = require_int("position.num_heads", position.get("num_heads"), 1)
    kv = require_int("position.num_kv_heads", position.get("num_kv_heads") or heads, 1)
    head_dim = require_int("position.head_dim", position.get("head_dim"), 1)
    window = require_int("sliding_window", fields.get("sliding_window") or 0, 0)
    attention = AttentionLayer(heads, kv, head_dim,
                               mask="sliding" if window else "full", window=window,
                               scale=fields.get("attn_scale", 0.0), softcap=fields.get("attn_softcap", 0.0),
                               qkv_bias=fields.get("qkv_bias", False), o_bias=fields.get("o_bias", False))  # fmt: skip
    extra = dict(arch.layer_fields)
    kind = str(extra.pop("mlp", "gated"))
    moe = {}
    if kind == "moe":
        moe = {"experts": fields.get("num_experts", 0), "top_k": fields.get("experts_per_token", 0),
               "router": extra.pop("router", ""), "swiglu_alpha": fields.get("swiglu_alpha", 0.0),
               "swiglu_limit": fields.get("swiglu_limit", 0.0),
               "expert": extra.pop("expert", "clamped_swiglu")}  # fmt: skip
    ffn = FeedForward(kind, fields["act"], fields["intermediate_size"], fields.get("mlp_bias", False), **moe)
    residual = fields["residual"]
    layer = LayerSpec(attention, ffn, position, RESIDUAL_NORMS.get(residual, ()), residual,
                      query_scale=fields.get("query_scale"))
    return layer.with_fields(extra) if extra else layer


@dataclass(frozen=True)
class Architecture:
    """One transformers model type: its computation around the layers, its checkpoint names, its config hook and
    its layer builder (module doc).

    ``names`` maps a canonical weight (``{i}`` the layer) to its checkpoint key; ``base`` is the body's checkpoint
    prefix ("model.", "transformer.", "gpt_neox."), optional in checkpoints; ``aliases``: older names of the same
    tensor. ``fused_qkv``: how a fused projection splits, ``contiguous`` ([q; k; v] rows, Phi-3) or ``per-head``
    ([H, 3, d] rows, GPT-NeoX and BLOOM). ``norm``: every norm of the model (``NORMS``). ``embed_scale``: the
    embeddings times sqrt(hidden_size), rounded to the dtype (Gemma). ``residual``: the layers' residual form unless
    the config hook says otherwise. ``changes``: what differs per layer beyond its encoding and window, read from the
    config (``Changes``; None: nothing). ``passed_over``: a pattern of the checkpoint keys transformers ignores when
    they are not the model's (its ``_keys_to_ignore_on_load_unexpected``: DeepSeek V3's multi-token prediction layer
    61, GLM-4.7-Flash's 47), passed over by the reader likewise; any other unexpected tensor is still refused.
    """  # noqa: D205

    model_type: str
    base: str
    names: Mapping[str, str]
    keys: Keys
    norm: str = "rms"
    residual: str = "sequential"
    embed_scale: bool = False
    fused_qkv: str = ""
    aliases: Mapping[str, str] = field(default_factory=dict)
    layer_fields: Mapping[str, object] = field(default_factory=dict)
    read: Reader | None = None  # a config hook of its own; None: ``read_layout``
    layer: Builder = standard_layer
    hook: ConfigHook | None = None  # how its config says its encoding per layer; None: RoPE in halves, theta 1e4
    wrappers: tuple[str, ...] = ()  # multimodal model types whose ``text_config`` is this type's (Gemma 3's gemma3)
    changes: Changes | None = None
    passed_over: str = ""
    # a latent layer's LoRA norms' eps (``decoder.parts.latent_spec``): DeepSeek V3's RMSNorm default 1e-6 whatever
    # the config says; 0: the model's norm_eps (Mistral Large 4's kv_a_layernorm takes rms_norm_eps)
    latent_norm_eps: float = 1e-6
    # (a checkpoint tensor under the text model's ``model.`` prefix, the rope scaling parameter it is read into) of a
    # RoPE learned as a buffer (Mistral Large 4's LeRoPE alpha: ``hf.learned_rope``); () none
    rope_buffer: tuple[str, ...] = ()

    @property
    def config_hook(self) -> ConfigHook:
        """How ``ropeexport.hf`` reads this type's encoding per layer (``hooks.ConfigHook``)."""
        return self.hook if self.hook is not None else ConfigHook(self.model_type)

    @property
    def mlp(self) -> str:
        """The feed-forward every layer has unless said otherwise: gated, plain or moe."""
        return str(self.layer_fields.get("mlp", "gated"))

    def has(self, canonical: str) -> bool:
        """Whether the checkpoint holds this canonical weight (``embed_norm.weight``, ``lm_head_bias``, ...)."""
        return canonical in self.names

    def layout(self, config: Mapping[str, Any], where: str = "config.json") -> tuple[dict[str, Any], dict[str, str]]:
        """The decoder's model-wide fields of ``config``, with the key each came from (``read`` or ``read_layout``)."""
        return (self.read or read_layout)(self, config, where)

    def default_layer(self, fields: Mapping[str, Any]) -> LayerSpec:
        """The layer every layer of a decoder with these model-wide fields is, unless said otherwise."""
        return self.layer(self, fields)


def _neutral(value: Any) -> bool:
    """A value that leaves the computation as it is: absent, false, empty, or a count of 0 or 1 (one expert)."""
    if value is None or isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value in (0, 1)
    return value in ([], {}, "")


def refuse_unread(config: Mapping[str, Any], where: str, reads: tuple[str, ...] = ()) -> None:
    """SpecError naming the first key of ``REFUSED_KEYS`` that changes the computation and is not in ``reads``."""
    for key, what in REFUSED_KEYS.items():
        value = config.get(key)
        if _neutral(value) or key in reads:
            continue
        raise SpecError(f"{where}: {key}", f"is not supported by the decoder artifact: {what} ({key} = {value!r})")
    scaling = config.get("rope_scaling") or config.get("rope_parameters") or {}
    if isinstance(scaling, Mapping) and scaling.get("mrope_section") and "mrope_section" not in reads:
        raise SpecError(f"{where}: rope_scaling.mrope_section", "is not supported by the decoder artifact: mrope")


def number(where: str, key: str, value: Any, fraction: bool = False) -> int | float:
    """A size (a positive integer; an integral float is accepted) or, with ``fraction``, a number in (0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{where}: {key}", f"must be a number, got {value!r}")
    if fraction:
        if not 0 < value < 1:
            raise SpecError(f"{where}: {key}", f"must be in (0, 1), got {value!r}")
        return float(value)
    if not float(value).is_integer() or value < 1:
        raise SpecError(f"{where}: {key}", f"must be a positive integer, got {value!r}")
    return int(value)


def _flag(config: Mapping[str, Any], answer: Flag) -> bool:
    if isinstance(answer, bool):
        return answer
    key, default = answer
    return default if config.get(key) is None else bool(config[key])


def read_layout(
    arch: Architecture, config: Mapping[str, Any], where: str = "config.json"
) -> tuple[dict[str, Any], dict[str, str]]:
    """The decoder's model-wide fields from a transformers config, and the key each came from.

    Sizes: layers, hidden_size, intermediate_size, vocab_size, norm_eps, act, residual, biases, tie_embeddings,
    sliding_window; the logit scale, soft caps and experts where the type reads them. The positional encoding's fields
    come from ``ropeexport.hf`` (the same import every artifact uses).
    """
    keys = arch.keys
    refuse_unread(config, where, keys.reads)
    fields: dict[str, Any] = {"model_type": arch.model_type}
    sources: dict[str, str] = {}

    def take(name: str, names: tuple[str, ...], default: Any = None) -> None:
        for key in names:
            if config.get(key) is not None:
                fields[name], sources[name] = number(where, key, config[key], name == "norm_eps"), key
                return
        if default is None:
            raise SpecError(f"{where}: {names[0]}", f"missing: the config has none of {', '.join(names)}")
        fields[name], sources[name] = default, "default"

    take("num_layers", ("num_hidden_layers", "n_layer", "num_layers"))
    take("hidden_size", ("hidden_size", "n_embd", "n_embed"))
    take("vocab_size", ("vocab_size",))
    take("norm_eps", keys.eps, keys.eps_default)
    take("intermediate_size", keys.inner, keys.inner_factor * int(fields["hidden_size"]) or None)
    act = next((config[k] for k in keys.act if config.get(k) is not None), keys.act_default)
    sources["act"] = next((k for k in keys.act if config.get(k) is not None), "architecture")
    if not isinstance(act, str) or act not in ACTIVATIONS:
        key = keys.act[0] if keys.act else "hidden_act"
        raise SpecError(f"{where}: {key}", f"activation {act!r} is not built; allowed: {', '.join(ACTIVATIONS)}")
    fields["act"] = ACTIVATIONS[act]
    fields["residual"] = arch.residual
    fields["qkv_bias"], fields["o_bias"] = _flag(config, keys.qkv_bias), _flag(config, keys.o_bias)
    fields["mlp_bias"] = _flag(config, keys.mlp_bias)
    tie = config.get("tie_word_embeddings")
    fields["tie_embeddings"] = keys.tie_default if tie is None else bool(tie)
    sources["tie_embeddings"] = "tie_word_embeddings" if tie is not None else "architecture"
    # Qwen2's sliding_window applies only with use_sliding_window (per layer: ``hf``); Llama's configs have none.
    window = config.get("sliding_window") if keys.windowed else None
    fields["sliding_window"] = window or 0
    sources["sliding_window"] = "sliding_window" if window else "none"
    if arch.mlp == "moe":
        _experts(config, where, fields, sources, arch.layer_fields.get("expert", "clamped_swiglu") == "clamped_swiglu")
    if keys.scale_key:
        scalar = config.get(keys.scale_key)
        if scalar is None:
            raise SpecError(f"{where}: {keys.scale_key}",
                            f"missing: {arch.model_type}'s logit scale is its value ** -0.5")  # fmt: skip
        fields["attn_scale"] = float(number(where, keys.scale_key, scalar)) ** -0.5
        sources["attn_scale"] = f"{keys.scale_key} ** -0.5"
    for key, name in SOFTCAPS.items():
        if key in keys.reads and config.get(key) is not None:  # null: no cap (Gemma 3)
            cap = config[key]
            if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 < cap < float("inf"):
                raise SpecError(f"{where}: {key}", f"must be a positive number or null (no cap), got {cap!r}")
            fields[name], sources[name] = float(cap), key
    return fields, sources


def _experts(config: Mapping[str, Any], where: str, fields: dict[str, Any], sources: dict[str, str],
             swiglu: bool = True) -> None:  # fmt: skip
    """A mixture's fields: the expert count, the experts per token and (``swiglu``) the clamped SwiGLU's alpha and
    limit.
    """  # noqa: D205
    named = {k: config[k] for k in MOE_KEYS if config.get(k) is not None}
    if len(set(map(str, named.values()))) > 1:  # transformers maps one onto the other: which is read is a guess
        raise SpecError(f"{where}: {MOE_KEYS[1]}", f"contradicts {MOE_KEYS[0]} ({named[MOE_KEYS[1]]!r} vs "
                        f"{named[MOE_KEYS[0]]!r}): give one expert count")  # fmt: skip
    for name, keys in (("num_experts", MOE_KEYS), ("experts_per_token", ("num_experts_per_tok",))):
        key = next((k for k in keys if config.get(k) is not None), None)
        if key is None:
            raise SpecError(f"{where}: {keys[0]}", f"missing: a mixture of experts needs {' or '.join(keys)}")
        fields[name], sources[name] = number(where, key, config[key]), key
    if fields["experts_per_token"] > fields["num_experts"]:
        raise SpecError(f"{where}: num_experts_per_tok", f"must be at most the experts ({fields['num_experts']}), "
                        f"got {fields['experts_per_token']}")  # fmt: skip
    if not swiglu:  # gated experts (Qwen3-MoE): no gain or clamp to read
        return
    for key, default in SWIGLU_DEFAULTS.items():
        value = config.get(key)
        if value is None:
            fields[key], sources[key] = default, f"default ({default}, transformers' GptOssConfig)"
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise SpecError(f"{where}: {key}", f"must be a positive number, got {value!r}")
        fields[key], sources[key] = float(value), key
