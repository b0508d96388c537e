"""A config's positional encoding per layer: ``import_layers`` -> ``Layers`` (layer types, no-RoPE layers, the
window, the scaling per layer type), each read as the model type's transformers code reads it (its hook:
``ropeexport.architectures.config_hook``), a key that type does not read refused rather than ignored.
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ropeexport.architectures import ARCHITECTURES, TEXT_TYPES, WRAPPERS, config_hook
from ropeexport.architectures.hooks import ENCODING_TYPES, ConfigHook
from ropeexport.errors import SpecError
from ropeexport.hf.encoding import _import_one, describe
from ropeexport.hf.reader import Imported, _Reader

# transformers' layer types -> the attention a decoder layer of that type has.
LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}


# Layer types of other models: refused by name, never read as full attention.
OTHER_LAYER_TYPES = {
    "chunked_attention": "Llama 4's chunked attention (built for llama4_text only)",
    "linear_attention": "linear attention (Qwen3-Next's gated delta rule)",
    "conv": "convolution layers (LFM2)",
    "mamba": "state-space layers",
}



def _name(r: _Reader) -> str:
    """The config's model_type, as the reader has it."""
    return str(r.config.get("model_type"))


def _reading(attribute: str) -> list[str]:
    """The model types whose hook reads a per-layer key (``ConfigHook.reads_layer_types`` and the like), sorted."""
    hooks = [a.config_hook for a in ARCHITECTURES.values()] + list(ENCODING_TYPES.values())
    return sorted(h.model_type for h in hooks if getattr(h, attribute))


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


def text_config(config: Mapping[str, Any], where: str) -> tuple[Mapping[str, Any], str]:
    """The text model's config and where it is: a multimodal wrapper's ``text_config`` (``architectures.WRAPPERS``),
    else the config itself.
    """  # noqa: D205
    wrapper = config.get("model_type")
    if not isinstance(wrapper, str) or wrapper not in WRAPPERS:
        return config, where
    inner = config.get("text_config")
    hook = config_hook(wrapper)
    if inner is None and hook is not None and hook.text_flat:  # a flat hub config: the text keys at the top level
        return {**config, "model_type": WRAPPERS[wrapper]}, f"{where} (flat {wrapper} config: its text keys)"
    if not isinstance(inner, Mapping):
        raise SpecError(f"{where}: text_config", f"must be the text model's config (an object) in a {wrapper} "
                        f"config, got {inner!r}")  # fmt: skip
    found = inner.get("model_type", WRAPPERS[wrapper])  # none named: the wrapper's config class's default
    allowed = TEXT_TYPES.get(wrapper, (WRAPPERS[wrapper],))
    if not isinstance(found, str) or found not in allowed:
        named = " or ".join(map(repr, allowed)) if len(allowed) < 3 else f"one of {', '.join(map(repr, allowed))}"
        raise SpecError(f"{where}: text_config.model_type", f"must be {named} in a {wrapper} config, got "
                        f"{inner.get('model_type')!r}")  # fmt: skip
    return {**inner, "model_type": found}, f"{where}: text_config"


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


