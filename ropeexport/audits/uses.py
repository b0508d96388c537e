"""Sites judged by use: each site's cos and sin are what its rotations multiply x and rotate(x) with, per layer and
per query and key, not what the node making them is called.

The patterns find a site's values by how they are made (a ``Cos`` and a ``Sin`` of the same angles; two gathered
tables, told apart by row 0). The rotations reading them (``rotations.find_rotations``, run in ONNX Runtime) say how
they are used; rotations read alike (the same two values in the same places, the same sign, the same pairing) are one
use. A site's own use (its cos multiplying x, its sin rotate(x), turned the usual way) keeps the site as found; a
site every rotation of which uses it otherwise, one way, is read that way in place (cos and sin exchanged, or its sin
negated: ``Site.sign``), its table form kept so that graft replaces its tables; any other use becomes a site of its
own, of the values as its rotations read them per token (``table`` False), whose readers are the nodes on the way to
those rotations only (``Site.only``: graft rewires them and nothing else; ``Site.shared`` names a node other
rotations read through too, which graft cannot rewire alone). So the dynamo export of Gemma 3 with its global layers'
Cos and Sin exchanged is "cos and sin exchanged" on those layers, and one layer whose products are exchanged is that
layer's finding alone.

Each site says which of its layers' query and key its rotations turn (``Site.roles``; a fused reader's from
``rotations.reader_roles``), and where the rotations read it the site's layers are theirs. ``translations`` then
reads a position offset found at a site: where every layer it names has its query and key both turned by offset
tables of that same offset, the offset is a translation, which cancels in q.k (attention depends on position
differences only): the finding says so, and its effect measured as users run the model (``audits.effect``) shows it.
"""  # noqa: D205

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import onnx_ir as ir

from ropeexport.audits.layers import layer_of
from ropeexport.audits.patterns import Site, SiteKind
from ropeexport.audits.patterns.base import model_inputs, name_of
from ropeexport.audits.rotations import Rotation, find_rotations, reader_roles

__all__ = ["by_use", "name_layers", "roles_of", "translations"]


def _sources(site: Site) -> tuple[ir.Value, ir.Value] | None:
    """The values a site's rotations multiply with, as the pattern reads them (cos, sin): a computed or split site's
    own, a gathered table's two gathered rows; None for a fused operator's site (its inputs say their use) and the
    rest.
    """  # noqa: D205
    if site.kind in (SiteKind.COMPUTED, SiteKind.SPLIT) and site.values[0] is not None and site.values[1] is not None:
        return site.values[0], site.values[1]
    if site.kind is SiteKind.GATHERED and len(site.readers) == 2 and site.table:
        return site.readers[0].outputs[0], site.readers[1].outputs[0]
    return None


def by_use(model: ir.Model, sites: list[Site]) -> list[Site]:
    """``sites`` regrouped by how their rotations use them (module doc); each with its ``roles``."""
    owners: dict[int, tuple[Site, int]] = {}  # id(source value) -> (its site, 0 cos / 1 sin)
    for site in sites:
        found = _sources(site)
        for k, value in enumerate(found or ()):
            owners[id(value)] = (site, k)
    rotations = find_rotations(model, [v for s in sites for v in (_sources(s) or ())]) if owners else []
    groups: dict[tuple[Any, ...], list[Rotation]] = {}
    for rotation in rotations:
        groups.setdefault(rotation.key, []).append(rotation)
    kept: dict[int, list[list[Rotation]]] = {}  # id(site) -> its natural uses
    others: list[list[Rotation]] = []
    for group in groups.values():
        first = group[0]
        (site_a, k_a), (site_b, k_b) = owners[id(first.sources[0])], owners[id(first.sources[1])]
        natural = site_a is site_b and (k_a, k_b) == (0, 1) and first.sign == 1
        (kept.setdefault(id(site_a), []) if natural else others).append(group)
    out: list[Site] = []
    for site in sites:
        uses = sorted(kept.get(id(site), []), key=len, reverse=True)
        mine = [g for g in others if owners[id(g[0].sources[0])][0] is site]
        if not uses and len(mine) == 1 and not _unread(site, mine[0]):
            others.remove(mine[0])
            out.append(_relabel(site, mine[0]))
            continue
        if uses:  # the largest natural use keeps the site; another pairing of it is a use of its own
            site.rotations = uses[0]
            site.interleaved = uses[0][0].pairing == "interleaved"
            others += uses[1:]
            if (mine or uses[1:]) and not site.table:  # its values are read otherwise too: its own readers only
                entries = {id(n): n for r in uses[0] for e in r.entries for n in e}.values()
                site.users, site.only = sorted({n.name or n.op_type for n in entries}), True
        out.append(site)
    taken: dict[int, int] = {}  # id(entry node) -> how many uses read through it
    for group in others:
        for node in {id(n): n for r in group for e in r.entries for n in e}.values():
            taken[id(node)] = taken.get(id(node), 0) + 1
    for site in out:
        for node in {id(n): n for r in site.rotations for e in r.entries for n in e}.values():
            taken[id(node)] = taken.get(id(node), 0) + 1
    out += [_use_site(model, group, owners, taken) for group in others]
    for site in out:
        site.roles = roles_of(site)
        site.unread = _unread(site, site.rotations) if site.rotations and _sources(site) is not None else []
    return out


