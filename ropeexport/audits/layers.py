"""Per layer: which layers read a site (``site_layers``), and which encoding each layer needs (``Encodings``: from a
transformers config, or a ``--spec`` file where none is at hand).

A site's readers carry their layer in every exporter audit meets (``layer_of``): ropeexport's decoders name nodes
``layers.{i}/...``, onnxruntime-genai's builder and TorchScript ``/model/layers.{i}/...``, torch.onnx's dynamo exporter
names its nodes ``node_Mul_12`` but records the module path (``model.layers.{i}.self_attn``) in each node's
``pkg.torch.onnx.name_scopes`` and ``namespace`` metadata. A site whose readers name no layer is ``None``: the audit
then checks it against every encoding of the model and says which one it matches.

A per-layer spec file (JSON or TOML)::

    {"layers": ["local", "local", "global", null],
     "encodings": {"local": {<spec fields>}, "global": {<spec fields>}}}

one entry per layer (null: no positional encoding), each naming an encoding of ``encodings`` (the fields
``ropeexport build --spec`` takes: ``catalog.spec_from_dict``); or one spec's fields, for every layer.
"""  # noqa: D205

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import onnx_ir as ir
import tomllib

from ropeexport.audits.downstream import consumers
from ropeexport.audits.patterns.base import is_constant
from ropeexport.errors import SpecError
from ropeexport.hf import spans
from ropeexport.inputs import check_depth, loads_json, read_text

# A layer's index in a node name or module path: layers.3, layers_3, layer.3, h.3 (GPT-2 style), blocks.3
LAYER = re.compile(r"(?:^|[/.:\s'\"\[])(?:layers|layer|h|blocks|block)[._](\d+)(?=[/.:\s'\"\],_]|$)")
# node metadata holding the module path: torch.onnx (dynamo)'s scopes, and its older namespace string
SCOPES = ("pkg.torch.onnx.name_scopes", "namespace")
DECLARED = "ropeexport.max_positions"  # the positions a model ropeexport built serves (its guards refuse the rest)


def who(label: str, layers: tuple[int, ...] | list[int]) -> str:
    """Layers in words: ``sliding layers (0-1, 3-4)``, ``sliding layer 2``, ``layers 1, 3``, ``layer 3``."""
    if len(layers) == 1:
        return f"{label} layer {layers[0]}".strip()
    return f"{label} layers ({spans(layers)})" if label else f"layers {spans(layers)}"


def render(template: str, label: str, layers: tuple[int, ...] | list[int]) -> str:
    """A finding about layers in words: ``{who}`` the layers, ``{s}`` / ``{has}`` / ``{are}`` / ``{them}`` agreeing
    with them.
    """  # noqa: D205
    one = len(layers) == 1
    return template.format(who=who(label, layers), s="s" if one else "", has="has" if one else "have",
                           are="is" if one else "are", them="it" if one else "them")  # fmt: skip


def layer_finding(name: str, template: str, label: str, layers: tuple[int, ...] | list[int]) -> dict[str, Any]:
    """A finding that names layers (``render``), with what merging it with another site's takes: the template, the
    label and the layers.
    """  # noqa: D205
    chosen = sorted(layers)
    return {"name": name, "text": render(template, label, chosen), "template": template, "label": label,
            "layers": chosen}  # fmt: skip


def layer_of(name: str, props: Mapping[str, str] | None = None) -> int | None:
    """The layer a node belongs to: the one index its name names, else its metadata's module path; None when neither
    names exactly one.
    """  # noqa: D205
    for text in (name, *((props or {}).get(k, "") for k in SCOPES)):
        found = {int(i) for i in LAYER.findall(text or "")}
        if len(found) == 1:
            return found.pop()
    return None


def reader_nodes(site: Any) -> list[ir.Node]:
    """The nodes that read a site: its operator's readers, else every node reading its cos or sin (computed)."""
    if site.readers:
        return list(site.readers)
    nodes: dict[int, ir.Node] = {}
    for value in site.values[:2]:
        for use in [] if value is None else value.uses():
            nodes.setdefault(id(use.node), use.node)
    return list(nodes.values())


