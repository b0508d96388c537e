"""Model presets: one TOML card per real model in ``models/`` (shipped as package data), validated on load.

A card names its source and holds either ``[config]``, the fields of the model's public transformers config.json
that fix its positional encoding (turned into a spec by the same importer as ``--hf-config``), or ``[spec]``, spec
fields directly (for models defined by a paper). ``[build]`` lists the artifacts, dtypes and graphs it builds by
default; command-line flags can replace each list.

``Request``: one artifact to build, raw spec fields plus where each came from; ``expand`` turns a model's fields into
one request per (artifact, dtype, graph).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import tomllib

from ropeexport.catalog import encodings
from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.hf import Imported, import_layers
from ropeexport.hf.vision import import_vision, is_vision_config
from ropeexport.specs import NAME_PATTERN

# model types whose attention is MLA, not q/k/v heads
LATENT_ATTENTION = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "glm4_moe_lite", "glm_moe_dsa", "mistral4",
                    "mistral_large4_text")
_CARD_KEYS = ("name", "summary", "source", "notes", "config", "spec", "build")
_BUILD_KEYS = ("artifacts", "dtypes", "graphs", "max_positions")


@dataclass(frozen=True)
class Request:
    """One artifact to build: raw spec fields (validated by the spec class) and ``sources[field]`` for provenance.

    ``origin`` says what asked for it: {"preset": NAME} or {"hf_config": PATH} or {"spec": PATH} or {"flags": True}.
    """

    fields: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)
    origin: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Preset:
    """A model card: what the model is, where its values come from, and what it builds by default."""

    name: str
    summary: str
    source: str
    notes: str
    config: Mapping[str, Any] | None
    spec: Mapping[str, Any] | None
    artifacts: tuple[str, ...]
    dtypes: tuple[str, ...]
    graphs: tuple[str, ...]
    max_positions: int | None = None  # [build] max_positions: for configs that state no length (BLOOM, Falcon-RW)

    def imported(self) -> Imported:
        """The card's spec fields with their sources (through the transformers importer for ``[config]`` cards)."""
        if self.config is not None and is_vision_config(self.config):  # a vision tower's card: its 2-D RoPE
            imported = import_vision(self.config, where=f"preset {self.name} [config]")
        elif self.config is not None:
            layers = import_layers(self.config, where=f"preset {self.name} [config]")
            if len(layers.groups()) > 1 and "full_attention" in layers.encodings:
                # its layer types' encodings differ (Gemma 4): the full layers', the decoder's default layer's (a
                # decoder built from the card gives every layer its own)
                imported = layers.encodings["full_attention"]
            else:
                imported = layers.only()
        else:
            assert self.spec is not None
            fields = dict(self.spec)
            imported = Imported(str(fields.get("encoding", "rope")), fields, {k: self.source for k in fields})
        if self.max_positions is None:
            return imported
        return Imported(
            imported.model_type,
            imported.fields | {"max_positions": self.max_positions},
            imported.sources | {"max_positions": f"preset {self.name} [build] max_positions (see its notes)"},
        )

    def requests(
        self,
        artifacts: Sequence[str] | None = None,
        dtypes: Sequence[str] | None = None,
        graphs: Sequence[str] | None = None,
    ) -> list[Request]:
        """One request per (artifact, dtype, graph): the card's lists unless replaced."""
        return expand(
            self.imported(),
            self.name,
            artifacts or self.artifacts,
            dtypes or self.dtypes,
            graphs or self.graphs,
            origin={"preset": self.name, "source": self.source},
            chosen_by={k: f"--{k}" if given else f"the preset's [build] {k}s (no --{k})"
                       for k, given in (("artifact", artifacts), ("dtype", dtypes), ("graph", graphs))},  # fmt: skip
        )

    def key_parameters(self) -> dict[str, Any]:
        """The resolved fields that matter to a serving engineer (for ``ropeexport list --presets``)."""
        fields = self.imported().fields
        keys = (
            "encoding",
            "layout",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "rotary_dim",
            "theta",
            "scaling",
            "max_positions",
            "num_buckets",
            "max_distance",
            "d_model",
            "slope_scale",
            "axis_frequencies",
        )
        return {k: fields[k] for k in keys if k in fields}