def _unread(site: Site, group: list[Rotation]) -> list[ir.Node]:
    """The nodes multiplying with the site's values (through carriers) that are no Mul of ``group``'s rotations (nor a
    scaling by a constant): rotations ``find_rotations`` did not read (latent attention's rope slice, the last
    channels of its heads, is one), in graph order.
    """  # noqa: D205
    from ropeexport.audits.rotations import _carried

    sources = _sources(site)
    assert sources is not None
    muls = {id(m) for r in group for m in r.muls}
    found: dict[int, ir.Node] = {}
    for entry in _carried(sources).values():
        for use in entry[3].uses():
            if use.node.op_type == "Mul" and id(use.node) not in muls and not _by_constant(use.node, use.idx):
                found.setdefault(id(use.node), use.node)
    return list(found.values())


def _by_constant(node: ir.Node, index: int) -> bool:
    from ropeexport.audits.patterns.base import is_constant

    return all(is_constant(v) for i, v in enumerate(node.inputs) if i != index)


def _relabel(site: Site, group: list[Rotation]) -> Site:
    """``site`` read as every one of its rotations uses it: cos and sin exchanged, its sin negated (module doc)."""
    first = group[0]
    swapped = first.sources[0] is not _sources(site)[0]  # type: ignore[index]
    if swapped:
        cos, sin, rest = site.values[1], site.values[0], site.values[2:]
        site = replace(site, cos=site.sin, sin=site.cos, values=(cos, sin, *rest),
                       readers=list(site.readers[::-1]))  # fmt: skip
    site.sign, site.rotations = first.sign, group
    site.interleaved = first.pairing == "interleaved"
    return site


def _use_site(model: ir.Model, group: list[Rotation], owners: dict[int, tuple[Site, int]],
              taken: dict[int, int]) -> Site:  # fmt: skip
    """A site of the values ``group``'s rotations read, per token, read by the nodes on the way to them (module doc)."""
    first = group[0]
    owner = owners[id(first.sources[0])][0]
    entries = list({id(n): n for r in group for e in r.entries for n in e}.values())
    shared = next((n for n in entries if taken.get(id(n), 0) > 1), None)
    site = Site(owner.kind, name_of(first.sources[0]), name_of(first.sources[1]),
                users=sorted({n.name or n.op_type for n in entries}), interleaved=first.pairing == "interleaved",
                table=False, inputs=model_inputs(model.graph, first.sources), positions=None, scope=owner.scope,
                where=owner.where, blocked=owner.blocked, order=owner.order, functions=owner.functions,
                sign=first.sign, only=True, shared=None if shared is None else (shared.name or shared.op_type),
                values=(first.sources[0], first.sources[1], None), readers=entries, rotations=group)  # fmt: skip
    return site


def roles_of(site: Site) -> dict[int, tuple[str, ...]]:
    """Per layer, ``q`` / ``k``: what the site's rotations (or fused readers) turn (``rotations.role_of``)."""
    found: dict[int, set[str]] = {}
    if site.rotations:
        for rotation in site.rotations:
            if rotation.layer is not None and rotation.role is not None:
                found.setdefault(rotation.layer, set()).add(rotation.role)
    else:
        for node in site.readers:
            layer = layer_of(node.name or "", node.metadata_props)
            roles = reader_roles(node) if node.op_type in ("RotaryEmbedding", "GroupQueryAttention") else ()
            if layer is not None and roles:
                found.setdefault(layer, set()).update(roles)
    return {layer: tuple(sorted(roles)) for layer, roles in found.items()}


OFFSET = re.compile(r"positions offset by ([+-]\d+)")


def translations(records: list[dict[str, Any]]) -> None:
    """A position-offset finding whose every layer has its query and key both turned by tables of that offset is a
    translation (module doc): its words say so (in place).
    """  # noqa: D205
    offsets: dict[tuple[int, str], set[str]] = {}  # (layer, role) -> the offsets of the sites turning it
    for record in records:
        shift = _shift(record)
        for layer, roles in (record.get("roles") or {}).items():
            for role in roles:
                offsets.setdefault((int(layer), role), set()).add(shift or "0")
    for record in records:
        shift = _shift(record)
        layers = sorted(int(i) for i in (record.get("roles") or {}))
        if shift is None or not layers or record.get("layers") is None:
            continue
        alike = all(offsets.get((i, "q")) == {shift} and offsets.get((i, "k")) == {shift} for i in layers)
        if not alike:
            continue
        for found in record["findings"]:
            if found["name"] == "position-offset" and "translation" not in found["text"]:
                found["text"] += ("; the query and the key alike: a translation, which cancels in q.k (attention "
                                  "reads position differences only)")  # fmt: skip
                found["translation"] = True


# Findings about how a site's layers use it: said with its layers (``name_layers``)
USE = ("cos-sin-exchanged", "sin-negated", "position-offset", "pairing")


def name_layers(records: list[dict[str, Any]]) -> None:
    """A finding of ``USE`` at a site whose readers name their layers says which (``sliding layers (0-1, 3-4): cos
    and sin exchanged``), merged with the same finding at other sites by its template (``core.merge``); in place.
    """  # noqa: D205
    from ropeexport.audits.layers import layer_finding

    for record in records:
        layers = record.get("layers")
        if not layers:
            continue
        labels = [c for c in record.get("checked_as") or [] if c]
        label = labels[0] if len(labels) == 1 else ""
        for k, found in enumerate(record["findings"]):
            if found["name"] in USE and "template" not in found:
                template = "{who}: " + found["text"].replace("{", "{{").replace("}", "}}")
                record["findings"][k] = found | layer_finding(found["name"], template, label, layers)


def _shift(record: dict[str, Any]) -> str | None:
    for found in record.get("findings", []):
        if found["name"] == "position-offset":
            matched = OFFSET.search(found["text"])
            if matched:
                return matched.group(1)
    return None