def site_layers(site: Any) -> tuple[int, ...] | None:
    """The layers whose nodes read ``site`` (module doc): those of the rotations that use it where they were read
    (``audits.uses``), else of its readers, where a table lookup (Gather) that names its layer serves every layer whose
    nodes compute with what it looked up (``audits.downstream``: ONNX Runtime's optimizer leaves one lookup per table
    for the whole model), and a join of its own cos and sin that names no layer (``_joins``) by what the join reaches;
    None when none names one.
    """  # noqa: D205
    rotations = getattr(site, "rotations", None)
    if rotations:
        found = {r.layer for r in rotations} - {None}
    else:
        readers = reader_nodes(site)
        found = {layer_of(n.name or "", n.metadata_props) for n in readers} - {None}
        if not found and readers and all(_joins(n, site) for n in readers):
            # cos and sin joined where the model computes them, in no layer (transformers' Llama 4 rotary module:
            # cat([cos, sin]), exported by dynamo): the layers are those of what the join reaches
            readers = consumers(o for n in readers for o in n.outputs)
            found = {layer_of(n.name or "", n.metadata_props) for n in readers} - {None}
        # one layer's lookup, or its slice of a computed cos/sin, may serve them all (ONNX Runtime's and torch.onnx's
        # optimizers merge identical subexpressions: a dynamo export of DeepSeek V3 slices cos/sin once, in layer 0)
        if found and readers and all(n.op_type in ("Gather", "Slice") for n in readers):
            reached = consumers(o for n in readers for o in n.outputs)
            found |= {layer_of(n.name or "", n.metadata_props) for n in reached} - {None}
    return tuple(sorted(i for i in found if i is not None)) or None


def _joins(node: ir.Node, site: Any) -> bool:
    """``node`` names no layer and computes with nothing but the site's own cos and sin (and constants)."""
    own = {id(v) for v in site.values[:2] if v is not None}
    return layer_of(node.name or "", node.metadata_props) is None and all(
        v is None or id(v) in own or is_constant(v) for v in node.inputs)  # fmt: skip


def model_layers(model: ir.Model) -> set[int]:
    """Every layer some node of the model (at any depth) names."""
    found = {layer_of(n.name or "", n.metadata_props) for n in ir.traversal.RecursiveGraphIterator(model.graph)}
    return {i for i in found if i is not None}


@dataclass(frozen=True)
class Group:
    """One encoding and the layers that use it; ``label`` names them (``sliding``, ``global``, a spec file's name;
    empty where every layer shares one).
    """  # noqa: D205

    label: str
    spec: Any
    layers: tuple[int, ...]  # () when the source names no layers: every layer

    def words(self, layers: Iterable[int] | None = None) -> str:
        """``sliding layers (0-1, 3-4)``, ``layer 2``, ``every layer``."""
        chosen = tuple(self.layers if layers is None else layers)
        return who(self.label, chosen) if chosen else "every layer"


@dataclass(frozen=True)
class Encodings:
    """What each layer needs (module doc): ``groups`` in layer order, ``unrotated`` layers with none, ``count`` the
    layers the source describes (None: any number, one encoding for all); ``field`` is the input they came from.
    """  # noqa: D205

    source: str
    field: str
    groups: tuple[Group, ...]
    unrotated: tuple[int, ...] = ()
    count: int | None = None
    indexer: Encodings | None = None  # what each layer's indexer rotation needs (``audits.indexer``), if any

    def judging(self, site: Any) -> Encodings:
        """The encodings a site (or its record) is judged against: its layers' indexer's for an indexer site."""
        mine = site.get("indexer") if isinstance(site, dict) else getattr(site, "indexer", False)
        return self.indexer if mine and self.indexer is not None else self

    @property
    def first(self) -> Any:
        """The first group's spec: the model's encoding kind, and what the short calls size their caches by."""
        return self.groups[0].spec

    @property
    def per_layer(self) -> bool:
        """The layers differ: more than one encoding, or layers without one."""
        return len(self.groups) > 1 or bool(self.unrotated)

    def of(self, layer: int) -> Group | None:
        """Layer ``layer``'s group, None for a layer with no positional encoding."""
        if self.count is None or not self.per_layer:
            return self.groups[0]
        if layer >= self.count:
            raise SpecError(self.field, f"{self.source!r} describes {self.count} layers but the model's nodes read a "
                            f"site in layer {layer}: not the description of this model")  # fmt: skip
        return next((g for g in self.groups if layer in g.layers), None)

    def check_count(self, named: set[int]) -> None:
        """A spec file lists no more layers than the model has (``named``: the layers its nodes name; a reader in a
        layer past the list is refused by ``of``). The builder names its final norm as a layer past the last, so the
        model may name one more.
        """  # noqa: D205
        if self.field == "spec_file" and self.count is not None and named and max(named) + 1 < self.count:
            raise SpecError("spec_file", f"{self.source!r} lists {self.count} layers but the model's nodes name "
                            f"layers 0-{max(named)} ({max(named) + 1} layers)")  # fmt: skip

    def to_dict(self) -> dict[str, object]:
        """The encodings as audit.json holds them."""
        out: dict[str, object] = {"source": self.source, "count": self.count, "unrotated": list(self.unrotated),
                                  "groups": [{"label": g.label, "layers": list(g.layers), "spec": g.spec.to_dict(),
                                              "words": describe(g.spec)} for g in self.groups]}  # fmt: skip
        if self.indexer is not None:  # layer -> its indexer's pairs (a layer whose indexer rotates none left out)
            out["indexer"] = {str(i): g.spec.layout for g in self.indexer.groups for i in g.layers}
        return out


