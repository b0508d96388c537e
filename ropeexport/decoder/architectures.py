"""The decoder-only architectures ropeexport builds, as data.

What each transformers ``model_type`` computes around its attention, and where each weight sits in its checkpoint.

Torch-free. One ``Architecture`` per model type; ``read_layout`` turns a config into the decoder's structural fields
(sizes, norms, activation, residual form, biases), each with the config key it came from. A config key that changes
the computation in a way no architecture here expresses (mixture of experts, windows on some layers only, latent
attention, multimodal RoPE, ...) is a one-line error naming the key, never a guess.

Canonical weight names (``decoder.checkpoint``), each stored as MatMul reads it ([in, out]; transformers' ``nn.Linear``
keeps [out, in]): ``embed`` [vocab, hidden], ``embed_norm.weight|bias``, per layer ``layers.{i}.`` +
``norm1.weight|bias``, ``q_proj k_proj v_proj o_proj`` and ``q_bias k_bias v_bias o_bias``, ``q_norm k_norm``
[head_dim] (per-head norms before the rotation), ``norm2.weight|bias``,
``gate_proj up_proj down_proj`` and ``up_bias down_bias``; ``final_norm.weight|bias``, ``lm_head`` [hidden, vocab],
``lm_head_bias``. gpt-oss's layers add ``sinks`` [heads] (attention sinks) and, in place of the MLP, a mixture of
experts (``components.moe``): ``router_proj`` [hidden, E], ``router_bias`` [E], ``experts_gate_proj
experts_up_proj`` [E, hidden, m] (its checkpoint interleaves them in ``gate_up_proj``), ``experts_down_proj`` [E, m,
hidden] and ``experts_gate_bias experts_up_bias`` [E, m], ``experts_down_bias`` [E, hidden].
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ropeexport.errors import SpecError

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


@dataclass(frozen=True)
class Architecture:
    """One transformers model type: its computation around attention and its checkpoint names.

    ``names`` maps a canonical weight (``{i}`` the layer) to its checkpoint key; ``fused_qkv`` says how a fused
    projection splits: ``contiguous`` ([q; k; v] rows, Phi-3) or ``per-head`` ([H, 3, d] rows, GPT-NeoX and BLOOM).
    """

    model_type: str
    norm: str  # "rms" | "layer"
    # "gated" (down(act(gate x) * up x)) | "plain" (down(act(up x))) | "moe" (a top-k mixture of clamped-SwiGLU
    # experts, gpt-oss: ``components.moe``)
    mlp: str
    # "sequential" | "parallel" (attention and MLP read their own norm) | "shared" (one norm, GPT-J) | "sandwich"
    # (a norm before and after each of attention and MLP, Gemma)
    residual: str
    base: str  # the checkpoint prefix of the body ("model.", "transformer.", "gpt_neox."): optional in checkpoints
    names: Mapping[str, str]
    eps_keys: tuple[str, ...]
    act_keys: tuple[str, ...] = ("hidden_act",)
    act_default: str = "silu"
    fused_qkv: str = ""  # "" | "contiguous" | "per-head"
    fused_gate_up: bool = False  # Phi-3: gate_up_proj holds [gate; up]
    embed_norm: bool = False  # BLOOM: a LayerNorm on the embeddings
    qkv_bias: tuple[str, bool] | bool = False  # (config key, transformers' default when absent) or a fixed answer
    o_bias: tuple[str, bool] | bool = False
    mlp_bias: tuple[str, bool] | bool = False
    eps_default: float = 1e-5  # transformers' default when the config has no eps key
    lm_head_bias: bool = False
    tie_default: bool = False
    windowed: bool = False  # its config's sliding_window applies to every layer (Mistral, Phi-3)
    qk_norm: bool = False  # an RMSNorm over head_dim of each query and key head before the rotation (Qwen3)
    norm_offset: float = 0.0  # 1: Gemma's RMSNorm, normed * (1 + weight) (every norm of the model)
    embed_scale: bool = False  # Gemma: the embeddings times sqrt(hidden_size), rounded to the dtype
    scale_key: str = ""  # the config key whose value ** -0.5 is the logit scale (Gemma: query_pre_attn_scalar)
    softcaps: bool = False  # reads attn_logit_softcapping and final_logit_softcapping (Gemma 2, Gemma 3)
    sinks: bool = False  # one learned logit per query head in each softmax, attending to nothing (gpt-oss)
    norm_wide: bool = False  # RMSNorm times its weight in float32, then cast (gpt-oss); else cast, then times it
    aliases: Mapping[str, str] = field(default_factory=dict)  # older checkpoint names of the same tensor


_LLAMA_NAMES = {
    "embed": "model.embed_tokens.weight",
    "layers.{i}.norm1.weight": "model.layers.{i}.input_layernorm.weight",
    "layers.{i}.q_proj": "model.layers.{i}.self_attn.q_proj.weight",
    "layers.{i}.k_proj": "model.layers.{i}.self_attn.k_proj.weight",
    "layers.{i}.v_proj": "model.layers.{i}.self_attn.v_proj.weight",
    "layers.{i}.o_proj": "model.layers.{i}.self_attn.o_proj.weight",
    "layers.{i}.q_bias": "model.layers.{i}.self_attn.q_proj.bias",
    "layers.{i}.k_bias": "model.layers.{i}.self_attn.k_proj.bias",
    "layers.{i}.v_bias": "model.layers.{i}.self_attn.v_proj.bias",
    "layers.{i}.o_bias": "model.layers.{i}.self_attn.o_proj.bias",
    "layers.{i}.norm2.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "layers.{i}.gate_proj": "model.layers.{i}.mlp.gate_proj.weight",
    "layers.{i}.up_proj": "model.layers.{i}.mlp.up_proj.weight",
    "layers.{i}.down_proj": "model.layers.{i}.mlp.down_proj.weight",
    "layers.{i}.gate_bias": "model.layers.{i}.mlp.gate_proj.bias",
    "layers.{i}.up_bias": "model.layers.{i}.mlp.up_proj.bias",
    "layers.{i}.down_bias": "model.layers.{i}.mlp.down_proj.bias",
    "final_norm.weight": "model.norm.weight",
    "lm_head": "lm_head.weight",
}
# Llama's body, which Mistral, Qwen2 and Phi-3 keep: each differs from it by the fields its ``replace`` names.
_LLAMA = Architecture(
    "llama",
    norm="rms",
    mlp="gated",
    residual="sequential",
    base="model.",
    names=_LLAMA_NAMES,
    eps_keys=("rms_norm_eps",),
    eps_default=1e-6,
)

ARCHITECTURES = {
    "llama": replace(
        _LLAMA,
        qkv_bias=("attention_bias", False),
        o_bias=("attention_bias", False),
        mlp_bias=("mlp_bias", False),
    ),
    "mistral": replace(_LLAMA, model_type="mistral", windowed=True),
    # Llama's body; its no-RoPE layers (no_rope_layers) and windows per layer type come with the layers (hf).
    "smollm3": replace(
        _LLAMA,
        model_type="smollm3",
        qkv_bias=("attention_bias", False),
        o_bias=("attention_bias", False),
        mlp_bias=("mlp_bias", False),
        tie_default=True,  # SmolLM3Config ties the output head to the embeddings unless told otherwise
    ),
    "qwen2": replace(_LLAMA, model_type="qwen2", qkv_bias=True),
    "qwen3": replace(
        _LLAMA,
        model_type="qwen3",
        names={**_LLAMA_NAMES, "layers.{i}.q_norm": "model.layers.{i}.self_attn.q_norm.weight",
               "layers.{i}.k_norm": "model.layers.{i}.self_attn.k_norm.weight"},  # fmt: skip
        qkv_bias=("attention_bias", False),
        o_bias=("attention_bias", False),
        qk_norm=True,
    ),
    "phi3": replace(
        _LLAMA,
        model_type="phi3",
        eps_default=1e-5,
        names={
            **{
                k: v
                for k, v in _LLAMA_NAMES.items()
                if k.rpartition(".")[2] in ("embed", "o_proj", "down_proj", "weight", "lm_head")
            },
            "layers.{i}.qkv_proj": "model.layers.{i}.self_attn.qkv_proj.weight",
            "layers.{i}.gate_up_proj": "model.layers.{i}.mlp.gate_up_proj.weight",
        },
        fused_qkv="contiguous",
        fused_gate_up=True,
        windowed=True,
    ),
    # Gemma 2 and 3: four norms per layer around attention and MLP (the sandwich), Gemma's RMSNorm, scaled
    # embeddings, the logit scale from query_pre_attn_scalar, soft caps where the config sets them; Gemma 3 adds
    # q/k norms. Their windows and per-layer-type encodings come with the layers (hf).
    "gemma2": replace(
        _LLAMA,
        model_type="gemma2",
        residual="sandwich",
        names={**_LLAMA_NAMES,
               "layers.{i}.norm3.weight": "model.layers.{i}.pre_feedforward_layernorm.weight",
               "layers.{i}.norm4.weight": "model.layers.{i}.post_feedforward_layernorm.weight"},  # fmt: skip
        act_keys=("hidden_activation", "hidden_act"),
        act_default="gelu_pytorch_tanh",
        qkv_bias=("attention_bias", False),
        o_bias=("attention_bias", False),
        tie_default=True,
        norm_offset=1.0,
        embed_scale=True,
        scale_key="query_pre_attn_scalar",
        softcaps=True,
    ),
    "gpt_neox": Architecture(
        "gpt_neox",
        norm="layer",
        mlp="plain",
        residual="parallel",  # sequential when use_parallel_residual is false
        base="gpt_neox.",
        eps_keys=("layer_norm_eps",),
        act_default="gelu",
        names={
            "embed": "gpt_neox.embed_in.weight",
            "layers.{i}.norm1.weight": "gpt_neox.layers.{i}.input_layernorm.weight",
            "layers.{i}.norm1.bias": "gpt_neox.layers.{i}.input_layernorm.bias",
            "layers.{i}.qkv_proj": "gpt_neox.layers.{i}.attention.query_key_value.weight",
            "layers.{i}.qkv_bias": "gpt_neox.layers.{i}.attention.query_key_value.bias",
            "layers.{i}.o_proj": "gpt_neox.layers.{i}.attention.dense.weight",
            "layers.{i}.o_bias": "gpt_neox.layers.{i}.attention.dense.bias",
            "layers.{i}.norm2.weight": "gpt_neox.layers.{i}.post_attention_layernorm.weight",
            "layers.{i}.norm2.bias": "gpt_neox.layers.{i}.post_attention_layernorm.bias",
            "layers.{i}.up_proj": "gpt_neox.layers.{i}.mlp.dense_h_to_4h.weight",
            "layers.{i}.up_bias": "gpt_neox.layers.{i}.mlp.dense_h_to_4h.bias",
            "layers.{i}.down_proj": "gpt_neox.layers.{i}.mlp.dense_4h_to_h.weight",
            "layers.{i}.down_bias": "gpt_neox.layers.{i}.mlp.dense_4h_to_h.bias",
            "final_norm.weight": "gpt_neox.final_layer_norm.weight",
            "final_norm.bias": "gpt_neox.final_layer_norm.bias",
            "lm_head": "lm_head.weight",
        },
        aliases={"lm_head.weight": "embed_out.weight"},  # transformers 4.x checkpoints (Pythia, NeoX-20B)
        fused_qkv="per-head",
        qkv_bias=("attention_bias", True),
        o_bias=("attention_bias", True),
        mlp_bias=True,
    ),
    "gptj": Architecture(
        "gptj",
        norm="layer",
        mlp="plain",
        residual="shared",
        base="transformer.",
        eps_keys=("layer_norm_epsilon",),
        act_keys=("activation_function",),
        act_default="gelu_new",
        names={
            "embed": "transformer.wte.weight",
            "layers.{i}.norm1.weight": "transformer.h.{i}.ln_1.weight",
            "layers.{i}.norm1.bias": "transformer.h.{i}.ln_1.bias",
            "layers.{i}.q_proj": "transformer.h.{i}.attn.q_proj.weight",
            "layers.{i}.k_proj": "transformer.h.{i}.attn.k_proj.weight",
            "layers.{i}.v_proj": "transformer.h.{i}.attn.v_proj.weight",
            "layers.{i}.o_proj": "transformer.h.{i}.attn.out_proj.weight",
            "layers.{i}.up_proj": "transformer.h.{i}.mlp.fc_in.weight",
            "layers.{i}.up_bias": "transformer.h.{i}.mlp.fc_in.bias",
            "layers.{i}.down_proj": "transformer.h.{i}.mlp.fc_out.weight",
            "layers.{i}.down_bias": "transformer.h.{i}.mlp.fc_out.bias",
            "final_norm.weight": "transformer.ln_f.weight",
            "final_norm.bias": "transformer.ln_f.bias",
            "lm_head": "lm_head.weight",
            "lm_head_bias": "lm_head.bias",
        },
        mlp_bias=True,
        lm_head_bias=True,
    ),
    "bloom": Architecture(
        "bloom",
        norm="layer",
        mlp="plain",
        residual="sequential",
        base="transformer.",
        eps_keys=("layer_norm_epsilon",),
        act_keys=(),
        act_default="bloom_gelu",
        names={
            "embed": "transformer.word_embeddings.weight",
            "embed_norm.weight": "transformer.word_embeddings_layernorm.weight",
            "embed_norm.bias": "transformer.word_embeddings_layernorm.bias",
            "layers.{i}.norm1.weight": "transformer.h.{i}.input_layernorm.weight",
            "layers.{i}.norm1.bias": "transformer.h.{i}.input_layernorm.bias",
            "layers.{i}.qkv_proj": "transformer.h.{i}.self_attention.query_key_value.weight",
            "layers.{i}.qkv_bias": "transformer.h.{i}.self_attention.query_key_value.bias",
            "layers.{i}.o_proj": "transformer.h.{i}.self_attention.dense.weight",
            "layers.{i}.o_bias": "transformer.h.{i}.self_attention.dense.bias",
            "layers.{i}.norm2.weight": "transformer.h.{i}.post_attention_layernorm.weight",
            "layers.{i}.norm2.bias": "transformer.h.{i}.post_attention_layernorm.bias",
            "layers.{i}.up_proj": "transformer.h.{i}.mlp.dense_h_to_4h.weight",
            "layers.{i}.up_bias": "transformer.h.{i}.mlp.dense_h_to_4h.bias",
            "layers.{i}.down_proj": "transformer.h.{i}.mlp.dense_4h_to_h.weight",
            "layers.{i}.down_bias": "transformer.h.{i}.mlp.dense_4h_to_h.bias",
            "final_norm.weight": "transformer.ln_f.weight",
            "final_norm.bias": "transformer.ln_f.bias",
            "lm_head": "lm_head.weight",
        },
        fused_qkv="per-head",
        embed_norm=True,
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        tie_default=True,
    ),
}

# gpt-oss: Llama's attention with biases and a sink per head, alternating sliding and full layers (hf), YaRN; a
# top-k mixture of clamped-SwiGLU experts in place of the MLP. Its RMSNorm multiplies by the weight in float32.
ARCHITECTURES["gpt_oss"] = replace(
    _LLAMA,
    model_type="gpt_oss",
    mlp="moe",
    names={
        **{k: v for k, v in _LLAMA_NAMES.items() if ".mlp." not in v},
        "layers.{i}.sinks": "model.layers.{i}.self_attn.sinks",
        "layers.{i}.router_proj": "model.layers.{i}.mlp.router.weight",
        "layers.{i}.router_bias": "model.layers.{i}.mlp.router.bias",
        "layers.{i}.experts_gate_up_proj": "model.layers.{i}.mlp.experts.gate_up_proj",
        "layers.{i}.experts_gate_up_bias": "model.layers.{i}.mlp.experts.gate_up_proj_bias",
        "layers.{i}.experts_down_proj": "model.layers.{i}.mlp.experts.down_proj",
        "layers.{i}.experts_down_bias": "model.layers.{i}.mlp.experts.down_proj_bias",
    },
    eps_default=1e-5,
    qkv_bias=("attention_bias", True),
    o_bias=("attention_bias", True),
    norm_wide=True,
    sinks=True,
)

ARCHITECTURES["gemma3_text"] = replace(
    ARCHITECTURES["gemma2"],
    model_type="gemma3_text",
    names={**ARCHITECTURES["gemma2"].names, "layers.{i}.q_norm": "model.layers.{i}.self_attn.q_norm.weight",
           "layers.{i}.k_norm": "model.layers.{i}.self_attn.k_norm.weight"},  # fmt: skip
    qk_norm=True,
)

# Config keys whose presence (with a value that changes the computation) no architecture here expresses.
REFUSED_KEYS = {
    "num_local_experts": "a mixture of experts outside gpt-oss",
    "num_experts": "a mixture of experts outside gpt-oss",
    "n_routed_experts": "a mixture of experts",
    "moe_intermediate_size": "a mixture of experts",
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
MOE_KEYS = ("num_local_experts", "num_experts")  # what a "moe" row reads (gpt-oss)
# gpt-oss's clamped SwiGLU where the config has no value: transformers' GptOssConfig defaults.
SWIGLU_DEFAULTS = {"swiglu_alpha": 1.702, "swiglu_limit": 7.0}


def _neutral(value: Any) -> bool:
    """A value that leaves the computation as it is: absent, false, empty, or a count of 0 or 1 (one expert)."""
    if value is None or isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value in (0, 1)
    return value in ([], {}, "")


def _refused(config: Mapping[str, Any], where: str, arch: Architecture) -> None:
    for key, what in REFUSED_KEYS.items():
        value = config.get(key)
        if _neutral(value) or (arch.softcaps and key in SOFTCAPS) or (arch.mlp == "moe" and key in MOE_KEYS):
            continue
        raise SpecError(f"{where}: {key}", f"is not supported by the decoder artifact: {what} ({key} = {value!r})")
    scaling = config.get("rope_scaling") or config.get("rope_parameters") or {}
    if isinstance(scaling, Mapping) and scaling.get("mrope_section"):
        raise SpecError(f"{where}: rope_scaling.mrope_section", "is not supported by the decoder artifact: mrope")


def architecture(config: Mapping[str, Any], where: str) -> Architecture:
    """The architecture of a config's model_type; an unknown one is a SpecError listing those built."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str):  # a list (["llama"]) is not even hashable
        raise SpecError(f"{where}: model_type", f"must be a string naming the architecture, got {model_type!r}; "
                        f"built: {', '.join(ARCHITECTURES)}")  # fmt: skip
    if model_type not in ARCHITECTURES:
        raise SpecError(
            f"{where}: model_type",
            f"{model_type!r} has no decoder architecture here; built: {', '.join(ARCHITECTURES)} "
            "(the encoding alone: build its block or rope artifact)",
        )
    return ARCHITECTURES[model_type]


