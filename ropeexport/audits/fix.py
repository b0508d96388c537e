"""Sites repaired per layer: each reader of a wrong site gets the exact values of its own layer's encoding (what
``graft`` writes, and what ``effect`` weighs a finding with).

A reader's need is its layer's group (``audits.layers.Encodings.of``), an identity rotation (cos 1, sin 0) for a layer
with no positional encoding, or, where the site's readers name no layer, the group the audit compared it with
(``checked_as``). A constant table (``tables``) whose readers all need what is repaired is replaced in place; one
whose readers need different encodings (the sliding layers reading the global layers' table, or one table every
layer reads where the config gives two) is split: each repaired need gets its own copy, its readers rewired to it, and
a table no node reads any more is dropped. Computed cos/sin (``rows``) get the rope family's rows per need, the
readers of each need rewired to theirs; where a use of computed values is reached through a node other rotations
read through too (``audits.uses``: ``shared``), the rotations of every use of those values are rebuilt as the
config's (``rerotate``). ALiBi slopes: ``alibi.graft_slopes``.
"""  # noqa: D205

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from ropeexport.audits.layers import Encodings, Group, layer_of
from ropeexport.audits.observe import CallRefused, Evaluator, NotEvaluated
from ropeexport.audits.patterns import Site, SiteKind
from ropeexport.audits.rows import prune, replace_computed
from ropeexport.audits.sites import find_value, scope_graphs
from ropeexport.audits.tables import replace_tables, tables_of
from ropeexport.errors import SpecError

# Findings a graft cannot repair by replacing values: what it would have to do instead.
UNREPAIRABLE = {
    "not-rotated": "graft replaces rotary values, it adds no rotation",
    "rope-condition-inverted": "graft replaces rotary values, it adds no rotation",
    "partial-rotary-ignored": "graft replaces rotary values, it does not change how many channels a node rotates",
    "proportional-without-zero-tail": "graft replaces rotary values, it does not change how many channels a node "
    "rotates or how it pairs them",
    "layers-unknown": "which encoding the site's layers need cannot be told from the model",
    "window": "graft replaces rotary values, it does not change an attention's window",
    "query-scale-unread": "no table of the query's factor was read: there are no values to put right",
    "learned-query-scale-unread": "a learned per-head factor is the checkpoint's weights: graft has no values of "
                                  "the config to put there",
    "learned-query-scale": "graft puts the config's values right; a learned per-head factor's scale, bias and log "
                           "are the checkpoint's weights and the graph's computation, which it does not rewrite "
                           "(re-export from the checkpoint)",
    "mrope-positions-1d": "graft replaces rotary values, it does not give a model the position axes (height, width) "
                          "its position_ids input does not take",
    "chunk": "graft replaces rotary values, it does not change an attention's chunks",
    "rope-slice": "graft replaces rotary values, it does not change which channels a node rotates",
    "rope-slice-unread": "which channels a rotation turns was not read: graft replaces rotary values, it does not "
                         "change which channels a node rotates, and cannot tell whether they are right",
    "attention-scale": "graft replaces rotary values, it does not change an attention operator's scale",
    "chunk-unread": "the chunks were not read: graft cannot tell whether they are right",
    "attention-scale-unread": "the attention's scale was not read: graft cannot tell whether it is right",
}

# M-RoPE pairs that pick their axis after the tables one axis gathers (``axes.picked``): graft writes table values
PICKED_AFTER = ("each pair picks its position axis after the tables, where graft writes nothing (it replaces the "
                "tables' values, not the picks)")
# An operator that picks each pair's axis itself (com.microsoft MRotaryEmbedding): graft sets its attributes
OPERATOR_AXES = SiteKind.MROTARY_MICROSOFT.value
AXES_FINDINGS = ("mrope-sections-swapped", "mrope-interleaving", "mrope-one-axis", "mrope-axes")
Need = Group | None  # a group's encoding, or None: no rotation (a layer without RoPE)


