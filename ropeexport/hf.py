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
    "rope_local_base_freq": "sliding-window layers use another theta (Gemma 3): build each layer type from a `spec_file`",  # noqa: E501
    "global_rope_theta": "global and local layers use different thetas (ModernBERT): build each from a `spec_file`",
    "local_rope_theta": "global and local layers use different thetas: build each from a `spec_file`",
    "no_rope_layers": "some layers use no RoPE (Llama 4): build the RoPE layers from a `spec_file`",
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
    """Map a transformers config (a dict) to spec fields with their sources; SpecError names any field at fault."""
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
        r.set("theta", 10000.0, "transformers' default rope_theta (absent from the config)")
    else:
        r.set("theta", r.number(*theta), theta[0])

    length = r.length()
    rope_type = params.get("rope_type", params.get("type", "default")) if scaling else "default"
    if not isinstance(rope_type, str) or rope_type not in ROPE_TYPES:
        supported = ", ".join(sorted(ROPE_TYPES))
        raise r.error(f"{prefix}rope_type", f"unsupported scaling type {rope_type!r}; supported: {supported}")
    schedule = ROPE_TYPES[rope_type]
    r.set("scaling", schedule, f"{prefix}{'rope_type' if 'rope_type' in params else 'type'} {rope_type!r}")
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
