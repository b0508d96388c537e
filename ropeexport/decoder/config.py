"""A decoder's spec from a transformers config: ``from_config``, and ``shrink`` (a tiny model of a real config).

The config's architecture (``ropeexport.architectures``) reads its model-wide fields (``Architecture.layout``) and
builds its default layer; ``ropeexport.hf`` reads its encoding per layer (``import_layers``: layer types, windows,
no-RoPE layers, the scaling per type); each layer that differs from the default one is written as the fields where
it does (``DecoderSpec.layers``). ``shrink`` applies the size overrides that make a tiny test model of a real config
(``--num-layers``, ``--hidden-size``, ``--vocab-size``) to the config itself, so the transformers reference is built
from the same numbers.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ropeexport.architectures import architecture
from ropeexport.decoder.spec import DEFAULT_ALIBI_LENGTH, DecoderSpec
from ropeexport.errors import ArtifactError, SpecError
from ropeexport.hf import LAYER_TYPES, TEXT_CONFIGS, Layers, import_layers, text_config
from ropeexport.specs import require_int
from ropeexport.store import flat

_HEADS = ("num_attention_heads", "n_head")
_HIDDEN = ("hidden_size", "n_embd", "n_embed")
_LAYERS = ("num_hidden_layers", "n_layer")


def _first(config: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((k for k in keys if config.get(k) is not None), None)


def shrink(
    config: Mapping[str, Any],
    num_layers: int | None = None,
    hidden_size: int | None = None,
    vocab_size: int | None = None,
) -> dict[str, Any]:
    """A copy of ``config`` with fewer layers, a narrower width or a smaller vocabulary (a tiny model of a real
    config): head_dim kept (latent attention's: qk_rope_head_dim), heads = hidden_size / head_dim, the query-per-KV-head
    ratio kept (at least one KV head), the MLP scaled by the same factor (Gemma 4's experts too, its MLP kept a whole
    number of them wide), Gemma 4's shared key/value layers scaled with the layers and capped to what transformers
    holds (``_shared_layers``). The positional encoding's schedule is untouched.
    """  # noqa: D205
    out: dict[str, Any] = copy.deepcopy(dict(config))
    wrapper = out.get("model_type")
    if isinstance(out.get("text_config"), Mapping) and isinstance(wrapper, str) and wrapper in TEXT_CONFIGS:
        out["text_config"] = shrink(out["text_config"], num_layers, hidden_size, vocab_size)
        return out
    if num_layers is not None:
        key = _first(out, _LAYERS) or "num_hidden_layers"
        old_count, out[key] = out.get(key), require_int("num_layers", num_layers, 1, 1024)
        # the first layers of the model, as they are (GLM-4.7-Flash's mlp_layer_types: each layer's MLP kind)
        for per_layer in ("layer_types", "no_rope_layers", "mlp_layer_types"):
            value = out.get(per_layer)
            if isinstance(value, list) and len(value) == old_count and num_layers <= len(value):
                out[per_layer] = value[:num_layers]
        shared = out.get("num_kv_shared_layers")
        if isinstance(shared, int) and not isinstance(shared, bool) and shared > 0 and isinstance(old_count, int):
            out["num_kv_shared_layers"] = _shared_layers(shared, old_count, num_layers, out.get("layer_types"))
    if vocab_size is not None:
        out["vocab_size"] = require_int("vocab_size", vocab_size, 1, 2**22)
        # Special ids past the new vocabulary mean nothing (and an absent one takes the class default: Phi-3's pad
        # is 32000), so they are cleared unless they fit.
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if not (isinstance(out.get(key), int) and out[key] < vocab_size):
                out[key] = None
        if out.get("model_type") == "gemma4_text":  # its per-layer table is indexed by the same ids (262144 absent)
            out["vocab_size_per_layer_input"] = min(int(out.get("vocab_size_per_layer_input") or 2**18), vocab_size)
    if hidden_size is None:
        return out
    new = require_int("hidden_size", hidden_size, 1, 2**17)
    hidden_key, heads_key = _first(out, _HIDDEN), _first(out, _HEADS)
    if hidden_key is None or heads_key is None:
        raise SpecError("hidden_size", "the config names no hidden size or head count to shrink")
    old, heads = int(out[hidden_key]), int(out[heads_key])
    # latent attention's heads are not hidden / heads wide (GLM-4.7-Flash: 2048 / 20): its rotary width is the
    # rope part of each head, qk_rope_head_dim (DeepSeek V3's config says it as head_dim too)
    latent = "qk_rope_head_dim" if out.get("kv_lora_rank") and out.get("qk_rope_head_dim") else None
    width = "head_dim" if out.get("head_dim") or latent is None else latent
    head_dim = int(out.get(width) or old // heads)
    if new % head_dim:
        raise SpecError("hidden_size", f"must be a multiple of {width} ({head_dim}) to keep the rotary width, "
                        f"got {new}")  # fmt: skip
    new_heads = new // head_dim
    for kv_key in ("num_key_value_heads", "num_global_key_value_heads"):  # the second: Gemma 4's full layers'
        if out.get(kv_key):
            kv = max(1, new_heads // max(1, heads // int(out[kv_key])))
            while new_heads % kv:  # the largest count at most the kept ratio that divides the heads
                kv -= 1
            out[kv_key] = kv
    out[hidden_key], out[heads_key] = new, new_heads
    moe, inner = out.get("moe_intermediate_size"), out.get("intermediate_size")
    # Gemma 4's mixture: its MLP a whole number of experts wide (``components.gemma4_moe``), a ratio kept as it shrinks
    ratio = int(inner) // int(moe) if out.get("enable_moe_block") and moe and inner and not int(inner) % int(moe) else 0
    for key in ("intermediate_size", "n_inner", *(("moe_intermediate_size",) if ratio else ())):
        if out.get(key):
            out[key] = max(1, round(int(out[key]) * new / old))
    if ratio:
        out["intermediate_size"] = ratio * int(out["moe_intermediate_size"])
    return out


def _shared_layers(shared: int, old_count: int, new_count: int, types: object) -> int:
    """Gemma 4's ``num_kv_shared_layers`` for ``new_count`` layers: the card's share of its layers (at least one), then
    the most, at or below that, that transformers 5.23 holds (``Gemma4TextConfig.kv_sharing_modes`` raises unless the
    layers before the first shared one hold every layer type: each shared layer reads the last of its type there).
    E2B's 20 of 35 on 10 layers: 6, then 5 (the first 4 are all sliding; the fifth is its full layer).
    """  # noqa: D205
    n = min(new_count - 1, max(1, round(shared * new_count / old_count)))
    if isinstance(types, list) and len(types) == new_count:  # absent, the decoder says what it cannot read
        while n > 0 and set(types[: new_count - n]) != set(types):
            n -= 1
    return max(n, 0)


def from_config(
    config: Mapping[str, Any],
    name: str,
    where: str = "config.json",
    dtype: str = "fp32",
    graph: str = "fused",
    max_positions: int | None = None,
    weights: Mapping[str, Any] | None = None,
) -> DecoderSpec:
    """The decoder of a transformers config (after ``shrink``, if any); SpecError names the key at fault.

    ``weights``: how the projections are stored (``weight_format`` and its int4 settings; default: in the dtype).
    Per layer (``hf.import_layers``): its type's encoding, or none on a no-RoPE layer, and its type's attention (a
    sliding layer sees ``sliding_window`` key slots). The model's own ``position`` is its full-attention layers'
    encoding (the first layer's when every layer slides): what scenarios, regimes and the context length follow.
    """
    found = config.get("model_type")
    wrapper = found if isinstance(found, str) and found in TEXT_CONFIGS else ""  # a list is not even hashable
    config, where = text_config(config, where)
    arch = architecture(config, where)
    layout, sources = arch.layout(config, where)
    if wrapper:
        layout["text_of"], sources["text_of"] = wrapper, "model_type (the text model of a multimodal checkpoint)"
    layers = import_layers(config, where)
    default = next((layers.encodings[t] for t in layers.types if t == "full_attention"), None)
    default = default or layers.encodings[layers.types[0]]
    length = require_int("max_positions", max_positions, 1) if max_positions is not None else None

    def fields_of(imported_fields: Mapping[str, Any]) -> dict[str, Any]:
        position = dict(imported_fields)
        if length is not None:
            position["max_positions"] = length
        if "max_positions" not in position:  # BLOOM's config names no length (ALiBi extrapolates): its training one
            position["max_positions"] = DEFAULT_ALIBI_LENGTH
        return position

    position = fields_of(default.fields)
    imported_sources = dict(default.sources)
    if "max_positions" not in default.fields and length is None:
        imported_sources["max_positions"] = (
            f"default ({DEFAULT_ALIBI_LENGTH}, BLOOM's training length; --max-positions)"
        )
    sources |= {f"position.{k}": v for k, v in imported_sources.items()}
    per_layer = _layers_of(layers, layout, position, fields_of)
    if per_layer:
        sources["layers"] = "; ".join(f"{k} <- {v}" for k, v in layers.sources.items())
    arch = architecture(config, where)
    if arch.changes is not None:  # what else differs per layer (its feed-forward), read by the architecture
        changes, said = arch.changes(config, where, layout)
        if any(changes):
            base = per_layer or tuple({} for _ in changes)
            per_layer = tuple({**(a or {}), **b} for a, b in zip(base, changes, strict=True))
            line = "; ".join(f"{k} <- {v}" for k, v in said.items())
            sources["layers"] = f"{sources['layers']}; {line}" if "layers" in sources else line
    fields = {"name": name, "dtype": dtype, "graph": graph, "position": position, "layers": per_layer, **layout,
              **dict(weights or {})}  # fmt: skip
    return DecoderSpec.from_dict(fields, sources)


def _layers_of(layers: Layers, layout: Mapping[str, Any], position: Mapping[str, Any],
               fields_of: Any) -> tuple[Mapping[str, object] | None, ...]:  # fmt: skip
    """Per layer the fields where it differs from the model's default layer (``DecoderSpec.layers``), or () when
    every layer is the default one (a config of one encoding and one attention: the decoders built before layers).
    """  # noqa: D205
    if set(layers.types) == {"full_attention"} and all(layers.rotated):
        return ()
    out: list[Mapping[str, object] | None] = []
    for i, kind in enumerate(layers.types):
        layer: dict[str, object] = {}
        imported = layers.encoding(i)
        if imported is None:
            layer["position"] = None
        elif fields_of(imported.fields) != position:
            layer["position"] = fields_of(imported.fields)
        # a chunked layer (Llama 4) is its architecture's to describe (``Architecture.changes``: its chunk size)
        sliding = LAYER_TYPES.get(kind) == "sliding" and layers.window
        if sliding:
            layer |= {"attention": "sliding", "window": layers.window}
        elif layout.get("sliding_window"):
            layer |= {"attention": "full", "window": 0}
        out.append(layer)
    if all(not layer for layer in out):
        return ()
    return tuple(out)


def check_config(spec: DecoderSpec, config: Mapping[str, Any], where: str = "decoder.json config") -> None:
    """The spec this (stored) transformers config makes equal to ``spec``, field by field; else ArtifactError naming
    the first field that differs.

    ``verify`` reads the config a decoder was built from out of decoder.json, and it feeds the transformers reference
    and genai_config.json: an edited config (its hash rewritten) must not pass for the one the model was built from,
    so the spec is made again from it, as ``decoder.build.resolve`` made it (the spec's own name, dtype, graph,
    length and weight storage: the settings a build takes beside the config).
    """  # noqa: D205
    built = spec.to_dict()
    settings = ("weight_format", "block_size", "accuracy_level", "symmetric")
    storage: dict[str, Any] = {k: built[k] for k in settings if k in built}
    try:
        made = from_config(config, spec.name, dtype=spec.dtype, graph=spec.graph,
                           max_positions=spec.position_spec().max_positions, weights=storage).to_dict()  # fmt: skip
    except SpecError as exc:
        raise ArtifactError(f"{where}.{exc.field}", f"{exc.message} (it no longer makes this decoder's spec)") from None
    # set after the config's spec (``resolve``): int4's tied head and embedding, latent attention's latent cache
    for key in ("tied_head_int4", "tied_embedding_int4", "latent_cache"):
        if key in built:
            made[key] = built[key]
    a, b = flat(made), flat(built)
    for key in sorted(a.keys() | b.keys()):
        if a.get(key) != b.get(key):
            raise ArtifactError(where, f"makes {key} {a.get(key)!r} but the model was built with {b.get(key)!r}: "
                                "it is not the config this decoder was built from")  # fmt: skip