def need_of(record: dict[str, Any], node: ir.Node | Any, encodings: Encodings) -> Need:
    """What ``node``, a reader of the site ``record`` (None: any of them), needs (module doc); an indexer's rotation,
    its layer's indexer's (``Encodings.judging``).
    """  # noqa: D205
    encodings = encodings.judging(record)
    if record.get("layers") is None or not encodings.per_layer or node is None:
        label = (record.get("checked_as") or [encodings.groups[0].label])[0]
        return next((g for g in encodings.groups if g.label == label), encodings.groups[0])
    props = node.metadata_props if isinstance(node, ir.Node) else {p.key: p.value for p in node.metadata_props}
    layer = layer_of(node.name or "", props)
    if layer is None:  # a reader naming no layer beside others that do: the site's first layer's need
        layer = record["layers"][0]
    return encodings.of(layer)


def _key(need: Need) -> str:
    return "none" if need is None else need.label or "all"


def _readers(chain: list[ir.Graph], record: dict[str, Any], values: tuple[ir.Value, ir.Value]) -> list[ir.Node]:
    """The nodes named as the site's readers that read ``values`` (any graph from the site's down)."""
    names, found = set(record["users"]), {}
    for node in ir.traversal.RecursiveGraphIterator(chain[0]):
        if (node.name or node.op_type) in names and any(v is values[0] or v is values[1] for v in node.inputs):
            found[id(node)] = node
    return list(found.values())


def repair(model: ir.Model, source: Path, records: list[dict[str, Any]], encodings: Encodings,
           fixing: list[int], names: set[str] | None = None) -> tuple[ir.Model, list[dict[str, Any]]]:  # fmt: skip
    """``model`` with the sites ``records[i]`` for i in ``fixing`` repaired (module doc): the model, and what was
    replaced. ``records`` holds every site of the audit: the needs of a table's other readers decide whether it is
    replaced in place or split. ``names``: the findings repaired (None: every one); a rotation pairing its channels
    otherwise is rebuilt only when ``pairing`` is among them (its values alone are put right otherwise).
    """  # noqa: D205
    from ropeexport.audits.checks import PAIRING

    replaced: list[dict[str, Any]] = []
    tables: dict[tuple[Any, ...], dict[str, Any]] = {}
    computed: list[dict[str, Any]] = []
    rebuilt: list[dict[str, Any]] = []  # rotations that pair their channels otherwise (``rerotate``)
    shared = {frozenset((r["cos"], r["sin"])) for i, r in enumerate(records)
              if i in fixing and not r["table"] and r.get("shared")}  # fmt: skip
    for index, record in enumerate(records):
        fixed = index in fixing
        if fixed and any(f["name"] == "unidentified-site" for f in record["findings"]):
            continue  # nothing known to repair it with
        paired = any(f["name"] == "pairing" for f in record["findings"]) and (names is None or "pairing" in names)
        if fixed and paired and SiteKind(record["kind"]) not in PAIRING:  # a decomposed rotation's own slicing
            rebuilt.append(record)
            continue
        if fixed and not record["table"] and frozenset((record["cos"], record["sin"])) in shared:
            # a use of computed values its rotations reach through a node other rotations read through too (Qwen3.5's
            # recomposition of its position axes): no value of its own to rewire, so its rotations are rebuilt, and
            # so are those of the other uses of the same values (rewiring them would rewire the shared nodes only in
            # part: a recomposition reads each position axis through its own node)
            rebuilt.append(record)
            continue
        chain = scope_graphs(model, Site.from_dict(record).scope)
        if SiteKind(record["kind"]) is SiteKind.ALIBI:
            if fixed:
                from ropeexport.audits.alibi import graft_slopes

                replaced.append(graft_slopes(chain, record, encodings.first))
            continue
        if not record["table"]:
            if fixed:
                computed.append(record)
            continue
        cos, sin = find_value(chain, record["cos"]), find_value(chain, record["sin"])
        assert cos is not None and sin is not None, record  # the audit found them in this very file
        sign = int(record.get("sign", 1))  # a table its rotations read turned the other way is another use of it
        entry = tables.setdefault((id(cos), id(sin), sign), {"cos": cos, "sin": sin, "site": record, "parts": {}})
        repair_pairs = fixed and paired
        axed = fixed and record["kind"] == OPERATOR_AXES and any(
            f["name"] in AXES_FINDINGS and (names is None or f["name"] in names) for f in record["findings"])
        for node in _readers(chain, record, (cos, sin)):
            need = need_of(record, node, encodings)
            if repair_pairs and need is not None:
                replaced.append(_pair(node, need.spec.layout == "interleaved"))
            if axed and need is not None:
                replaced.append(_axes(node, need.spec))
            part = entry["parts"].setdefault(_key(need), {"need": need, "nodes": [], "fix": False, "site": record})
            part["nodes"].append(node)
            part["fix"] |= fixed
    switched: set[int] = set()
    # a table read in another place by another site (the sin table as one layer's cos: ``audits.uses``) is never
    # replaced in place: the repaired readers get their own copy
    held: dict[int, int] = {}
    for entry in tables.values():
        for value in (entry["cos"], entry["sin"]):
            held[id(value)] = held.get(id(value), 0) + 1
    for entry in tables.values():
        parts = list(entry["parts"].values())
        apart = held[id(entry["cos"])] > 1 or held[id(entry["sin"])] > 1 or entry["site"].get("only")
        if len(parts) == 1 and parts[0]["fix"] and not apart:
            replaced += _replace(parts[0], entry["cos"], entry["sin"], switched)
            continue
        for part in (p for p in parts if p["fix"]):
            cos, sin = _copy(entry["cos"], part), _copy(entry["sin"], part)
            for node in part["nodes"]:
                for i, value in enumerate(node.inputs):
                    if value is entry["cos"] or value is entry["sin"]:
                        node.replace_input_with(i, cos if value is entry["cos"] else sin)
            replaced += [r | {"split_for": _key(part["need"])} for r in _replace(part, cos, sin, switched)]
        for value in (entry["cos"], entry["sin"]):
            if not value.uses() and value.graph is not None and value.name in value.graph.initializers:
                value.graph.initializers.pop(value.name)
    if rebuilt:
        model, more = _rebuilt(model, source, rebuilt, encodings)
        replaced += more
    if computed:
        model, more = _computed(model, source, computed, encodings)
        replaced += more
    return model, replaced


