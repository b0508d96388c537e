"""Gathered tables: two ``Gather`` of constant 2-D tables by the same rows, one starting with a nonzero row (cos 0
times the attention factor), one with zeros (sin 0): the TorchScript exports' cos_cached[position_ids], ropeexport's
decomposed form, and what ``graft`` writes in place of a computed site.

Where an ``If`` returns the two gathers from one branch and computes cos/sin in the other (ropeexport's decomposed
dynamic NTK: the stored base table while L <= original, computed past it), the site is the If's outputs, of kind
``computed cos/sin``, and it claims everything inside the If.
"""  # noqa: D205

from __future__ import annotations

import onnx_ir as ir

from ropeexport.audits.patterns.base import (
    Pattern,
    Site,
    SiteKind,
    Walk,
    ancestors,
    attr,
    index_of,
    model_inputs,
    name_of,
)


def _chosen_by_if(graph: ir.Graph, cos: ir.Value, sin: ir.Value) -> tuple[ir.Value, ir.Value] | None:
    """The outputs of an If of ``graph`` one of whose branches returns ``cos`` and ``sin`` (through Identity)."""
    for node in graph:
        if node.op_type != "If":
            continue
        for name in ("then_branch", "else_branch"):
            sources = []
            for output in node.attributes[name].value.outputs:
                producer = output.producer()
                sources.append(
                    producer.inputs[0] if producer is not None and producer.op_type == "Identity" else output
                )
            if cos in sources and sin in sources:
                return node.outputs[sources.index(cos)], node.outputs[sources.index(sin)]
    return None


def find(graph: ir.Graph, walk: Walk) -> list[Site]:
    """Its sites in ``graph`` (module doc)."""
    by_rows: dict[int, list[tuple[ir.Node, ir.Value, ir.TensorProtocol]]] = {}  # (gather, its table value, tensor)
    for node in graph:
        data = node.inputs[0] if node.op_type == "Gather" and node.inputs else None
        if data is None or data.const_value is None or id(node.outputs[0]) in walk.covered:
            continue
        if len(data.const_value.shape) == 2 and attr(node, "axis") == 0:
            by_rows.setdefault(id(node.inputs[1]), []).append((node, data, data.const_value))
    order = index_of(graph)
    out: list[Site] = []
    for gathers in by_rows.values():
        if len(gathers) != 2:
            continue
        first = [abs(float(table.numpy()[0].max(initial=0))) for _, _, table in gathers]
        if (first[0] == 0) == (first[1] == 0):
            continue  # not one cos and one sin
        (cos, cos_table, _), (sin, sin_table, _) = gathers if first[0] else gathers[::-1]
        rows, at = cos.inputs[1], (1, min(order[id(n)] for n, _, _ in gathers))
        chosen = _chosen_by_if(graph, cos.outputs[0], sin.outputs[0])
        if chosen is not None:  # the table is one branch of an If (dynamic NTK's default): the If's outputs rule
            walk.covered |= ancestors(chosen)
            out.append(Site(SiteKind.COMPUTED, name_of(chosen[0]), name_of(chosen[1]),
                            users=[n.name or "" for n in (cos, sin)], table=False,
                            inputs=model_inputs(walk.root, chosen), order=at, values=(*chosen, None)))  # fmt: skip
            continue
        assert rows is not None, "a Gather reads its rows"  # ONNX requires both inputs (the checker refuses one)
        out.append(Site(SiteKind.GATHERED, name_of(cos_table), name_of(sin_table),
                        users=[n.name or "Gather" for n in (cos, sin)], table=True,
                        inputs=model_inputs(walk.root, [rows]), positions=name_of(rows), order=at,
                        values=(cos_table, sin_table, rows), readers=[cos, sin]))  # fmt: skip
    return out


PATTERN = Pattern("gathered", "rope", (SiteKind.GATHERED, SiteKind.COMPUTED), find)
