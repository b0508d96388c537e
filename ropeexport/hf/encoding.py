"""One encoding of a config whose layers share it: RoPE (its theta, rotated width and scaling), ALiBi or T5's buckets,
each field with the key it came from. The model type's hook (``ropeexport.architectures.config_hook``) says which
encoding, RoPE's pairing and theta default; an unknown scaling type or parameter is an error, never dropped, because
a dropped scaling is what turns long-context output into gibberish.
"""  # noqa: D205

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ropeexport.architectures import ARCHITECTURES, config_hook, known_types
from ropeexport.architectures.hooks import NOT_BUILT_TYPES, ConfigHook
from ropeexport.architectures.missing import missing
from ropeexport.errors import SpecError
from ropeexport.families.rope.schedules import proportional_pairs
from ropeexport.hf.mrope import KEYS as MROPE_KEYS
from ropeexport.hf.mrope import TYPE as MROPE_TYPE
from ropeexport.hf.mrope import read_mrope
from ropeexport.hf.reader import Imported, _Reader

# transformers rope types -> ropeexport schedules. "su" is LongRoPE's name in Phi-3's first releases.
ROPE_TYPES = {
    "default": "default",
    "linear": "linear",
    "dynamic": "dynamic",
    "yarn": "yarn",
    "llama3": "llama3",
    "longrope": "longrope",
    "su": "longrope",
    "proportional": "proportional",  # Gemma 4's global layers
}


# Keys of rope_scaling / rope_parameters that select the type or restate a top-level field, not schedule parameters.
_SELECTORS = ("type", "rope_type", "rope_theta", "partial_rotary_factor")


# Model types named differently in older configs.
ALIASES = {"RefinedWebModel": "falcon", "RefinedWeb": "falcon"}


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
    hook = config_hook(model_type)
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
    if hook is not None and hook.encoding == "t5":
        _t5(r)
    elif hook is not None and _uses_alibi(r, hook):
        _alibi(r, model_type)
    elif hook is not None and hook.encoding == "rope":
        _rope(r, hook)
    elif model_type in NOT_BUILT_TYPES:
        raise r.error("model_type", f"{model_type!r}: {NOT_BUILT_TYPES[model_type]}")
    else:
        known = known_types()
        lacks = missing(config, tuple(ARCHITECTURES))  # the feature by name (multi-axis RoPE, a wrapper's text_config)
        raise r.error(
            "model_type",
            f"unknown model type {model_type!r}{f': {lacks}' if lacks else ''}: ropeexport does not guess a positional "
            f"encoding (or a RoPE layout); known: {', '.join(known)}; for another model write a `spec_file`",
        )
    return Imported(model_type, r.fields, r.sources)


def _uses_alibi(r: _Reader, hook: ConfigHook) -> bool:
    """Whether the config is an ALiBi model: its type's always (BLOOM), or where its config switches it on (MPT's
    attn_config.alibi; Falcon-RW's alibi, where Falcon 7B/40B use RoPE).
    """  # noqa: D205
    if hook.alibi_in:
        attn = r.config.get(hook.alibi_in) or {}
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
    if hook.alibi_key:
        return bool(r.config.get(hook.alibi_key, False))
    return hook.encoding == "alibi"


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