def _rebuilt(model: ir.Model, source: Path, records: list[dict[str, Any]],
             encodings: Encodings) -> tuple[ir.Model, list[dict[str, Any]]]:  # fmt: skip
    """The rotations of ``records`` (use-read sites pairing otherwise than their layers' config) rebuilt as the
    config's, with exact values (``rerotate``).
    """  # noqa: D205
    from ropeexport.audits.rerotate import rebuild, rotations_of

    found = [rotations_of(model, record) for record in records]
    proto = ir.serde.serialize_model(model)
    replaced = []
    for k, (record, rotations) in enumerate(zip(records, found, strict=True)):
        judged = encodings.judging(record)  # an indexer's rotation: its layer's indexer's pairs
        need = need_of(record, None, judged) if not record.get("layers") or not judged.per_layer else (
            judged.of(record["layers"][0]))  # fmt: skip
        if need is None:
            raise SpecError("model", f"the rotations reading {record['cos']!r} are layers with no RoPE in the config: "
                            "graft does not rebuild them")  # fmt: skip
        replaced.append(rebuild(proto, record, rotations, need.spec, f"rotation{k}/"))
    prune(proto.graph)
    repaired = ir.serde.deserialize_model(proto)
    ir.external_data.set_base_dir(repaired.graph, source.resolve().parent)
    return repaired, replaced


def _axes(node: ir.Node, spec: Any) -> dict[str, Any]:
    """``node`` (an MRotaryEmbedding) set to pick each pair's axis as ``spec`` says: its ``mrope_section`` and
    ``mrope_layout`` (0: contiguous sections, 1: interleaved by frequency index), what was replaced.
    """  # noqa: D205
    section, layout = [int(n) for n in spec.mrope_section], int(bool(spec.mrope_interleaved))
    node.attributes["mrope_section"] = ir.AttrInt64s("mrope_section", section)
    node.attributes["mrope_layout"] = ir.AttrInt64("mrope_layout", layout)
    return {"node": node.name, "replaced_by": f"mrope_section={section}, mrope_layout={layout} (the config's axes)"}


def _pair(node: ir.Node, interleaved: bool) -> dict[str, Any]:
    """``node`` (a fused reader: ``checks.PAIRING``) made to pair channels as its layer's encoding does."""
    name = "rotary_interleaved" if node.op_type == "GroupQueryAttention" else "interleaved"
    node.attributes[name] = ir.AttrInt64(name, int(interleaved))
    return {"node": node.name, "replaced_by": f"{name}={int(interleaved)} (the config's pairing)"}