def _layer_types(r: _Reader, hook: ConfigHook | None, count: int | None) -> tuple[tuple[str, ...], str]:
    """Each layer's type and where the list came from (``layer_types``, the model type's pattern, or full)."""
    config = r.config
    if config.get("layer_types") is not None:
        assert count is not None
        types = _per_layer_list(r, "layer_types", count)
        if hook and hook.indexed:  # DSA's layers: full causal attention to the encoding (the indexer: its architecture)
            types = ["full_attention" if t == "indexed_attention" else t for t in types]
        if hook is not None and hook.full_alias:  # its own name for full attention (DeepSeek V3.2's indexed layers)
            types = ["full_attention" if t == hook.full_alias else t for t in types]
        others = hook.other_layers if hook else ()  # a hybrid's layers without attention: no encoding, read so
        chunked = ("chunked_attention",) if hook and hook.chunked else ()  # Llama 4's: its architecture reads them
        for i, kind in enumerate(types):  # a kind of layer not built is named first (Llama 4's chunked attention)
            if isinstance(kind, str) and kind in OTHER_LAYER_TYPES and kind not in (*others, *chunked):
                raise r.error(f"layer_types[{i}]", f"{kind!r} is not built: {OTHER_LAYER_TYPES[kind]}")
        if not (hook and hook.reads_layer_types) and any(t != "full_attention" for t in types):
            # Never read as all-full: Cohere 2, EXAONE 4 and others give their layer types meanings of their own.
            raise r.error("layer_types", f"not imported for {_name(r)!r} (ropeexport reads layer types for "
                          f"{', '.join(_reading('reads_layer_types'))}): refused rather than taking every layer "
                          "as full attention")  # fmt: skip
        allowed = (*LAYER_TYPES, *chunked, *others)
        for i, kind in enumerate(types):
            if not isinstance(kind, str) or kind not in allowed:
                raise r.error(f"layer_types[{i}]", f"unknown layer type {kind!r}; allowed: {', '.join(allowed)}")
        return tuple(types), "layer_types"
    if count is None:
        return (), "one encoding for every layer"
    if hook is not None and hook.attention_index_key:
        return _indexed_types(r, hook, count)
    if hook is not None and hook.pattern == "every-nth":
        found = r.get(hook.pattern_key) if hook.pattern_key else None  # OLMo 3's interval is fixed: no key
        pattern = hook.pattern_every if found is None else r.integer(*found)
        source = hook.pattern_key if found else (f"transformers' default {hook.pattern_key or 'pattern'} "
                                                 f"{hook.pattern_every} ({hook.model_type}: every "
                                                 f"{hook.pattern_every}th layer full)")  # fmt: skip
        other = hook.pattern_other
        return tuple(other if (i + 1) % pattern else "full_attention" for i in range(count)), source
    if hook is not None and hook.pattern == "alternating":
        return (tuple("sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(count)),
                f"transformers' {hook.model_type} pattern (even layers sliding)")  # fmt: skip
    if config.get("use_sliding_window") and config.get("sliding_window") is not None:
        # Qwen2/3 before layer_types: windows on the layers from max_window_layers on (transformers' derivation).
        found = r.get("max_window_layers")
        first = 0 if found is None else found[1]
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise r.error("max_window_layers", f"must be a layer count >= 0, got {first!r}")
        return (tuple("sliding_attention" if i >= first else "full_attention" for i in range(count)),
                "use_sliding_window with max_window_layers (layers from it on slide)")  # fmt: skip
    return ("full_attention",) * count, "no layer_types: every layer full attention"


def _indexed_types(r: _Reader, hook: ConfigHook, count: int) -> tuple[tuple[str, ...], str]:
    """Layer types from a list of the attention layers' indices (LFM2's ``full_attn_idxs``), the rest the hook's
    first layer without attention; no list: every layer attention (the config class's default).
    """  # noqa: D205
    key = hook.attention_index_key
    found = r.get(key)
    if found is None:
        return ("full_attention",) * count, f"no layer_types or {key}: every layer attention ({hook.model_type})"
    indices = found[1]
    if not isinstance(indices, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < count
                                            for i in indices):  # fmt: skip
        raise r.error(key, f"must list layer indices in 0..{count - 1}, got {indices!r}")
    other = hook.other_layers[0]
    return tuple("full_attention" if i in indices else other for i in range(count)), f"{key} (the rest {other})"


def _rotated(
    r: _Reader, hook: ConfigHook | None, count: int | None, types: tuple[str, ...]
) -> tuple[tuple[bool, ...], str]:
    """Per layer, whether it uses RoPE (``no_rope_layers``: 1 = RoPE, as SmolLM3 and Llama 4 write it; or the
    model type's rule, ``ConfigHook.rope_on``: Cohere 2 and EXAONE 4 rotate their sliding layers only).
    """  # noqa: D205
    if r.config.get("no_rope_layers") is not None:
        assert count is not None
        flags = _per_layer_list(r, "no_rope_layers", count)
        if not (hook and hook.reads_no_rope_layers) and not all(f == 1 for f in flags):
            raise r.error("no_rope_layers", f"not imported for {_name(r)!r} (ropeexport reads no-RoPE layers for "
                          f"{', '.join(_reading('reads_no_rope_layers'))}): refused rather than rotating every "
                          "layer")  # fmt: skip
        for i, flag in enumerate(flags):
            if flag not in (0, 1) or isinstance(flag, float):
                raise r.error(f"no_rope_layers[{i}]", f"must be 1 (the layer uses RoPE) or 0 (it does not), got "
                              f"{flag!r}")  # fmt: skip
        if not (hook and hook.rope_on):  # a rule of the type's own decides (all 1: the key says nothing)
            return tuple(bool(f) for f in flags), "no_rope_layers (1 = RoPE, 0 = none)"
    if hook is not None and hook.rope_on:
        if hook.rope_on == "sliding-if-windowed" and r.config.get("sliding_window") is None:
            # EXAONE 4: ``if self.sliding_window is None or self.is_sliding`` rotates every layer without a window
            return (True,) * len(types), f"every layer ({hook.model_type} without sliding_window)"
        return (tuple(t == "sliding_attention" for t in types),
                f"the sliding layers only ({hook.model_type}'s attention rotates where it has a window; the full "
                "layers have no positional encoding)")  # fmt: skip
    if count is not None and hook is not None and hook.no_rope_interval:
        found = r.get("no_rope_layer_interval")
        interval = hook.no_rope_interval if found is None else r.integer(*found)
        source = "no_rope_layer_interval" if found else f"transformers' default no_rope_layer_interval {interval}"
        return tuple((i + 1) % interval != 0 for i in range(count)), source
    return (True,) * (count or 1), "every layer"


def _rope_switched_on(r: _Reader, hook: ConfigHook) -> None:
    """A SpecError unless the config's RoPE switch (``ConfigHook.position_key``) says ``rope``."""
    value = r.config.get(hook.position_key)
    if value != "rope":
        raise r.error(hook.position_key, f"is {value!r}: this {hook.model_type} model has no positional encoding "
                      "(its code rotates only where it is 'rope'); there is nothing to audit or export")  # fmt: skip


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
    r: _Reader, hook: ConfigHook | None, kinds: tuple[str, ...]
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
    if not is_nested and hook is not None and hook.flat_scaling_on:
        return _flat_on_one_type(r, hook, kinds)
    if not is_nested:
        if not (hook and hook.local_theta):
            if local is not None:
                raise r.error("rope_local_base_freq", f"is Gemma 3's sliding-layer theta; not read for {_name(r)!r}")
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
    if "layer_types" not in config and not (hook and hook.pattern):
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


def _flat_on_one_type(
    r: _Reader, hook: ConfigHook, kinds: tuple[str, ...]
) -> tuple[dict[str, Mapping[str, Any]], str, dict[str, dict[str, str]]]:
    """``_type_configs`` of a type whose config class gives a 4.x ``rope_scaling`` and ``rope_theta`` to one layer
    type only (``ConfigHook.flat_scaling_on``), the others the default schedule at its default theta: OLMo 3's
    ``convert_rope_params_to_dict``, whose first ``kwargs.pop("rope_theta", ...)`` takes the config's theta for the
    full layers and leaves the sliding ones the class default (500000). A flat ``rope_parameters`` it would merge
    into the nested dict unread: refused.
    """  # noqa: D205
    config, own = r.config, hook.flat_scaling_on
    flat = config.get("rope_parameters")
    if isinstance(flat, Mapping) and flat:
        raise r.error("rope_parameters", f"is one flat setting; transformers' {hook.model_type} reads rope_parameters "
                      f"nested by layer type ({', '.join(LAYER_TYPES)}) and a 4.x rope_scaling as its {own} layers' "
                      "only: nest it, or write it as rope_scaling")  # fmt: skip
    others = {k: v for k, v in config.items() if k not in ("rope_scaling", "rope_parameters", "rope_theta")}
    others["rope_theta"] = hook.default_theta
    why = (f"transformers' {hook.model_type} default rope_theta {hook.default_theta:g} (its 4.x conversion gives the "
           f"config's rope_theta and rope_scaling to the {own} layers only)")  # fmt: skip
    configs: dict[str, Mapping[str, Any]] = {k: config if k == own else others for k in dict.fromkeys(kinds)}
    renamed = {k: {"rope_theta": why} for k in configs if k != own}
    return configs, f"rope_scaling and rope_theta for the {own} layers, the default for the others", renamed


def _global_geometry(
    r: _Reader, hook: ConfigHook, types: tuple[str, ...], full: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The full layers' flat config (``full``) with their own head_dim (and key/value heads), and the key each came from
    (``ConfigHook.global_head_dim``: Gemma 4's ``__post_init__``): ``per_layer_config`` (one override for every full
    layer, none for a sliding one: a geometry per layer type), else ``global_head_dim`` and, under
    ``attention_k_eq_v``, ``num_global_key_value_heads``; the two ways disagreeing is refused by the key.
    """  # noqa: D205
    config, flat = r.config, dict(full)
    given = config.get("per_layer_config")
    if given is not None:
        if not isinstance(given, Mapping):
            raise r.error("per_layer_config", f"must be a table of layer index -> overrides, got {given!r}")
        by_index: dict[int, Any] = {}  # transformers writes the indices zero-padded ("05"): read as numbers
        for key, value in given.items():
            if not str(key).isdigit() or int(key) >= len(types) or int(key) in by_index:
                raise r.error(f"per_layer_config.{key}", f"is not a layer index (0..{len(types) - 1}) named once")
            by_index[int(key)] = value
        override: dict[str, Any] | None = None
        for i, kind in enumerate(types):
            said = by_index.get(i, {})
            if not isinstance(said, Mapping) or any(k not in ("head_dim", "num_key_value_heads") for k in said):
                raise r.error(f"per_layer_config.{i}", f"may set head_dim and num_key_value_heads only, got {said!r}")
            if kind != "full_attention" and said:
                raise r.error(f"per_layer_config.{i}", f"overrides sliding layer {i} ({dict(said)}): ropeexport reads "
                              "one geometry per layer type (Gemma 4's: the full layers' own)")  # fmt: skip
            if kind == "full_attention" and override is not None and dict(said) != override:
                raise r.error(f"per_layer_config.{i}", f"({dict(said)}) differs from the other full layers' "
                              f"({override}): one geometry per layer type")  # fmt: skip
            override = dict(said) if kind == "full_attention" else override
        override = override or {}
        head_dim = override.get("head_dim", config.get("head_dim"))
        if config.get("global_head_dim") not in (None, head_dim):
            raise r.error("global_head_dim", f"({config['global_head_dim']!r}) contradicts per_layer_config's full "
                          f"layers' head_dim ({head_dim!r}); transformers reads per_layer_config")  # fmt: skip
        flat |= {k: override.get(k, flat.get(k)) for k in ("head_dim", "num_key_value_heads")}
        return flat, {k: "per_layer_config (the full layers')" for k in override}
    found = r.get("global_head_dim")
    flat["head_dim"] = hook.global_head_dim if found is None else r.integer(*found)
    sources = {"head_dim": "global_head_dim" if found else f"transformers' default global_head_dim "
               f"{hook.global_head_dim}"}  # fmt: skip
    kv = r.get("num_global_key_value_heads")
    if kv is not None and config.get("attention_k_eq_v"):  # transformers reads it under attention_k_eq_v only
        flat["num_key_value_heads"], sources["num_key_value_heads"] = r.integer(*kv), kv[0]
    return flat, sources


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
    hook = config_hook(model_type) if isinstance(model_type, str) else None
    per_layer = any(config.get(k) is not None for k in ("layer_types", "no_rope_layers"))
    per_layer = per_layer or bool(hook and hook.per_layer)
    has_count = r.get("num_hidden_layers", "n_layer", "num_layers") is not None
    count = _layer_count(r) if per_layer or has_count else None  # None: one entry stands for every layer
    name = model_type if isinstance(model_type, str) else ""
    types, types_source = _layer_types(r, hook, count)
    if not types:
        types = ("full_attention",)
    rotated, rotated_source = _rotated(r, hook, count, types)
    if hook is not None and hook.position_key:
        _rope_switched_on(r, hook)
    others = hook.other_layers if hook else ()
    if any(kind in others for kind in types):  # a hybrid's layers without attention carry no positional encoding
        rotated = tuple(on and kind not in others for on, kind in zip(rotated, types, strict=True))
        rotated_source += f"; {'/'.join(k for k in others if k in types)} layers: no attention, no encoding"
    window, window_source = _window(r, name, types)
    kinds = tuple(kind for kind in types if kind not in others)
    configs, scaling_source, renamed = _type_configs(r, hook, kinds or ("full_attention",))
    if hook is not None and hook.global_head_dim and "full_attention" in configs:
        configs["full_attention"], said = _global_geometry(r, hook, types, configs["full_attention"])
        renamed["full_attention"] = {**renamed.get("full_attention", {}), **said}
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


def import_config(config: Mapping[str, Any], where: str = "config.json") -> Imported:
    """Map a transformers config (a dict) to spec fields with their sources; SpecError names any field at fault.

    A config whose layers use different encodings (Gemma 3's sliding and global layers) is a SpecError naming them:
    ``import_layers`` reads it per layer.
    """
    return import_layers(config, where).only()
