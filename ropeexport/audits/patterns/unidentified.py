"""The rest: a ``Cos`` or ``Sin`` no other pattern claimed is a site of kind ``unidentified``, reported (a finding),
never skipped.
"""  # noqa: D205

from __future__ import annotations

import onnx_ir as ir

from ropeexport.audits.patterns.base import Pattern, Site, SiteKind, Walk, model_inputs, name_of


def find(graph: ir.Graph, walk: Walk) -> list[Site]:
    """Every unclaimed Cos (reported by its cos) and Sin (by its sin) of ``graph``; Sins after every Cos."""
    out: list[Site] = []
    for index, node in enumerate(graph):
        value = node.outputs[0] if node.op_type in ("Cos", "Sin") else None
        if value is None or id(value) in walk.covered:
            continue
        walk.covered.add(id(value))
        cos = node.op_type == "Cos"
        pair = (value, None) if cos else (None, value)
        out.append(Site(SiteKind.UNIDENTIFIED, name_of(value) if cos else "", "" if cos else name_of(value),
                        users=[node.name or node.op_type], table=False, inputs=model_inputs(walk.root, [value]),
                        order=(2 if cos else 3, index), values=(*pair, None)))  # fmt: skip
    return out


PATTERN = Pattern("unidentified", "rope", (SiteKind.UNIDENTIFIED,), find)