def _rope(r: _Reader, hook: ConfigHook) -> None:
    config, model_type = r.config, hook.model_type
    r.set("encoding", "rope", f"model_type {model_type!r}")
    heads_key, heads = r.heads()
    r.set("num_heads", heads, heads_key)
    if hook.shared_rope_key:
        found = r.get("qk_rope_head_dim")
        if found is None:
            raise r.error("qk_rope_head_dim", f"missing: {model_type} rotates only its qk_rope_head_dim channels")
        r.set("head_dim", r.integer(*found), "qk_rope_head_dim (the rotated part of each head)")
        r.set("num_kv_heads", 1, f"{model_type}'s rotary key k_pe is one head shared by every query head")
    else:
        head_dim, source = r.head_dim(heads_key, heads, explicit=() if hook.head_dim_derived else ("head_dim",))
        said = r.get("head_dim")
        if hook.head_dim_derived and said is not None and said[1] != head_dim:
            raise r.error("head_dim", f"({said[1]!r}) is not {source} ({head_dim}): transformers' {model_type} "
                          "config sets head_dim to that whatever the config says")  # fmt: skip
        r.set("head_dim", head_dim, source)
        kv = r.get("num_key_value_heads", "num_kv_heads")
        if hook.multi_query and config.get("multi_query") and not config.get("new_decoder_architecture"):
            # FalconAttention: one key head for multi_query unless new_decoder_architecture, whatever num_kv_heads says.
            r.set("num_kv_heads", 1, "multi_query (without new_decoder_architecture)")
        elif kv is not None:
            r.set("num_kv_heads", r.integer(*kv), kv[0])
        else:
            r.set("num_kv_heads", heads, f"{heads_key} (no num_key_value_heads: multi-head attention)")
    layout, why = hook.layout
    r.set("layout", layout, why)

    scaling = _scaling_dict(r)
    params: Mapping[str, Any] = scaling[1] if scaling else {}
    prefix = f"{scaling[0]}." if scaling else ""
    named = params.get("rope_type", params.get("type"))
    if named == "proportional":  # its share of real pairs is the schedule's; every channel rotates
        _proportional_share(r, params, prefix)
    else:
        _rotary_dim(r, params, prefix, hook)
    theta = (
        (f"{prefix}rope_theta", params["rope_theta"])
        if params.get("rope_theta") is not None
        else r.get("rope_theta", "rotary_emb_base", "rope_embedding_base")
    )
    if theta is None:
        if hook.theta_required:  # its config class fills in more than a theta (gpt-oss: a whole YaRN setting)
            raise r.error("rope_parameters", hook.theta_required)
        default = hook.default_theta
        r.set("theta", default, f"transformers' default rope_theta for {model_type} (absent from the config)")
    else:
        r.set("theta", r.number(*theta), theta[0])

    length = r.length()
    rope_type = params.get("rope_type", params.get("type", "default")) if scaling else "default"
    if hook.mrope:  # multimodal RoPE (hf.mrope): its keys read, "mrope" the default schedule as transformers reads it
        read_mrope(r, params, prefix, hook)
        rope_type = "default" if rope_type == MROPE_TYPE else rope_type
    if not isinstance(rope_type, str) or rope_type not in ROPE_TYPES:
        supported = ", ".join(sorted(ROPE_TYPES))
        raise r.error(f"{prefix}rope_type", f"unsupported scaling type {rope_type!r}; supported: {supported}")
    schedule = ROPE_TYPES[rope_type]
    key = next((k for k in ("rope_type", "type") if k in params), None)
    if key is not None:
        named = params[key] if params[key] == rope_type else f"{params[key]!r}, read as {rope_type!r}"
        r.set("scaling", schedule, f"{prefix}{key} {named if named != rope_type else repr(rope_type)}")
    else:  # nothing in the config names a schedule: say so, not a key that is not there
        where = f"{scaling[0]} names no rope_type" if scaling else "no rope_scaling / rope_parameters in the config"
        r.set("scaling", schedule, f"{where} (unscaled)")
    extra = (*hook.rope_extra_keys, *(MROPE_KEYS if hook.mrope else ()))
    values = {k: v for k, v in params.items() if k not in (*_SELECTORS, *extra)}
    if schedule == "proportional" and params.get("partial_rotary_factor") is not None:
        values["partial_rotary_factor"] = params["partial_rotary_factor"]
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