def _number(where: str, key: str, value: Any, fraction: bool) -> int | float:
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


def _flag(config: Mapping[str, Any], answer: tuple[str, bool] | bool) -> bool:
    if isinstance(answer, bool):
        return answer
    key, default = answer
    return default if config.get(key) is None else bool(config[key])


def read_layout(config: Mapping[str, Any], where: str = "config.json") -> tuple[dict[str, Any], dict[str, str]]:
    """The decoder's structural fields from a transformers config, and the key each came from.

    Sizes: layers, hidden_size, intermediate_size, vocab_size, norm_eps, act, residual, biases, tie_embeddings,
    sliding_window. The positional encoding's fields come from ``ropeexport.hf`` (the same import every artifact uses).
    """
    arch = architecture(config, where)
    _refused(config, where, arch)
    fields: dict[str, Any] = {"model_type": arch.model_type}
    sources: dict[str, str] = {}

    def take(name: str, keys: tuple[str, ...], default: Any = None, required: bool = True) -> None:
        for key in keys:
            if config.get(key) is not None:
                fields[name], sources[name] = _number(where, key, config[key], name == "norm_eps"), key
                return
        if default is None and required:
            raise SpecError(f"{where}: {keys[0]}", f"missing: the config has none of {', '.join(keys)}")
        fields[name], sources[name] = default, "default"

    take("num_layers", ("num_hidden_layers", "n_layer", "num_layers"))
    take("hidden_size", ("hidden_size", "n_embd", "n_embed"))
    take("vocab_size", ("vocab_size",))
    take("norm_eps", arch.eps_keys, arch.eps_default)
    if arch.mlp in ("gated", "moe") or arch.model_type == "gpt_neox":
        take("intermediate_size", ("intermediate_size",))
    else:  # GPT-J's n_inner and BLOOM: 4 x hidden when unset
        take("intermediate_size", ("n_inner",), 4 * int(fields["hidden_size"]))
    act = next((config[k] for k in arch.act_keys if config.get(k) is not None), arch.act_default)
    sources["act"] = next((k for k in arch.act_keys if config.get(k) is not None), "architecture")
    if not isinstance(act, str) or act not in ACTIVATIONS:
        key = arch.act_keys[0] if arch.act_keys else "hidden_act"
        raise SpecError(f"{where}: {key}", f"activation {act!r} is not built; allowed: {', '.join(ACTIVATIONS)}")
    fields["act"] = ACTIVATIONS[act]
    residual = arch.residual
    if arch.model_type == "gpt_neox" and config.get("use_parallel_residual") is False:
        residual, sources["residual"] = "sequential", "use_parallel_residual"
    fields["residual"] = residual
    fields["qkv_bias"], fields["o_bias"] = _flag(config, arch.qkv_bias), _flag(config, arch.o_bias)
    fields["mlp_bias"] = _flag(config, arch.mlp_bias)
    tie = config.get("tie_word_embeddings")
    fields["tie_embeddings"] = arch.tie_default if tie is None else bool(tie)
    sources["tie_embeddings"] = "tie_word_embeddings" if tie is not None else "architecture"
    # Qwen2's sliding_window applies only with use_sliding_window (refused above); Llama's configs have none.
    window = config.get("sliding_window") if arch.windowed else None
    fields["sliding_window"] = window or 0
    sources["sliding_window"] = "sliding_window" if window else "none"
    if arch.mlp == "moe":
        _experts(config, where, fields, sources)
    if arch.scale_key:
        scalar = config.get(arch.scale_key)
        if scalar is None:
            raise SpecError(f"{where}: {arch.scale_key}",
                            f"missing: {arch.model_type}'s logit scale is its value ** -0.5")  # fmt: skip
        fields["attn_scale"] = float(_number(where, arch.scale_key, scalar, False)) ** -0.5
        sources["attn_scale"] = f"{arch.scale_key} ** -0.5"
    if arch.softcaps:
        for key, name in SOFTCAPS.items():
            if config.get(key) is not None:  # null: no cap (Gemma 3)
                cap = config[key]
                if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 < cap < float("inf"):
                    raise SpecError(f"{where}: {key}", f"must be a positive number or null (no cap), got {cap!r}")
                fields[name], sources[name] = float(cap), key
    return fields, sources


def _experts(config: Mapping[str, Any], where: str, fields: dict[str, Any], sources: dict[str, str]) -> None:
    """A mixture's fields: the expert count, the experts per token and the clamped SwiGLU's alpha and limit."""
    for name, keys in (("num_experts", MOE_KEYS), ("experts_per_token", ("num_experts_per_tok",))):
        key = next((k for k in keys if config.get(k) is not None), None)
        if key is None:
            raise SpecError(f"{where}: {keys[0]}", f"missing: a mixture of experts needs {' or '.join(keys)}")
        fields[name], sources[name] = _number(where, key, config[key], False), key
    if fields["experts_per_token"] > fields["num_experts"]:
        raise SpecError(f"{where}: num_experts_per_tok", f"must be at most the experts ({fields['num_experts']}), "
                        f"got {fields['experts_per_token']}")  # fmt: skip
    for key, default in SWIGLU_DEFAULTS.items():
        value = config.get(key)
        if value is None:
            fields[key], sources[key] = default, f"default ({default}, transformers' GptOssConfig)"
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise SpecError(f"{where}: {key}", f"must be a positive number, got {value!r}")
        fields[key], sources[key] = float(value), key
