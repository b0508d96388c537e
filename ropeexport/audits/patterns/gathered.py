"""Gathered tables: two ``Gather`` of constant 2-D tables by the same rows, one starting with a nonzero row (cos 0
times the attention factor), one with zeros (sin 0): the TorchScript exports' cos_cached[position_ids], ropeexport's
decomposed form, and what ``graft`` writes in place of a computed site. Where more tables are looked up by the same
rows (ONNX Runtime's optimized graph of a model with two encodings), each cos goes with the sin it makes rotations
with (``_pairs``).

Where an ``If`` returns the two gathers from one branch and computes cos/sin in the other (ropeexport's decomposed
dynamic NTK: the stored base table while L <= original, computed past it), the site is the If's outputs, of kind
``computed cos/sin``, and it claims everything inside the If.
"""  # noqa: D205

from __future__ import annotations

import numpy as np
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
    stored,
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


Lookup = tuple[ir.Node, ir.Value, ir.TensorProtocol]  # a Gather, the table value it reads, the table
PAIRED_ROWS = 512  # the rows c^2 + s^2 is compared over when several tables are looked up by the same rows
ROTATION = 1e-2  # the most c^2 + s^2 may vary over them for a cos and a sin of the same angles (float16's rounding)


def _pairs(gathers: list[Lookup]) -> list[tuple[Lookup, Lookup]]:
    """(cos, sin) lookups among the Gathers of one rows value: a cos table starts with a nonzero row (cos 0 times the
    attention factor), a sin table with zeros. Two: one of each, or none. More (ONNX Runtime's optimizer merges each
    layer's rows into one value, so a model of two encodings looks four tables up by the same rows): each cos with
    the sin whose c^2 + s^2 is the same at every row (the attention factor squared), the pairing one to one, or none.
    """  # noqa: D205
    first = [abs(float(table.numpy()[0].max(initial=0))) > 0 for _, _, table in gathers]
    cosines = [g for g, nonzero in zip(gathers, first, strict=True) if nonzero]
    sines = [g for g, nonzero in zip(gathers, first, strict=True) if not nonzero]
    if len(cosines) != len(sines) or not cosines:
        return []  # not cos and sin tables, one of each
    if len(cosines) == 1:
        return [(cosines[0], sines[0])]
    pairs = []
    for cos in cosines:
        spreads = [_spread(cos, sin) for sin in sines]
        pairs.append((cos, sines[int(np.argmin(spreads))], min(spreads)))
    if len({id(sin[0]) for _, sin, _ in pairs}) != len(pairs) or any(s > ROTATION for _, _, s in pairs):
        return []  # no one-to-one pairing whose rows are rotations
    return [(cos, sin) for cos, sin, _ in pairs]


def _spread(cos: Lookup, sin: Lookup) -> float:
    """max |c^2 + s^2 - (c^2 + s^2 of row 0)| over the first ``PAIRED_ROWS`` rows: 0 for a cos and sin of the same
    angles (to their dtype's rounding), inf for tables of different shapes.
    """  # noqa: D205
    a, b = (np.asarray(t.numpy()[:PAIRED_ROWS], np.float64) for t in (cos[2], sin[2]))
    if a.shape != b.shape:
        return float("inf")
    norm = a * a + b * b
    return float(np.max(np.abs(norm - norm[:1])))


def find(graph: ir.Graph, walk: Walk) -> list[Site]:
    """Its sites in ``graph`` (module doc)."""
    by_rows: dict[int, list[Lookup]] = {}  # (gather, its table value, tensor), by the rows they read
    for node in graph:
        # the table as stored: a widening Cast before the lookup (ONNX Runtime's, ``base.WIDENING``) keeps its values
        data = stored(node.inputs[0]) if node.op_type == "Gather" and node.inputs else None
        if data is None or data.const_value is None or id(node.outputs[0]) in walk.covered:
            continue
        if len(data.const_value.shape) == 2 and attr(node, "axis") == 0:
            by_rows.setdefault(id(node.inputs[1]), []).append((node, data, data.const_value))
    order = index_of(graph)
    out: list[Site] = []
    for (cos, cos_table, _), (sin, sin_table, _) in (pair for group in by_rows.values() for pair in _pairs(group)):
        rows, at = cos.inputs[1], (1, min(order[id(n)] for n in (cos, sin)))
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
