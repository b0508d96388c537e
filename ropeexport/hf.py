"""Hugging Face ``config.json`` import: the positional-encoding spec a transformers model implies, with provenance.

Reads a config from disk only (no hub access, never remote code) and maps it to spec fields:
- RoPE models: head_dim (or hidden_size / num_attention_heads), num_key_value_heads, rope_theta, the rotated width
  (partial_rotary_factor, rotary_pct or rotary_dim), max_position_embeddings, and the scaling from ``rope_scaling``
  (transformers 4.x, key ``type`` or ``rope_type``) or ``rope_parameters`` (5.x). Every key of the scaling dict must
  be understood: an unknown scaling type or parameter is an error, never dropped, because a dropped scaling is what
  turns long-context output into gibberish.
- ALiBi models: bloom, mpt (``attn_config.alibi``) and falcon (``alibi``).
- T5 relative buckets: t5 and mt5.

``import_config`` returns the raw fields (validated later by the spec class) and, for every field, where its value
came from: the manifest records that, and ``ropeexport build --hf-config`` prints it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropeexport.errors import SpecError
from ropeexport.inputs import loads_json, read_text

# transformers rope types -> ropeexport schedules. "su" is LongRoPE's name in Phi-3's first releases.
ROPE_TYPES = {
    "default": "default",
    "linear": "linear",
    "dynamic": "dynamic",
    "yarn": "yarn",
    "llama3": "llama3",
    "longrope": "longrope",
    "su": "longrope",
}
# Keys of rope_scaling / rope_parameters that select the type or restate a top-level field, not schedule parameters.
_SELECTORS = ("type", "rope_type", "rope_theta", "partial_rotary_factor")
# RoPE model types ropeexport knows, with the channel pairing each uses. An unknown type is an error rather than a
# guess: cohere, glm and helium, for example, interleave where most models rotate halves.
_HALF = "rotate_half pairs (i, i + d/2)"
_PAIRS = "interleaved pairs (2i, 2i+1)"
ROPE_LAYOUTS = {
    **{
        t: ("half", f"{t}: {_HALF}")
        for t in (
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen2_moe",
            "qwen3",
            "qwen3_moe",
            "phi",
            "phi3",
            "phimoe",
            "gemma",
            "gemma2",
            "gemma3_text",
            "smollm3",
            "gpt_oss",
            "gpt_neox",
            "falcon",
            "starcoder2",
            "olmo",
            "olmo2",
            "stablelm",
            "granite",
            "granitemoe",
            "nemotron",
            "persimmon",
        )
    },  # fmt: skip
    "gptj": ("interleaved", f"gptj: {_PAIRS} (rotate_every_two)"),
    "codegen": ("interleaved", f"codegen: {_PAIRS} (rotate_every_two)"),
    "deepseek_v2": ("interleaved", f"deepseek_v2: {_PAIRS} (view_as_complex)"),
    "deepseek_v3": ("interleaved", f"deepseek_v3: {_PAIRS} (view_as_complex)"),
    "cohere": ("interleaved", f"cohere: {_PAIRS} (its rotate_half takes x[..., ::2], x[..., 1::2])"),
    "cohere2": ("interleaved", f"cohere2: {_PAIRS} (its rotate_half takes x[..., ::2], x[..., 1::2])"),
    "glm": ("interleaved", f"glm: {_PAIRS} (repeat_interleave cos/sin)"),
    "glm4": ("interleaved", f"glm4: {_PAIRS} (repeat_interleave cos/sin)"),
    "helium": ("interleaved", f"helium: {_PAIRS} (repeat_interleave cos/sin)"),
}
# transformers' rope_theta where a config has none (its config class's default_theta), by model type; 10000 else.
DEFAULT_THETA = {"smollm3": 2_000_000.0, "gpt_oss": 150_000.0, "gemma3_text": 1_000_000.0}
# Model types named differently in older configs.
ALIASES = {"RefinedWebModel": "falcon", "RefinedWeb": "falcon"}
# Models whose rotary key is one head shared by every query head (multi-head latent attention's k_pe).
SHARED_ROPE_KEY = ("deepseek_v2", "deepseek_v3")
ALIBI_TYPES = ("bloom", "mpt", "falcon")
T5_TYPES = ("t5", "mt5", "umt5")  # umt5: the same buckets, a table per layer
# Known transformers model types that have no positional encoding ropeexport exports.
NOT_SUPPORTED = {
    "gpt2": "learned absolute position embeddings (wpe)",
    "gpt_neo": "learned absolute position embeddings (wpe)",
    "bert": "learned absolute position embeddings",
    "roberta": "learned absolute position embeddings",
    "opt": "learned absolute position embeddings",
    "gpt_bigcode": "learned absolute position embeddings",
    "distilbert": "learned absolute position embeddings",
    "bart": "learned absolute position embeddings",
    "mbart": "learned absolute position embeddings",
    "whisper": "learned and sinusoidal absolute position embeddings",
    "xglm": "sinusoidal absolute embeddings with an offset",
    "longt5": "T5 buckets inside local / transient-global attention",
}
# Config keys that change the encoding in ways one artifact per config cannot express: refused, never ignored.
UNSUPPORTED_KEYS = {
    "global_rope_theta": "global and local layers use different thetas (ModernBERT): build each from a `spec_file`",
    "local_rope_theta": "global and local layers use different thetas: build each from a `spec_file`",
    "use_dynamic_ntk": "Qwen v1's dynamic NTK and logn attention are not a transformers rope type",
    "use_logn_attn": "Qwen v1's logn attention scaling is outside the rotary embedding",
    "rope_position_scale": "Phi-3-small's position scale is not a transformers rope type",
}
_HEADS = ("num_attention_heads", "n_head", "n_heads", "num_heads")
_HIDDEN = ("hidden_size", "n_embd", "n_embed", "d_model")
_LENGTH = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")


@dataclass(frozen=True)
class Imported:
    """Spec fields taken from a config, not yet validated, and ``sources[field]``: where each value came from."""

    model_type: str
    fields: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)


class _Reader:
    """Looks keys up in the config and remembers, for each spec field, which key (or default) gave its value."""

    def __init__(self, config: Mapping[str, Any], where: str) -> None:
        self.config = config
        self.where = where
        self.fields: dict[str, Any] = {}
        self.sources: dict[str, str] = {}

    def get(self, *keys: str) -> tuple[str, Any] | None:
        """The first key present with a non-null value, as (key, value)."""
        for key in keys:
            if self.config.get(key) is not None:
                return key, self.config[key]
        return None

    def set(self, name: str, value: Any, source: str) -> None:
        self.fields[name] = value
        self.sources[name] = source

    def error(self, key: str, message: str) -> SpecError:
        return SpecError(f"{self.where}: {key}", message)

    def integer(self, key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer():
            raise self.error(key, f"must be an integer, got {value!r}")
        if not 1 <= value <= 2**40:
            raise self.error(key, f"must be between 1 and 2^40, got {value:.6g}")
        return int(value)

    def number(self, key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.error(key, f"must be a finite number, got {value!r}")
        return float(value)

    def heads(self) -> tuple[str, int]:
        found = self.get(*_HEADS)
        if found is None:
            raise self.error("num_attention_heads", f"missing: the config has none of {', '.join(_HEADS)}")
        return found[0], self.integer(found[0], found[1])

    def head_dim(self, heads_key: str, heads: int, explicit: tuple[str, ...] = ("head_dim",)) -> tuple[int, str]:
        """head_dim from an explicit key, else hidden_size / num_attention_heads (which must divide)."""
        found = self.get(*explicit)
        if found is not None:
            return self.integer(found[0], found[1]), found[0]
        hidden = self.get(*_HIDDEN)
        if hidden is None:
            raise self.error("hidden_size", f"missing: the config has none of {', '.join(('head_dim', *_HIDDEN))}")
        size = self.integer(hidden[0], hidden[1])
        if size % heads:
            raise self.error(hidden[0], f"must be divisible by {heads_key} ({heads}), got {size}")
        return size // heads, f"{hidden[0]} / {heads_key}"

    def length(self) -> tuple[str, int] | None:
        found = self.get(*_LENGTH)
        return None if found is None else (found[0], self.integer(found[0], found[1]))


def read_config(path: str | Path) -> dict[str, Any]:
    """Load a transformers config.json from disk; a missing, unreadable or non-JSON file is a SpecError."""
    path = Path(path)
    # A regular file of sane size (not /dev/zero, not a FIFO), strict JSON with bounded nesting and integers.
    data = loads_json(read_text(path, "hf_config"), f"hf_config {str(path)!r}")
    if not isinstance(data, dict):
        raise SpecError("hf_config", f"{str(path)!r} is not a transformers config (not a JSON object)")
    return data


def model_name(config: Mapping[str, Any], path: str | Path | None = None) -> str:
    """A folder-safe model name for the artifacts of a config file.

    In order: NAME of a Hugging Face cache path (``models--ORG--NAME/snapshots/<sha>/config.json``), the file's stem
    when it is not ``config``, the folder (unless it is a commit hash), ``_name_or_path``'s last part, model_type.
    """
    candidates = []
    if path is not None:
        resolved = Path(path).resolve()
        cache = next((p.name for p in resolved.parents if p.name.startswith("models--")), None)
        if cache:
            candidates.append(cache.split("--")[-1])
        if resolved.stem != "config":
            candidates.append(resolved.stem)
        if resolved.parent.name and not re.fullmatch(r"[0-9a-f]{40}", resolved.parent.name):
            candidates.append(resolved.parent.name)
    if isinstance(config.get("_name_or_path"), str):
        candidates.append(config["_name_or_path"].rstrip("/").split("/")[-1])
    candidates.append(str(config.get("model_type", "model")))
    for candidate in candidates:
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", candidate).strip("-._").lower()[:60]
        if name:
            return name
    return "model"


def import_config(config: Mapping[str, Any], where: str = "config.json") -> Imported:
    """Map a transformers config (a dict) to spec fields with their sources; SpecError names any field at fault.

    A config whose layers use different encodings (Gemma 3's sliding and global layers) is a SpecError naming them:
    ``import_layers`` reads it per layer.
    """
    return import_layers(config, where).only()


def _import_one(config: Mapping[str, Any], where: str) -> Imported:
    """One encoding of a config whose layers share it (``config`` holds one flat scaling dict)."""
    if not isinstance(config, Mapping):
        raise SpecError(where, "is not a transformers config (not a JSON object)")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise SpecError(
            f"{where}: model_type",
            "missing: this is not a transformers config.json (every transformers config names its model_type)",
        )
    r = _Reader(config, where)
    model_type = ALIASES.get(model_type, model_type)
    if model_type in NOT_SUPPORTED:
        raise r.error(
            "model_type",
            f"{model_type!r} uses {NOT_SUPPORTED[model_type]}, which has nothing to export; ropeexport imports "
            "RoPE models, ALiBi (bloom, mpt, falcon) and T5 buckets (t5, mt5, umt5)",
        )
    for key, why in UNSUPPORTED_KEYS.items():
        value = config.get(key)
        neutral = value is None or value is False or value in ([], {}) or (type(value) in (int, float) and value == 1)
        if not neutral:
            raise r.error(key, f"is not supported: {why}")
    if model_type in T5_TYPES:
        _t5(r)
    elif _uses_alibi(r, model_type):
        _alibi(r, model_type)
    elif model_type in ROPE_LAYOUTS:
        _rope(r, model_type)
    else:
        known = sorted({*ROPE_LAYOUTS, *ALIBI_TYPES, *T5_TYPES})
        raise r.error(
            "model_type",
            f"unknown model type {model_type!r}: ropeexport does not guess a positional encoding (or a RoPE "
            f"layout); known: {', '.join(known)}; for another model write a `spec_file`",
        )
    return Imported(model_type, r.fields, r.sources)


def _uses_alibi(r: _Reader, model_type: str) -> bool:
    if model_type == "bloom":
        return True
    if model_type == "mpt":
        attn = r.config.get("attn_config") or {}
        if not isinstance(attn, Mapping):
            raise r.error("attn_config", f"must be an object, got {attn!r}")
        if not attn.get("alibi", False):
            raise r.error(
                "attn_config.alibi",
                "is false: this MPT uses learned absolute position embeddings, which have nothing to export",
            )
        bias_max = attn.get("alibi_bias_max", 8)
        if bias_max != 8:
            raise r.error(
                "attn_config.alibi_bias_max",
                f"only 8 (the ALiBi paper's slopes) is supported, got {bias_max!r}",
            )
        return True
    if model_type == "falcon":
        return bool(r.config.get("alibi", False))  # Falcon 7B/40B use RoPE; Falcon-RW uses ALiBi
    return False


def _alibi(r: _Reader, model_type: str) -> None:
    r.set("encoding", "alibi", f"model_type {model_type!r}" + (" with alibi" if model_type != "bloom" else ""))
    heads_key, heads = r.heads()
    r.set("num_heads", heads, heads_key)
    head_dim, source = r.head_dim(heads_key, heads, explicit=("head_dim",))
    r.set("head_dim", head_dim, source)
    r.set("causal", True, f"{model_type} is a causal decoder")
    if model_type == "falcon":
        # FalconAttention adds alibi to q.k and then multiplies both by 1/sqrt(head_dim).
        r.set("slope_scale", 1.0 / math.sqrt(head_dim), "falcon adds ALiBi before the 1/sqrt(head_dim) logit scale")
    length = r.length()
    if length is not None:
        r.set("max_positions", length[1], length[0])


def _t5(r: _Reader) -> None:
    r.set("encoding", "t5", f"model_type {r.config['model_type']!r}")
    heads_key, heads = r.heads()
    r.set("num_heads", heads, heads_key)
    head_dim, source = r.head_dim(heads_key, heads, explicit=("d_kv", "head_dim"))
    r.set("head_dim", head_dim, source)
    for key, name, default in (
        ("relative_attention_num_buckets", "num_buckets", 32),
        ("relative_attention_max_distance", "max_distance", 128),
    ):
        found = r.get(key)
        if found is None:
            r.set(name, default, f"transformers' default for {key} (absent from the config)")
        else:
            r.set(name, r.integer(key, found[1]), key)
    # The encoder's self-attention buckets are bidirectional and unmasked; the decoder's are causal.
    r.set("bidirectional", True, "T5 encoder self-attention (bidirectional buckets)")
    r.set("causal", False, "T5 encoder self-attention (no causal mask)")
    length = r.length()
    if length is not None:
        r.set("max_positions", length[1], length[0])


def _scaling_dict(r: _Reader) -> tuple[str, Mapping[str, Any]] | None:
    """The scaling dict and its key: rope_parameters (5.x) or rope_scaling (4.x); None when absent or null."""
    both = [r.config.get(k) for k in ("rope_parameters", "rope_scaling")]
    if all(v is not None for v in both) and both[0] != both[1]:
        raise r.error("rope_scaling", "and rope_parameters are both set and differ: which one applies is ambiguous")
    for key in ("rope_parameters", "rope_scaling"):
        value = r.config.get(key)
        if value is None:
            continue
        if not isinstance(value, Mapping):
            raise r.error(key, f"must be an object, got {value!r}")
        if value and all(isinstance(v, Mapping) for v in value.values()):
            raise r.error(
                key,
                f"holds one setting per layer type ({', '.join(value)}); ropeexport builds one schedule per "
                "artifact: pass a `spec_file` with the layer type's values",
            )
        return key, value
    return None


def _rope(r: _Reader, model_type: str) -> None:
    config = r.config
    r.set("encoding", "rope", f"model_type {model_type!r}")
    heads_key, heads = r.heads()
    r.set("num_heads", heads, heads_key)
    if model_type in SHARED_ROPE_KEY:
        found = r.get("qk_rope_head_dim")
        if found is None:
            raise r.error("qk_rope_head_dim", f"missing: {model_type} rotates only its qk_rope_head_dim channels")
        r.set("head_dim", r.integer(*found), "qk_rope_head_dim (the rotated part of each head)")
        r.set("num_kv_heads", 1, f"{model_type}'s rotary key k_pe is one head shared by every query head")
    else:
        head_dim, source = r.head_dim(heads_key, heads)
        r.set("head_dim", head_dim, source)
        kv = r.get("num_key_value_heads", "num_kv_heads")
        if model_type == "falcon" and config.get("multi_query") and not config.get("new_decoder_architecture"):
            # FalconAttention: one key head for multi_query unless new_decoder_architecture, whatever num_kv_heads says.
            r.set("num_kv_heads", 1, "multi_query (without new_decoder_architecture)")
        elif kv is not None:
            r.set("num_kv_heads", r.integer(*kv), kv[0])
        else:
            r.set("num_kv_heads", heads, f"{heads_key} (no num_key_value_heads: multi-head attention)")
    layout, why = ROPE_LAYOUTS[model_type]
    r.set("layout", layout, why)

    scaling = _scaling_dict(r)
    params: Mapping[str, Any] = scaling[1] if scaling else {}
    prefix = f"{scaling[0]}." if scaling else ""
    _rotary_dim(r, params, prefix)
    theta = (
        (f"{prefix}rope_theta", params["rope_theta"])
        if params.get("rope_theta") is not None
        else r.get("rope_theta", "rotary_emb_base", "rope_embedding_base")
    )
    if theta is None:
        if model_type == "gpt_oss":  # its config class fills in a whole YaRN setting, not only a theta
            raise r.error("rope_parameters", "missing: gpt_oss's transformers config fills in YaRN x32 at theta "
                          "150000 when absent; write the model's own rope_parameters into the config")  # fmt: skip
        default = DEFAULT_THETA.get(model_type, 10000.0)
        r.set("theta", default, f"transformers' default rope_theta for {model_type} (absent from the config)")
    else:
        r.set("theta", r.number(*theta), theta[0])

    length = r.length()
    rope_type = params.get("rope_type", params.get("type", "default")) if scaling else "default"
    if not isinstance(rope_type, str) or rope_type not in ROPE_TYPES:
        supported = ", ".join(sorted(ROPE_TYPES))
        raise r.error(f"{prefix}rope_type", f"unsupported scaling type {rope_type!r}; supported: {supported}")
    schedule = ROPE_TYPES[rope_type]
    key = next((k for k in ("rope_type", "type") if k in params), None)
    if key is not None:
        r.set("scaling", schedule, f"{prefix}{key} {rope_type!r}")
    else:  # nothing in the config names a schedule: say so, not a key that is not there
        where = f"{scaling[0]} names no rope_type" if scaling else "no rope_scaling / rope_parameters in the config"
        r.set("scaling", schedule, f"{where} (unscaled)")
    values = {k: v for k, v in params.items() if k not in _SELECTORS}
    if schedule == "default":
        if values:
            raise r.error(f"{prefix}{sorted(values)[0]}", "is not a parameter of the default (unscaled) schedule")
        if length is not None:
            r.set("max_positions", length[1], length[0])
        return
    for key, value in values.items():
        if isinstance(value, str):  # a config stores numbers as numbers; "2" is a damaged or hand-edited file
            raise r.error(f"{prefix}{key}", f"must be a number, list or boolean, got the string {value!r}")
    values, sources = dict(values), {k: f"{prefix}{k}" for k in values}
    if schedule == "dynamic":
        # transformers' dynamic NTK always takes max_position_embeddings as the trained length (4.x and 5.x).
        if length is None:
            raise r.error("max_position_embeddings", "missing: dynamic NTK scaling takes it as the trained length")
        values["original_max_position_embeddings"] = length[1]
        sources["original_max_position_embeddings"] = (
            f"{length[0]} (transformers' dynamic NTK takes it as the original)"
        )
    elif schedule in ("yarn", "llama3", "longrope"):
        # transformers 5.x standardisation: a top-level original length wins over the dict's, then the dict's,
        # then max_position_embeddings.
        top = r.get("original_max_position_embeddings")
        if top is not None:
            values["original_max_position_embeddings"] = r.integer(*top)
            sources["original_max_position_embeddings"] = top[0]
        elif "original_max_position_embeddings" not in values:
            if length is None:
                raise r.error("original_max_position_embeddings", f"missing: {rope_type!r} needs the trained length")
            values["original_max_position_embeddings"] = length[1]
            sources["original_max_position_embeddings"] = length[0]
    if schedule == "longrope" and "factor" not in values and length is not None:
        # transformers: factor = max_position_embeddings / original_max_position_embeddings (it sets the mscale).
        values["factor"] = length[1] / values["original_max_position_embeddings"]
        sources["factor"] = f"{length[0]} / original_max_position_embeddings"
    r.set("scaling_params", values, "; ".join(f"{k} <- {v}" for k, v in sorted(sources.items())))
    target = _extended_length(values, schedule)
    if length is not None and (target is None or length[1] >= target):
        r.set("max_positions", length[1], length[0])
    elif target is not None:
        r.set("max_positions", target, f"{prefix}factor x original_max_position_embeddings (the extended context)")


def _extended_length(values: Mapping[str, Any], schedule: str) -> int | None:
    """The context YaRN or dynamic NTK extends to (factor x original).

    Configs with these keep max_position_embeddings at the trained length (Qwen2.5's documented YaRN setting); the
    others (linear, llama3, longrope) state the extended length in max_position_embeddings itself.
    """
    factor, original = values.get("factor"), values.get("original_max_position_embeddings")
    if schedule not in ("yarn", "dynamic") or not isinstance(factor, (int, float)) or not isinstance(original, int):
        return None
    return int(round(factor * original))


def _rotary_dim(r: _Reader, params: Mapping[str, Any], prefix: str) -> None:
    head_dim: int = r.fields["head_dim"]
    explicit = r.get("rotary_dim")
    if explicit is not None:
        r.set("rotary_dim", r.integer(*explicit), "rotary_dim")
        return
    if params.get("partial_rotary_factor") is not None:
        fraction: tuple[str, Any] | None = (f"{prefix}partial_rotary_factor", params["partial_rotary_factor"])
    else:
        fraction = r.get("partial_rotary_factor", "rotary_pct")
    if fraction is None:
        # 0 is the spec's "all of head_dim": it follows a --head-dim override instead of keeping the config's width.
        r.set("rotary_dim", 0, "head_dim (every channel rotates)")
        return
    value = r.number(*fraction)
    if not 0 < value <= 1:
        raise r.error(fraction[0], f"must be in (0, 1], got {value!r}")
    rotary = int(head_dim * value)
    if rotary < 2 or rotary % 2:
        # 0 would read as "every channel" in the spec: a factor that rotates nothing must not build full rotation.
        raise r.error(
            fraction[0],
            f"{value!r} x head_dim {head_dim} truncates to {rotary} rotated channels; RoPE needs an even number >= 2",
        )
    r.set("rotary_dim", rotary, f"int(head_dim x {fraction[0]}) as transformers computes it")


# transformers' layer types -> the attention a decoder layer of that type has.
LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}
# Layer types of other models: refused by name, never read as full attention.
OTHER_LAYER_TYPES = {
    "chunked_attention": "Llama 4's chunked attention",
    "linear_attention": "linear attention (Qwen3-Next's gated delta rule)",
    "conv": "convolution layers (LFM2)",
    "mamba": "state-space layers",
}
# Wrappers whose text model's config is nested under text_config (Gemma 3 4B-27B ship as gemma3).
TEXT_CONFIGS = {"gemma3": "gemma3_text"}
# The layer pattern transformers derives for each model type when a config has no layer_types (its __post_init__).
_ALTERNATING = ("gemma2", "gpt_oss")  # even layers sliding, odd layers full
_NO_ROPE_INTERVAL = {"smollm3": 4}  # no RoPE on every Nth layer unless no_rope_layers says otherwise
# The model types whose transformers code reads each per-layer key; another model type's config holding one is
# refused (its transformers model would ignore it: every layer full attention, every layer rotated).
READS_LAYER_TYPES = ("qwen2", "qwen3", "gemma2", "gemma3_text", "smollm3", "gpt_oss")
READS_NO_ROPE_LAYERS = ("smollm3",)


@dataclass(frozen=True)
class Layers:
    """A config's positional encoding, per layer.

    ``types``: each layer's transformers layer type (``LAYER_TYPES``); ``rotated``: False for a layer with no
    positional encoding (SmolLM3's every fourth layer); ``encodings``: per layer type, the encoding its layers use
    (``Imported``; one entry per type, the same fields where the types share one); ``window``: the key slots a
    sliding layer sees (0: no layer slides); ``sources``: where the types, the no-RoPE layers and the window came
    from. ``config`` is the text model's config (a ``gemma3`` wrapper's ``text_config``), ``where`` says so.
    """

    model_type: str
    types: tuple[str, ...]
    rotated: tuple[bool, ...]
    encodings: Mapping[str, Imported]
    window: int
    sources: Mapping[str, str]
    config: Mapping[str, Any]
    where: str

    def encoding(self, i: int) -> Imported | None:
        """Layer i's encoding, None for a layer without one."""
        return self.encodings[self.types[i]] if self.rotated[i] else None

    def groups(self) -> list[tuple[Imported, tuple[str, ...], tuple[int, ...]]]:
        """The distinct encodings in layer order, each with the layer types and the layers that use it."""
        out: list[tuple[Imported, list[str], list[int]]] = []
        for i, kind in enumerate(self.types):
            imported = self.encoding(i)
            if imported is None:
                continue
            group = next((g for g in out if g[0].fields == imported.fields), None)
            if group is None:
                group = (imported, [], [])
                out.append(group)
            if kind not in group[1]:
                group[1].append(kind)
            group[2].append(i)
        return [(imported, tuple(kinds), tuple(layers)) for imported, kinds, layers in out]

    def unrotated(self) -> tuple[int, ...]:
        """The layers with no positional encoding."""
        return tuple(i for i, rotated in enumerate(self.rotated) if not rotated)

    def only(self) -> Imported:
        """The one encoding every rotated layer uses; SpecError naming the layer types when they differ."""
        return self.one_encoding("one spec holds one: build --hf-config builds one artifact per encoding, a decoder "
                                 "takes them all")

    def one_encoding(self, why: str) -> Imported:
        """The one encoding every rotated layer uses; else a SpecError naming the layer types and their encodings,
        then ``why`` (what the caller needs one encoding for).
        """  # noqa: D205
        groups = self.groups()
        if len(groups) == 1:
            return groups[0][0]
        if not groups:
            raise SpecError(f"{self.where}: no_rope_layers", "leaves no layer with RoPE: there is nothing to export")
        told = "; ".join(f"{'/'.join(kinds)} (layers {spans(layers)}): {describe(imported)}"
                         for imported, kinds, layers in groups)  # fmt: skip
        raise SpecError(f"{self.where}: layer_types", f"the layer types use different encodings ({told}); {why}")


def spans(layers: tuple[int, ...] | list[int]) -> str:
    """Layer indices as runs: (0, 1, 2, 4, 6, 7) -> '0-2, 4, 6-7'."""
    runs: list[list[int]] = []
    for i in layers:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def describe(imported: Imported) -> str:
    """An encoding in the field's words: 'theta 1e+06 with linear x8', 'theta 10000, unscaled', 'ALiBi'."""
    fields = imported.fields
    if fields.get("encoding") != "rope":
        return str(fields.get("encoding"))
    words = f"theta {fields['theta']:g}"
    params = fields.get("scaling_params") or {}
    if fields.get("scaling", "default") == "default":
        words += ", unscaled"
    elif "factor" in params:
        words += f" with {fields['scaling']} x{params['factor']:g}"
    else:
        words += f" with {fields['scaling']}"
    if fields.get("rotary_dim"):
        words += f", {fields['rotary_dim']} of {fields['head_dim']} channels rotated"
    return words


def text_config(config: Mapping[str, Any], where: str) -> tuple[Mapping[str, Any], str]:
    """The text model's config and where it is: a multimodal wrapper's ``text_config`` (``TEXT_CONFIGS``), else the
    config itself.
    """  # noqa: D205
    wrapper = config.get("model_type")
    if not isinstance(wrapper, str) or wrapper not in TEXT_CONFIGS:
        return config, where
    inner = config.get("text_config")
    if not isinstance(inner, Mapping):
        raise SpecError(f"{where}: text_config", f"must be the text model's config (an object) in a {wrapper} "
                        f"config, got {inner!r}")  # fmt: skip
    expected = TEXT_CONFIGS[wrapper]
    if inner.get("model_type", expected) != expected:
        raise SpecError(f"{where}: text_config.model_type", f"must be {expected!r} in a {wrapper} config, got "
                        f"{inner.get('model_type')!r}")  # fmt: skip
    return {**inner, "model_type": expected}, f"{where}: text_config"


def _layer_count(r: _Reader) -> int:
    found = r.get("num_hidden_layers", "n_layer", "num_layers")
    if found is None:
        raise r.error("num_hidden_layers", "missing: a per-layer setting needs the layer count")
    return r.integer(*found)


def _per_layer_list(r: _Reader, key: str, count: int) -> list[Any]:
    value = r.config[key]
    if isinstance(value, str) or not isinstance(value, list):
        raise r.error(key, f"must be a list with one entry per layer, got {type(value).__name__}")
    if len(value) != count:
        found = r.get("num_hidden_layers", "n_layer", "num_layers")
        raise r.error(key, f"holds {len(value)} entries, the model has {count} layers "
                      f"({found[0] if found else 'num_hidden_layers'})")  # fmt: skip
    return value


def _layer_types(r: _Reader, model_type: str, count: int | None) -> tuple[tuple[str, ...], str]:
    """Each layer's type and where the list came from (``layer_types``, the model type's pattern, or full)."""
    config = r.config
    if config.get("layer_types") is not None:
        assert count is not None
        types = _per_layer_list(r, "layer_types", count)
        for i, kind in enumerate(types):  # a kind of layer not built is named first (Llama 4's chunked attention)
            if isinstance(kind, str) and kind in OTHER_LAYER_TYPES:
                raise r.error(f"layer_types[{i}]", f"{kind!r} is not built: {OTHER_LAYER_TYPES[kind]}")
        if model_type not in READS_LAYER_TYPES and any(t != "full_attention" for t in types):
            # Never read as all-full: Cohere 2, EXAONE 4 and others give their layer types meanings of their own.
            raise r.error("layer_types", f"not imported for {model_type!r} (ropeexport reads layer types for "
                          f"{', '.join(READS_LAYER_TYPES)}): refused rather than taking every layer as full "
                          "attention")  # fmt: skip
        for i, kind in enumerate(types):
            if not isinstance(kind, str) or kind not in LAYER_TYPES:
                raise r.error(f"layer_types[{i}]", f"unknown layer type {kind!r}; allowed: {', '.join(LAYER_TYPES)}")
        return tuple(types), "layer_types"
    if count is None:
        return (), "one encoding for every layer"
    if model_type == "gemma3_text":
        found = r.get("sliding_window_pattern")
        pattern = 6 if found is None else r.integer(*found)
        source = "sliding_window_pattern" if found else "transformers' default sliding_window_pattern 6 (Gemma 3)"
        return tuple("sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(count)), source
    if model_type in _ALTERNATING:
        return (tuple("sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(count)),
                f"transformers' {model_type} pattern (even layers sliding)")  # fmt: skip
    if config.get("use_sliding_window") and config.get("sliding_window") is not None:
        # Qwen2/3 before layer_types: windows on the layers from max_window_layers on (transformers' derivation).
        found = r.get("max_window_layers")
        first = 0 if found is None else found[1]
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise r.error("max_window_layers", f"must be a layer count >= 0, got {first!r}")
        return (tuple("sliding_attention" if i >= first else "full_attention" for i in range(count)),
                "use_sliding_window with max_window_layers (layers from it on slide)")  # fmt: skip
    return ("full_attention",) * count, "no layer_types: every layer full attention"


def _rotated(r: _Reader, model_type: str, count: int | None) -> tuple[tuple[bool, ...], str]:
    """Per layer, whether it uses RoPE (``no_rope_layers``: 1 = RoPE, as SmolLM3 and Llama 4 write it)."""
    if r.config.get("no_rope_layers") is not None:
        assert count is not None
        flags = _per_layer_list(r, "no_rope_layers", count)
        if model_type not in READS_NO_ROPE_LAYERS and not all(f == 1 for f in flags):
            raise r.error("no_rope_layers", f"not imported for {model_type!r} (ropeexport reads no-RoPE layers for "
                          f"{', '.join(READS_NO_ROPE_LAYERS)}): refused rather than rotating every layer")  # fmt: skip
        for i, flag in enumerate(flags):
            if flag not in (0, 1) or isinstance(flag, float):
                raise r.error(f"no_rope_layers[{i}]", f"must be 1 (the layer uses RoPE) or 0 (it does not), got "
                              f"{flag!r}")  # fmt: skip
        return tuple(bool(f) for f in flags), "no_rope_layers (1 = RoPE, 0 = none)"
    if count is not None and model_type in _NO_ROPE_INTERVAL:
        found = r.get("no_rope_layer_interval")
        interval = _NO_ROPE_INTERVAL[model_type] if found is None else r.integer(*found)
        source = "no_rope_layer_interval" if found else f"transformers' default no_rope_layer_interval {interval}"
        return tuple((i + 1) % interval != 0 for i in range(count)), source
    return (True,) * (count or 1), "every layer"


def _window(r: _Reader, model_type: str, types: tuple[str, ...]) -> tuple[int, str]:
    """The key slots a sliding layer sees: sliding_window, where the config turns windows on."""
    if "sliding_attention" not in types:
        return 0, "no sliding layer"
    if r.config.get("use_sliding_window") is False:
        # Qwen2/3 and SmolLM3 with windows off and sliding layer types: transformers' eager masks follow layer_types
        # (Qwen's config has dropped the window, and its mask then fails; SmolLM3 windows eager attention but not
        # flash attention). The config says two things: refused rather than one picked.
        raise r.error("use_sliding_window", f"is false while layer_types has sliding layers (sliding_window "
                      f"{r.config.get('sliding_window')!r}): transformers' {model_type} reads them two ways; make "
                      "layer_types all full_attention, or set use_sliding_window true")  # fmt: skip
    found = r.get("sliding_window")
    if found is None:
        raise r.error("sliding_window", "missing: layer_types has sliding layers, which need their window")
    return r.integer(*found), found[0]


def _type_configs(
    r: _Reader, model_type: str, kinds: tuple[str, ...]
) -> tuple[dict[str, Mapping[str, Any]], str, dict[str, dict[str, str]]]:
    """Per layer type, a flat config for ``_import_one`` (its scaling dict that type's), where they came from, and
    per type the flat config's keys to name as the whole config's (``_relabel``).

    5.x configs nest ``rope_parameters`` by layer type; 4.x Gemma 3 configs give the sliding layers
    ``rope_local_base_freq`` and the global ones ``rope_theta`` and ``rope_scaling``; a flat scaling dict applies to
    every type.
    """  # noqa: D205
    config = r.config
    found = config.get("rope_parameters")
    is_nested = isinstance(found, Mapping) and bool(found) and all(isinstance(v, Mapping) for v in found.values())
    nested: Mapping[str, Mapping[str, Any]] = found if is_nested and isinstance(found, Mapping) else {}
    local = config.get("rope_local_base_freq")
    if not is_nested:
        if model_type != "gemma3_text":
            if local is not None:
                raise r.error("rope_local_base_freq", f"is Gemma 3's sliding-layer theta; not read for {model_type!r}")
            return dict.fromkeys(kinds, config), "one scaling dict for every layer type", {}
        # 4.x Gemma 3, as transformers converts it: the scaling dict and rope_theta are the global layers', the
        # sliding ones take rope_local_base_freq (each with Gemma 3's default when absent).
        theta = 10_000.0 if local is None else r.number("rope_local_base_freq", local)
        base = {k: v for k, v in config.items() if k not in ("rope_scaling", "rope_parameters", "rope_theta")}
        sliding = base | {"rope_theta": theta}
        full = dict(config) | {"rope_theta": config.get("rope_theta", 1_000_000.0)}
        local_source = "rope_local_base_freq" if local is not None else "transformers' Gemma 3 default local theta 1e4"
        renamed = {"sliding_attention": {"rope_theta": local_source}}
        if config.get("rope_theta") is None:
            renamed["full_attention"] = {"rope_theta": "transformers' Gemma 3 default global theta 1e6"}
        return ({"sliding_attention": sliding, "full_attention": full},
                "rope_local_base_freq (sliding) and rope_theta / rope_scaling (full): 4.x Gemma 3 keys", renamed)
    if "layer_types" not in config and model_type not in ("gemma3_text", *_ALTERNATING):
        raise r.error("rope_parameters", f"holds one setting per layer type ({', '.join(nested)}) but the config "
                      "names no layer_types: which layer is which type is unknown")  # fmt: skip
    unknown = next((k for k in nested if k not in LAYER_TYPES), None)
    if unknown is not None:
        raise r.error(f"rope_parameters.{unknown}", f"is not a layer type; allowed: {', '.join(LAYER_TYPES)}")
    missing = next((k for k in dict.fromkeys(kinds) if k not in nested), None)
    if missing is not None:
        layer = kinds.index(missing)
        raise r.error(f"rope_parameters.{missing}", f"missing: layer {layer} is a {missing} layer and "
                      f"rope_parameters has only {', '.join(nested)}")  # fmt: skip
    if local is not None:
        local_type = nested.get("sliding_attention", {})
        if local_type.get("rope_theta") not in (None, local):
            raise r.error("rope_local_base_freq", f"({local!r}) contradicts rope_parameters.sliding_attention."
                          f"rope_theta ({local_type.get('rope_theta')!r}): 4.x and 5.x keys disagree")  # fmt: skip
    if config.get("rope_scaling") is not None and config["rope_scaling"] != nested:
        raise r.error("rope_scaling", "and rope_parameters (nested by layer type) are both set and differ: 4.x and "
                      "5.x keys disagree")  # fmt: skip
    if config.get("rope_theta") is not None:
        global_type = nested.get("full_attention", {})
        if global_type.get("rope_theta") not in (None, config["rope_theta"]):
            raise r.error("rope_theta", f"({config['rope_theta']!r}) contradicts rope_parameters.full_attention."
                          f"rope_theta ({global_type.get('rope_theta')!r}): 4.x and 5.x keys disagree")  # fmt: skip
    base = {k: v for k, v in config.items() if k not in ("rope_scaling", "rope_parameters", "rope_local_base_freq")}
    configs: dict[str, Mapping[str, Any]] = {k: base | {"rope_parameters": dict(nested[k])} for k in nested}
    renamed = {k: {"rope_parameters.": f"rope_parameters.{k}."} for k in nested}
    return configs, "rope_parameters, nested by layer type", renamed


def import_layers(config: Mapping[str, Any], where: str = "config.json") -> Layers:
    """A transformers config's positional encoding per layer (``Layers``); SpecError names the key at fault.

    Reads ``layer_types`` (or the model type's pattern), ``no_rope_layers`` (SmolLM3, Llama 4), ``sliding_window``,
    and the scaling per layer type: ``rope_parameters`` nested by type (5.x), or Gemma 3's 4.x
    ``rope_local_base_freq``. A ``gemma3`` wrapper is read through its ``text_config``.
    """
    if not isinstance(config, Mapping):
        raise SpecError(where, "is not a transformers config (not a JSON object)")
    config, where = text_config(config, where)
    model_type = config.get("model_type")
    r = _Reader(config, where)
    per_layer = any(config.get(k) is not None for k in ("layer_types", "no_rope_layers"))
    per_layer = per_layer or model_type in ("gemma3_text", *_ALTERNATING, *_NO_ROPE_INTERVAL)
    has_count = r.get("num_hidden_layers", "n_layer", "num_layers") is not None
    count = _layer_count(r) if per_layer or has_count else None  # None: one entry stands for every layer
    name = model_type if isinstance(model_type, str) else ""
    types, types_source = _layer_types(r, name, count)
    rotated, rotated_source = _rotated(r, name, count)
    if not types:
        types = ("full_attention",)
    window, window_source = _window(r, name, types)
    configs, scaling_source, renamed = _type_configs(r, name, types)
    encodings = {}
    for kind, flat in configs.items():
        imported = _import_one(flat, where)
        encodings[kind] = _relabel(imported, renamed.get(kind, {}))
    sources = {"layer_types": types_source, "rotated": rotated_source, "window": window_source,
               "scaling": scaling_source}  # fmt: skip
    return Layers(str(model_type), types, rotated, encodings, window, sources, config, where)


def _relabel(imported: Imported, renamed: Mapping[str, str]) -> Imported:
    """``imported`` with its sources saying which key of the whole config gave each value (``renamed``: the flat
    config's key -> the config's, e.g. rope_parameters. -> rope_parameters.full_attention.).
    """  # noqa: D205
    sources = dict(imported.sources)
    for old, new in renamed.items():
        # A key prefix ("rope_parameters.") is renamed wherever it appears; a whole key only where it is the source.
        sources = {f: s.replace(old, new) if old.endswith(".") else (new if s == old else s)
                   for f, s in sources.items()}  # fmt: skip
    return Imported(imported.model_type, imported.fields, sources)