def describe(spec: Any) -> str:
    """An encoding in the field's words (``hf.describe``: the one description of an encoding)."""
    from ropeexport.hf import describe as words

    return words(spec)


def _checked(spec: Any, model: ir.Model | None, field: str) -> Any:
    """``spec`` if audit checks its encoding; for a model ropeexport built, over the positions it declares."""
    if spec.encoding not in ("rope", "alibi"):
        raise SpecError(field, f"describes {spec.encoding}; audit checks rotary (RoPE) and ALiBi models (a 2-D "
                        "vision RoPE is audited alone, from a --spec file of encoding vision_rope; graft does not "
                        "write it)")  # fmt: skip
    declared = None if model is None else model.metadata_props.get(DECLARED)
    if declared is None:
        return spec
    if not (declared.isascii() and declared.isdigit() and int(declared) > 0):
        raise SpecError("model", f"its {DECLARED} metadata {declared!r} is not a positive integer")
    return replace(spec, max_positions=int(declared))


def from_config(path: Path, model: ir.Model | None = None) -> Encodings:
    """Each layer's encoding as ``build --hf-config`` imports it (``hf.import_layers``); for a model ropeexport built,
    over the positions it declares (``ropeexport.max_positions``): BLOOM's config says nothing of its length.
    """  # noqa: D205
    from ropeexport.catalog import spec_from_dict
    from ropeexport.hf import import_layers, read_config
    from ropeexport.requests import from_hf_config

    requests = from_hf_config(path)  # one per encoding, in the order of the layers' groups
    layers = import_layers(read_config(path), str(path))
    found = layers.groups()
    sliding = "sliding_attention" in layers.types
    groups = []
    for request, (_, kinds, indices) in zip(requests, found, strict=True):
        label = "" if len(found) == 1 else "/".join(_LABELS.get(k, k) if sliding else k for k in kinds)
        groups.append(Group(label, _checked(spec_from_dict(request.fields), model, "hf_config"), indices))
    count = len(layers.types) if len(layers.types) > 1 else None
    encodings = Encodings(str(path), "hf_config", tuple(groups), layers.unrotated(), count)
    return replace(encodings, indexer=_indexer(path, encodings))


def _indexer(path: Path, encodings: Encodings) -> Encodings | None:
    """What each layer's indexer rotation needs (DeepSeek Sparse Attention, ``audits.indexer``): its layer's encoding
    in the indexer's pairs (``index_layout``, as the architecture reads the config: ``decoder.build.resolve``); a
    layer whose indexer rotates nothing (a NoPE layer, a shared layer, a layer without an indexer) among
    ``unrotated``. None for a config without ``index_topk`` (nor its text model), or one ropeexport does not build.
    """  # noqa: D205
    from ropeexport.decoder.build import resolve
    from ropeexport.decoder.request import DecoderRequest
    from ropeexport.hf import read_config

    config = read_config(path)
    text = config.get("text_config")
    if "index_topk" not in config and not (isinstance(text, Mapping) and "index_topk" in text):
        return None
    try:
        spec = resolve(DecoderRequest(hf_config=path))[0]
    except Exception:  # noqa: BLE001 - a type ropeexport does not build (as ``features.expected``): the indexer's
        return None  # rotations are then judged by the attention's pairs, and said so (``indexer.worded``)
    layouts = {i: layer.attention.index_layout for i, layer in enumerate(spec.layers)
               if layer.attention.index_topk and not layer.attention.index_shared
               and spec.layer_position_spec(i) is not None}  # fmt: skip
    count = len(spec.layers)
    groups = []
    for group in encodings.groups:
        mine = [i for i in (group.layers or range(count)) if i in layouts]
        for layout in dict.fromkeys(layouts[i] for i in mine):
            chosen = tuple(i for i in mine if layouts[i] == layout)
            groups.append(Group(group.label, replace(group.spec, layout=layout), chosen))
    unrotated = tuple(i for i in range(count) if i not in layouts)
    return Encodings(encodings.source, encodings.field, tuple(groups), unrotated, count) if groups else None


_LABELS = {"sliding_attention": "sliding", "full_attention": "global"}  # the field's words where layers slide