def _replace(part: dict[str, Any], cos: ir.Value, sin: ir.Value, switched: set[int]) -> list[dict[str, Any]]:
    """The table pair (``cos``, ``sin``) given what ``part``'s readers need; a sin its rotations apply negated
    (``Site.sign``) stored negated, so that they apply the exact one.
    """  # noqa: D205
    site, need = dict(part["site"]) | {"cos": cos.name, "sin": sin.name}, part["need"]
    if need is not None:
        done = replace_tables(site, cos, sin, need.spec, switched)
        if site.get("sign", 1) == -1:
            for tensor, setter in tables_of(sin):
                setter(ir.tensor(-tensor.numpy(), name=tensor.name))
            done = [d | {"sign": "stored negated: its rotations turn the other way"} for d in done]
        return done
    for value, fill in ((cos, 1.0), (sin, 0.0)):
        for tensor, setter in tables_of(value):
            array = tensor.numpy()
            setter(ir.tensor(np.full(array.shape, fill, array.dtype), name=tensor.name))
    return [{"cos": cos.name, "sin": sin.name, "rows": None, "regime_length": None, "dtype": None,
             "replaced_by": "an identity rotation (cos 1, sin 0): the layers have no RoPE"}]  # fmt: skip


def _copy(value: ir.Value, part: dict[str, Any]) -> ir.Value:
    """A new initializer holding ``value``'s table (an initializer or a Constant's), in the graph ``value`` is in."""
    found = tables_of(value)
    if len(found) != 1:
        raise SpecError("model", f"the table {value.name!r} is chosen by an If and read by layers that need different "
                        "encodings: graft cannot split it")  # fmt: skip
    producer = value.producer()
    graph = value.graph if value.graph is not None else (producer.graph if producer is not None else None)
    assert graph is not None, "a table lives in a graph"
    name, taken = f"{value.name}__{_key(part['need'])}", set(graph.initializers)
    while name in taken:
        name += "_"
    copy = ir.Value(name=name, shape=value.shape, type=value.type,
                    const_value=ir.tensor(found[0][0].numpy().copy(), name=name))  # fmt: skip
    graph.register_initializer(copy)
    return copy


def _computed(model: ir.Model, source: Path, records: list[dict[str, Any]],
              encodings: Encodings) -> tuple[ir.Model, list[dict[str, Any]]]:  # fmt: skip
    """Computed sites replaced by the rope family's rows, per need of their readers (module doc)."""
    # The weights stay where they lie: serialized as references to the source's external data (no bytes), and given
    # their folder again after the round trip.
    proto = ir.serde.serialize_model(model)
    evaluator, replaced = Evaluator(source), []
    by_name = {n.name: n for n in proto.graph.node}
    for k, record in enumerate(records):
        parts: dict[str, tuple[Need, set[str]]] = {}
        judged = encodings.judging(record)
        needs = [judged.of(i) for i in record["layers"]] if record.get("layers") and judged.per_layer else []
        if len({_key(n) for n in needs}) > 1:  # its readers need different encodings: each rewired to its own
            for name in record["users"]:
                node = by_name.get(name)
                if node is not None:
                    need = need_of(record, node, encodings)
                    parts.setdefault(_key(need), (need, set()))[1].add(name)
        else:
            need = needs[0] if needs else need_of(record, None, encodings)
            parts[_key(need)] = (need, set())
        for tag, (need, names) in parts.items():
            if need is None:
                raise SpecError("model", f"the computed site reading {record['cos']!r} is read by layers with no RoPE "
                                "in the config: graft makes no identity rotation of computed cos/sin")  # fmt: skip
            only = None if len(parts) == 1 else names
            if record.get("only"):  # its values are read by other sites' rotations too: its readers alone rewired
                only = set(record["users"]) if only is None else only & set(record["users"])
            try:
                done = replace_computed(proto, record, need.spec, evaluator, f"{k}/{tag}/", only)
            except (CallRefused, NotEvaluated) as exc:
                raise SpecError("model", f"the computed site reading {record['cos']!r} cannot be evaluated to be "
                                f"replaced ({exc})") from None  # fmt: skip
            replaced.append(done | ({} if only is None else {"split_for": tag}))
    prune(proto.graph)
    repaired = ir.serde.deserialize_model(proto)
    ir.external_data.set_base_dir(repaired.graph, source.resolve().parent)
    return repaired, replaced
