"""Where a foreign ONNX model applies its position encoding: the sites every pattern finds (``audit.patterns``), in the
main graph and inside every If branch and Loop / Scan body, at any depth.

A site is one (cos, sin) pair of values and the nodes that rotate with it (one pair usually serves every layer); for
ALiBi, one bias. The walk: the main graph first, then each subgraph depth first (nodes in order, attributes in order);
every pattern of the encoding runs on each graph in the list's order, claiming values as it goes, so the inside of an
If whose outputs are a site (the builder's LongRoPE caches, ropeexport's dynamic NTK) is no site of its own. Values
read from two graphs (an outer table read by a RotaryEmbedding inside a branch too) are one site with every reader.

A model's local functions are read inlined (``audits.model.load_model``, ``audits.functions``): a site inside one is
found as any other, and says which (``Site.functions``).

A site's scope is the deepest graph its values are computed in (``Site.scope``: the path of subgraphs; ``where``
says it in words). Values computed from a Loop or Scan body's own inputs (its iteration count, a carried or scanned
value) change from one iteration to the next and cannot be evaluated outside the loop: the site is ``blocked`` with
the reason, and the audit reports it as a finding, never skips it.
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import onnx_ir as ir

from ropeexport.audits.functions import origins
from ropeexport.audits.indexer import mark
from ropeexport.audits.layers import reader_nodes, site_layers
from ropeexport.audits.patterns import Site, SiteKind, Step, Walk, for_encoding
from ropeexport.audits.patterns.base import ancestors
from ropeexport.audits.unread import unread_rotations, unread_words
from ropeexport.errors import SpecError

__all__ = ["Site", "SiteKind", "find_sites", "find_value", "graphs", "refuse_unread", "scope_graphs"]


def graphs(model: ir.Model) -> Iterator[tuple[tuple[Step, ...], str, ir.Graph]]:
    """(path, the path in words, graph) of the main graph and of every subgraph, depth first."""

    def walk(graph: ir.Graph, steps: tuple[Step, ...], labels: tuple[str, ...]) -> Iterator[Any]:
        yield steps, _words(labels), graph
        for index, node in enumerate(graph):
            for name, attr in node.attributes.items():
                held = [attr.value] if attr.type == ir.AttributeType.GRAPH else []
                held = list(attr.value) if attr.type == ir.AttributeType.GRAPHS else held
                for k, sub in enumerate(held):
                    label = f"{node.op_type} {node.name!r} {name}" + (f"[{k}]" if len(held) > 1 else "")
                    yield from walk(sub, (*steps, (index, name, k)), (*labels, label))

    yield from walk(model.graph, (), ())


def _words(labels: tuple[str, ...]) -> str:
    """A path of subgraphs in words; a deep one shortened to its first two levels and its last (audit.json keeps
    ``scope``, the whole path).
    """  # noqa: D205
    if len(labels) > 4:
        labels = (*labels[:2], f"({len(labels) - 3} more levels)", labels[-1])
    return " > ".join(labels)


def scope_graphs(model: ir.Model, scope: tuple[Step, ...]) -> list[ir.Graph]:
    """The graphs from the main one down to the one ``scope`` names (``Site.scope``), outermost first."""
    chain = [model.graph]
    for index, name, k in scope:
        node = list(chain[-1])[index]
        attr = node.attributes[name]
        chain.append(attr.value if attr.type == ir.AttributeType.GRAPH else list(attr.value)[k])
    return chain


def find_value(chain: list[ir.Graph], name: str) -> ir.Value | None:
    """The value called ``name`` seen from the innermost graph of ``chain``: its own, else the nearest outer one's."""
    for graph in reversed(chain):
        for value in (*graph.inputs, *graph.initializers.values(), *(o for n in graph for o in n.outputs)):
            if value.name == name:
                return value
    return None