def from_spec_file(path: Path, model: ir.Model | None = None) -> Encodings:
    """Each layer's encoding from a spec file (module doc); bad input names the entry at fault."""
    from ropeexport.catalog import spec_from_dict

    data = _read(path)
    where = f"{str(path)!r}"
    if "layers" not in data and "encodings" not in data:
        spec = _checked(spec_from_dict(data, "spec_file"), model, "spec_file")
        return Encodings(str(path), "spec_file", (Group("", spec, ()),))
    extra = sorted(set(data) - {"layers", "encodings"})
    if extra or "layers" not in data or "encodings" not in data:
        raise SpecError("spec_file", f"{where} must hold layers (one encoding name or null per layer) and "
                        f"encodings (name -> spec fields){f', not {extra[0]!r}' if extra else ''}")  # fmt: skip
    names, encodings = data["layers"], data["encodings"]
    if not isinstance(names, list) or not names:
        raise SpecError("spec_file", f"{where}: layers must be a non-empty list (an encoding name or null per layer)")
    if not isinstance(encodings, Mapping) or not encodings:
        raise SpecError("spec_file", f"{where}: encodings must map names to spec fields")
    for i, name in enumerate(names):
        if name is not None and (not isinstance(name, str) or name not in encodings):
            raise SpecError("spec_file", f"{where}: layers[{i}] is {name!r}, not an encoding of the file (allowed: "
                            f"{', '.join(map(repr, encodings))} or null)")  # fmt: skip
    unused = [n for n in encodings if n not in names]
    if unused:
        raise SpecError("spec_file", f"{where}: encodings.{unused[0]} is used by no layer")
    groups = []
    for name in dict.fromkeys(n for n in names if n is not None):
        try:
            fields = spec_from_dict(encodings[name], f"spec_file encodings.{name}")
        except SpecError as exc:  # a field of one entry: named by its path in the file, not as a flag
            at = exc.field if exc.field.startswith("spec_file") else f"encodings.{name}.{exc.field}"
            raise SpecError("spec_file", f"{where}: {at.removeprefix('spec_file ')}: {exc.message}") from None
        spec = _checked(fields, model, "spec_file")
        groups.append(Group(name, spec, tuple(i for i, n in enumerate(names) if n == name)))
    if not groups:
        raise SpecError("spec_file", f"{where}: every layer is null: there is no positional encoding to audit")
    if len({g.spec.encoding for g in groups}) > 1:
        raise SpecError("spec_file", f"{where}: mixes ALiBi and RoPE encodings; audit checks one kind per model")
    unrotated = tuple(i for i, n in enumerate(names) if n is None)
    return Encodings(str(path), "spec_file", tuple(groups), unrotated, len(names))


def vision_spec(path: Path) -> Any:
    """The ``vision_rope`` spec a spec file holds (one encoding, no layers: ``audits.vision`` audits it), else None."""
    from ropeexport.catalog import spec_from_dict

    data = _read(path)
    return spec_from_dict(data, "spec_file") if data.get("encoding") == "vision_rope" else None


def _read(path: Path) -> Mapping[str, Any]:
    kind = {".toml": "TOML", ".json": "JSON"}.get(path.suffix.lower())
    if kind is None:
        raise SpecError("spec_file", f"{str(path)!r} must end in .json or .toml")
    text = read_text(path, "spec_file")
    if kind == "JSON":
        data = loads_json(text, f"spec_file {str(path)!r}")
    else:
        try:
            data = tomllib.loads(text)
            check_depth(data, f"spec_file {str(path)!r}")
        except tomllib.TOMLDecodeError as exc:
            raise SpecError("spec_file", f"{str(path)!r} is not valid TOML: {exc}") from None
    if not isinstance(data, Mapping):
        raise SpecError("spec_file", f"{str(path)!r} must hold a table of fields")
    return data


def encodings_for(hf_config: str | Path | None, spec_file: str | Path | None, model: ir.Model | None) -> Encodings:
    """The encodings of ``hf_config`` or of ``spec_file`` (exactly one of them given)."""
    if (hf_config is None) == (spec_file is None):
        raise SpecError("hf_config", "give either `hf_config` (the transformers config.json the model came from) or "
                        "`spec_file` (a position spec, per layer where they differ), not both"
                        if hf_config is not None else "give `hf_config` (the transformers config.json the model came "
                        "from) or `spec_file` (a position spec, per layer where they differ)")  # fmt: skip
    if spec_file is not None:
        return from_spec_file(Path(spec_file), model)
    assert hf_config is not None
    return from_config(Path(hf_config), model)