def expand(
    imported: Imported,
    model: str,
    artifacts: Sequence[str],
    dtypes: Sequence[str],
    graphs: Sequence[str],
    origin: Mapping[str, Any],
    chosen_by: str | Mapping[str, str] = "the preset's [build] lists",
) -> list[Request]:
    """Requests named ``MODEL-ARTIFACT-DTYPE-GRAPH`` for every combination (the lists are checked by the spec).

    ``chosen_by`` says where the lists came from, for the provenance of artifact, dtype and graph: one source for
    the three, or one each (``{"dtype": "--dtype"}``: which branch applied, not the rule).
    """
    if "block" in artifacts and imported.model_type in LATENT_ATTENTION:
        # The spec holds MLA's decoupled RoPE part (a 64-wide key shared by heads); a plain attention layer built
        # from it would not be that model's layer (its scale, its compressed keys and values), so none is built.
        raise SpecError(
            "artifact",
            f"{imported.model_type} uses multi-head latent attention: a plain attention block would not be its layer; "
            "build its rope or scores artifact",
        )
    out = []
    each = {k: chosen_by for k in ("artifact", "dtype", "graph")} if isinstance(chosen_by, str) else dict(chosen_by)
    variant = {"name": f"{model}-ARTIFACT-DTYPE-GRAPH", **each}
    for artifact, dtype, graph in itertools.product(artifacts, dtypes, graphs):
        fields = imported.fields | {
            "name": f"{model}-{artifact}-{dtype}-{graph}",
            "artifact": artifact,
            "dtype": dtype,
            "graph": graph,
        }
        out.append(Request(fields, imported.sources | variant, dict(origin)))
    return out


def _strings(where: str, value: Any, allowed: Collection[str] | None = None) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise SpecError(where, f"must be a non-empty list of names, got {value!r}")
    for v in value:
        if allowed is not None and v not in allowed:
            raise SpecError(where, f"unknown value {v!r}; allowed: {', '.join(allowed)}")
    return tuple(value)


def parse_card(data: Mapping[str, Any], where: str) -> Preset:
    """Validate a card's contents (SpecError names the key at fault) and return the preset."""
    unknown = sorted(set(data) - set(_CARD_KEYS))
    if unknown:
        raise SpecError(f"{where}: {unknown[0]}", f"unknown key; allowed: {', '.join(_CARD_KEYS)}")
    for key in ("name", "summary", "source"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise SpecError(f"{where}: {key}", "must be a non-empty string")
    if not NAME_PATTERN.match(data["name"]):
        raise SpecError(f"{where}: name", "must be letters, digits, '.', '_' or '-'")
    if ("config" in data) == ("spec" in data):
        raise SpecError(where, "must have exactly one of [config] (transformers fields) or [spec] (spec fields)")
    build = data.get("build", {})
    if not isinstance(build, Mapping) or set(build) - set(_BUILD_KEYS):
        raise SpecError(f"{where}: build", f"must be a table with keys {', '.join(_BUILD_KEYS)}")
    preset = Preset(
        name=data["name"],
        summary=data["summary"],
        source=data["source"],
        notes=str(data.get("notes", "")),
        config=data.get("config"),
        spec=data.get("spec"),
        artifacts=_strings(f"{where}: build.artifacts", build["artifacts"]) if "artifacts" in build else (),
        dtypes=_strings(f"{where}: build.dtypes", build.get("dtypes", ["fp32"]), DTYPES),
        graphs=_strings(f"{where}: build.graphs", build.get("graphs", ["fused"])),
        max_positions=build.get("max_positions"),
    )
    encoding = preset.imported().fields.get("encoding", "rope")
    if encoding not in encodings():
        raise SpecError(f"{where}: encoding", f"unknown encoding {encoding!r}; allowed: {', '.join(encodings())}")
    cls = encodings()[encoding]
    for artifact in preset.artifacts:
        if artifact not in cls.artifacts:
            raise SpecError(
                f"{where}: build.artifacts", f"unknown artifact {artifact!r}; allowed: {', '.join(cls.artifacts)}"
            )
    for graph in preset.graphs:
        if graph not in cls.graphs:
            raise SpecError(f"{where}: build.graphs", f"unknown graph {graph!r}; allowed: {', '.join(cls.graphs)}")
    return preset if preset.artifacts else dataclasses.replace(preset, artifacts=(cls.artifacts[0],))


@cache
def presets() -> dict[str, Preset]:
    """Every shipped preset by name, each card validated (a broken card is a packaging error, raised here)."""
    out: dict[str, Preset] = {}
    folder = resources.files("ropeexport").joinpath("models")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".toml"):
            continue
        preset = parse_card(tomllib.loads(entry.read_text(encoding="utf-8")), f"models/{entry.name}")
        if f"{preset.name}.toml" != entry.name:
            raise SpecError(f"models/{entry.name}: name", f"must match the file name, got {preset.name!r}")
        out[preset.name] = preset
    return out


def get_preset(name: str) -> Preset:
    """The named preset; an unknown name lists the valid ones."""
    known = presets()
    if name not in known:
        raise SpecError("preset", f"unknown preset {name!r}; allowed: {', '.join(known)}")
    return known[name]