def _proportional_share(r: _Reader, params: Mapping[str, Any], prefix: str) -> None:
    """Proportional RoPE (transformers' ``_compute_proportional_rope_parameters``): every channel of the head rotates
    (rotate-half over all of head_dim), the dict's ``partial_rotary_factor`` the share of pairs with a real frequency
    (a schedule parameter, not a rotated width); a top-level one, or a ``rotary_dim``, that transformers' proportional
    code does not read is refused rather than taken for it.
    """  # noqa: D205
    for key in ("partial_rotary_factor", "rotary_dim", "rotary_pct"):
        if r.get(key) is not None:
            raise r.error(key, f"is not read by proportional RoPE, which takes {prefix}partial_rotary_factor as its "
                          "share of real frequencies and rotates all of head_dim")  # fmt: skip
    share = params.get("partial_rotary_factor", 1.0)  # transformers' default (it warns: the linear schedule then)
    head_dim: int = r.fields["head_dim"]
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise r.error(f"{prefix}partial_rotary_factor", f"must be a number in (0, 1], got {share!r}")
    if proportional_pairs(head_dim, share) < 1:
        raise r.error(f"{prefix}partial_rotary_factor", f"{share!r} leaves no real frequency: int({share!r} x head_dim "
                      f"{head_dim} // 2) = 0 pairs rotate")  # fmt: skip
    r.set("rotary_dim", 0, "head_dim (proportional RoPE rotates every channel, its zero-frequency pairs unchanged)")


def _rotary_dim(r: _Reader, params: Mapping[str, Any], prefix: str, hook: ConfigHook) -> None:
    head_dim: int = r.fields["head_dim"]
    explicit = r.get("rotary_dim")
    if explicit is not None:
        r.set("rotary_dim", r.integer(*explicit), "rotary_dim")
        return
    top = r.get("partial_rotary_factor")
    if params.get("partial_rotary_factor") is not None:
        said = params["partial_rotary_factor"]
        if top is not None and top[1] != said:
            raise r.error("partial_rotary_factor", f"({top[1]!r}) contradicts {prefix}partial_rotary_factor "
                          f"({said!r}): 4.x and 5.x keys disagree")  # fmt: skip
        fraction: tuple[str, Any] | None = (f"{prefix}partial_rotary_factor", said)
    else:
        fraction = r.get("partial_rotary_factor", "rotary_pct")
    if fraction is not None and hook.partial_of_qk_head:  # Mistral 4: a share of nope + rope (ConfigHook)
        nope, rope = r.get("qk_nope_head_dim"), r.get("qk_rope_head_dim")
        whole = (r.integer(*nope) if nope is not None else 0) + head_dim
        if rope is None or int(whole * r.number(*fraction)) != head_dim:
            raise r.error(fraction[0], f"({fraction[1]!r}) x (qk_nope_head_dim + qk_rope_head_dim = {whole}) must be "
                          f"qk_rope_head_dim ({head_dim}): transformers' {hook.model_type} rotates that many channels "
                          "of the rope slice, which its rotation cannot apply otherwise")  # fmt: skip
        r.set("rotary_dim", 0, f"int((qk_nope_head_dim + qk_rope_head_dim) x {fraction[0]}): the whole rope slice")
        return
    if fraction is None and hook.default_partial:
        fraction = (f"transformers' default partial_rotary_factor for {hook.model_type}", hook.default_partial)
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


def describe(encoding: Imported | Mapping[str, Any] | Any) -> str:
    """An encoding in the field's words: ``theta 1e+06 with linear x8``, ``theta 10000, unscaled``, ``ALiBi, 32
    heads``: the one description of an encoding, for a config's ``Imported`` fields, a table of spec fields or a spec
    (the audit's findings and the import's errors alike).
    """  # noqa: D205
    if isinstance(encoding, Imported):
        fields: Mapping[str, Any] = encoding.fields
    elif isinstance(encoding, Mapping):
        fields = encoding
    else:
        fields = encoding.to_dict()
    if fields.get("encoding") == "alibi":
        return f"ALiBi, {fields.get('num_heads')} heads"
    if fields.get("encoding", "rope") != "rope":
        return str(fields.get("encoding"))
    words = f"theta {fields['theta']:g}"
    params = fields.get("scaling_params") or {}
    scaling = fields.get("scaling", "default")
    if scaling == "default":
        words += ", unscaled"
    elif "factor" in params:
        words += f" with {scaling} x{params['factor']:g}"
    else:
        words += f" with {scaling}"
    if scaling == "yarn" and params.get("truncate") is False:
        words += " (untruncated)"
    rotary = fields.get("rotary_dim")
    if rotary and rotary != fields.get("head_dim"):
        words += f", {rotary} of {fields['head_dim']} channels rotated"
    return words