def find_sites(model: ir.Model, encoding: str = "rope") -> list[Site]:
    """Every site of ``encoding`` (``rope`` or ``alibi``) in ``model``, main graph first (module doc)."""
    walk = Walk(model.graph)
    found = list(graphs(model))
    where = {id(graph): (steps, words) for steps, words, graph in found}
    # values a Loop / Scan body computes from its own inputs differ per iteration: body input id -> why, in words
    loop_inputs = {id(v): f"input {v.name!r} of the {words}" for steps, words, g in found if steps for v in g.inputs}
    out: list[Site] = []
    seen: dict[tuple[object, ...], Site] = {}
    for _, _, graph in found:
        sites = [site for pattern in for_encoding(encoding) for site in pattern.find(graph, walk)]
        for site in sorted(sites, key=lambda s: s.order):
            key = (site.kind, site.interleaved, *(id(v) for v in site.values))
            if key in seen:  # the same values read from another graph: one site, every reader
                seen[key].users += site.users
                seen[key].readers += site.readers
                continue
            seen[key] = site
            scopes = [where.get(id(v.graph), ((), "")) for v in site.values if v is not None and v.graph is not None]
            site.scope, site.where = max(scopes, key=lambda s: len(s[0]), default=((), ""))
            reads = [loop_inputs[i] for i in ancestors(site.values) if i in loop_inputs]
            site.blocked = None if not reads else f"{sorted(reads)[0]} (it changes from one iteration to the next)"
            out.append(site)
    if encoding == "rope":  # cos and sin as the rotations use them, per layer (``audits.uses``)
        from ropeexport.audits.uses import by_use, roles_of

        out = mark(by_use(model, out))  # the indexer's rotations apart, judged against its own pairs (``indexer``)
        for site in out:
            site.roles = roles_of(site)  # a site split between the attention and the indexer: each its own
    for site in out:
        site.layers = site_layers(site)
        made = [v.producer() for v in site.values if v is not None]
        site.functions = tuple(origins([*reader_nodes(site), *(n for n in made if n is not None)]))
    return out


# Operators that rotate with tables and positions of their own no pattern reads yet: what they do, in words
# (none now: com.microsoft MRotaryEmbedding, onnxruntime-genai 0.18's Qwen-VL export, is read by
# ``patterns.mrotary_microsoft``); what the refusal names, should one appear
OWN_TABLES: dict[str, str] = {}


def refuse_unread(model: ir.Model, sites: list[Site]) -> None:
    """A SpecError naming the first node (at any depth) that rotates in a way no pattern reads: an operator of
    ``OWN_TABLES``, an operator with ``do_rotary`` set that is no site's reader (com.microsoft Attention,
    SparseAttention, PagedAttention: their built-in rotary; GroupQueryAttention's is a site); else the first sum
    x * a + rotate(x) * b written out whose multipliers read no site's value (``audits.unread``: a form no pattern
    reads, named with the node making them). The audit says nothing of a rotation it has not read.
    """  # noqa: D205
    read = {id(node) for site in sites for node in reader_nodes(site)}
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.op_type in OWN_TABLES and id(node) not in read:
            raise SpecError("model", f"{node.domain or 'ai.onnx'} {node.op_type} {node.name!r} rotates by "
                            f"{OWN_TABLES[node.op_type]}, which no pattern of the audit reads yet: no verdict on a "
                            "rotation it has not read")  # fmt: skip
        rotary = node.attributes.get("do_rotary")
        if rotary is None or rotary.type != ir.AttributeType.INT or not rotary.value or id(node) in read:
            continue
        where = node.graph.name if node.graph is not None and node.graph is not model.graph else ""
        inside = f" (in subgraph {where!r})" if where else ""
        raise SpecError("model", f"{node.domain or 'ai.onnx'} {node.op_type} {node.name!r}{inside} rotates with its "
                        f"built-in rotary (do_rotary={rotary.value}), which the audit does not read: no verdict on a "
                        "rotation it has not read")  # fmt: skip
    found = unread_rotations(model, sites)
    if found:
        raise SpecError("model", unread_words(found))
