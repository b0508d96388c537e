"""What to build, before validation: requests from presets, a Hugging Face config, spec files or plain fields.

A request is raw spec fields plus their provenance (``presets.Request``). These functions are the library side of
``ropeexport build``'s sources; the CLI only turns flags into their arguments. Field names, never flags, appear here:
provenance says ``override`` where the CLI says which flag (``label`` maps one to the other).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ropeexport.catalog import encodings
from ropeexport.hf import import_layers, model_name, read_config, spans
from ropeexport.hf.learned_rope import beside, with_learned_rope
from ropeexport.hf.vision import import_vision, is_vision_config
from ropeexport.presets import Request, expand, get_preset
from ropeexport.specs import read_spec_file

VARIANT_FIELDS = ("artifact", "dtype", "graph")


def from_presets(
    names: Sequence[str],
    artifacts: Sequence[str] | None = None,
    dtypes: Sequence[str] | None = None,
    graphs: Sequence[str] | None = None,
) -> list[Request]:
    """One request per (preset, artifact, dtype, graph): each card's ``[build]`` lists unless given."""
    listed = {"artifacts": artifacts, "dtypes": dtypes, "graphs": graphs}
    return [r for name in dict.fromkeys(names) for r in get_preset(name).requests(**listed)]


def from_hf_config(
    path: str | Path,
    artifacts: Sequence[str] | None = None,
    dtypes: Sequence[str] | None = None,
    graphs: Sequence[str] | None = None,
    vision: bool = False,
) -> list[Request]:
    """Requests for a transformers config.json on disk: the encoding's first artifact, fp32, fused unless given.

    A model whose layers use different encodings (Gemma 3's sliding and global layers) gets them for each encoding,
    named ``MODEL-TYPE-...`` by the layer types that use it (``sliding``, ``full``); every request's origin says which
    layers use its encoding and which use none. ``vision`` (or a vision tower's own config): the vision tower's 2-D
    RoPE (``hf.vision``), read from the config's ``vision_config``.
    """
    # a RoPE learned as a checkpoint buffer (Mistral Large 4's LeRoPE alpha): read from the checkpoint beside it
    config = dict(with_learned_rope(read_config(path), beside(path)))
    if vision or is_vision_config(config):
        tower = import_vision(config, where=str(path))
        return expand(
            tower,
            f"{model_name(config, path)}-vision" if not is_vision_config(config) else model_name(config, path),
            artifacts or ["rope"],
            dtypes or ["fp32"],
            graphs or ["fused"],
            origin={"hf_config": str(Path(path).resolve()), "model_type": tower.model_type},
            chosen_by={"artifact": "--artifact" if artifacts else "the encoding's first artifact (no --artifact)",
                       "dtype": "--dtype" if dtypes else "default fp32 (no --dtype)",
                       "graph": "--graph" if graphs else "default fused (no --graph)"},  # fmt: skip
        )
    layers = import_layers(config, where=str(path))
    groups = layers.groups()
    if not groups:
        layers.only()  # the one-line error: no layer has a positional encoding
    model = model_name(config, path)
    out = []
    for imported, kinds, indices in groups:
        encoding = encodings()[imported.fields["encoding"]]
        origin: dict[str, Any] = {"hf_config": str(Path(path).resolve()), "model_type": imported.model_type}
        if len(layers.types) > 1:  # a config that names its layers: say which use this encoding, which none
            origin |= {"layer_types": list(kinds), "layers": spans(indices)}
            if layers.unrotated():
                origin["no_rope_layers"] = spans(layers.unrotated())
        named = model if len(groups) == 1 else f"{model}-{'-'.join(k.removesuffix('_attention') for k in kinds)}"
        out += expand(
            imported,
            named,
            artifacts or [encoding.artifacts[0]],
            dtypes or ["fp32"],
            graphs or ["fused"],
            origin=origin,
            chosen_by={"artifact": "--artifact" if artifacts else "the encoding's first artifact (no --artifact)",
                       "dtype": "--dtype" if dtypes else "default fp32 (no --dtype)",
                       "graph": "--graph" if graphs else "default fused (no --graph)"},  # fmt: skip
        )
    return out


def from_fields(
    raws: list[dict[str, Any]],
    variants: Mapping[str, Sequence[str] | None],
    origin: Mapping[str, Any],
) -> list[Request]:
    """Each raw spec once per combination of the variant lists given ({artifact, dtype, graph}: list or None)."""
    out = []
    for raw in raws:
        lists: dict[str, list[Any]] = {k: list(variants.get(k) or ()) or [raw.get(k)] for k in VARIANT_FIELDS}
        combos = [(a, d, g) for a in lists["artifact"] for d in lists["dtype"] for g in lists["graph"]]
        for artifact, dtype, graph in combos:
            fields = dict(raw) | {k: v for k, v in zip(VARIANT_FIELDS, (artifact, dtype, graph), strict=True) if v}
            if len(combos) > 1 and raw.get("name"):
                fields["name"] = "-".join([raw["name"], *(str(v) for v in (artifact, dtype, graph) if v)])
            out.append(Request(fields, {k: origin.get("spec", "command line") for k in fields}, dict(origin)))
    return out


def from_spec_file(path: str | Path, variants: Mapping[str, Sequence[str] | None] | None = None) -> list[Request]:
    """Requests for a .json or .toml spec file (one spec, or ``artifacts = [...]``)."""
    return from_fields(read_spec_file(path), variants or {}, {"spec": str(Path(path).resolve())})


def with_overrides(
    requests: list[Request], overrides: Mapping[str, Any], label: Callable[[str], str] = lambda key: "override"
) -> list[Request]:
    """Field values that replace every request's, with their provenance (``label(field)``, e.g. the CLI flag).

    ``scaling`` drops the old schedule's parameters (and their sources); ``scaling_params`` without ``scaling``
    changes those parameters of the resolved schedule and keeps the others.
    """
    if "scaling" in overrides and "scaling_params" not in overrides:
        requests = [
            dataclasses.replace(
                r,
                fields={k: v for k, v in r.fields.items() if k != "scaling_params"},
                sources={k: v for k, v in r.sources.items() if k != "scaling_params"},
            )
            for r in requests
        ]
    labelled = {k: label(k) for k in overrides}
    out = []
    for r in requests:
        fields = r.fields | dict(overrides)
        sources = r.sources | labelled
        if "scaling_params" in overrides and "scaling" not in overrides and "scaling_params" in r.fields:
            fields["scaling_params"] = dict(r.fields["scaling_params"]) | dict(overrides["scaling_params"])
            changed = ", ".join(sorted(overrides["scaling_params"]))
            sources["scaling_params"] = f"{r.sources.get('scaling_params', '')}; {label('scaling_param')} for {changed}"
        out.append(dataclasses.replace(r, fields=fields, sources=sources))
    return out
