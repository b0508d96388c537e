"""Computed cos/sin: a ``Cos`` and a ``Sin`` of the same angles, followed forward through nodes that only reshape,
cast or scale them by a constant, to the value a rotation multiplies a tensor with (the decomposed rotate-half or
interleaved form: the TorchScript and dynamo exports of transformers models).
"""  # noqa: D205

from __future__ import annotations

import onnx_ir as ir

from ropeexport.audits.patterns.base import Pattern, Site, SiteKind, Walk, index_of, is_constant, model_inputs, name_of

# Nodes a computed cos/sin passes through on its way to the rotation: one data input, the rest constants or shapes.
CARRIERS = {"Mul", "Div", "Cast", "Unsqueeze", "Squeeze", "Reshape", "Expand", "Identity", "Transpose", "CastLike"}


def forward(value: ir.Value) -> ir.Value:
    """``value`` followed through carrier nodes (scaled by constants, cast, reshaped) to what a rotation reads."""
    while True:
        consumers = [use.node for use in value.uses()]
        if not consumers:
            return value
        first = consumers[0]
        if first.op_type not in CARRIERS or any(c.op_type != first.op_type for c in consumers):
            return value
        position = next(i for i, v in enumerate(first.inputs) if v is value)
        if not all(is_constant(v) for i, v in enumerate(first.inputs) if i != position):
            return value  # a Mul with a tensor: the rotation itself
        value = first.outputs[0]


def find(graph: ir.Graph, walk: Walk) -> list[Site]:
    """Its sites in ``graph`` (module doc): each unclaimed Cos paired with an unclaimed Sin of the same input."""
    free = [n for n in graph if n.op_type in ("Cos", "Sin") and id(n.outputs[0]) not in walk.covered]
    sines: dict[int, list[ir.Node]] = {}
    for node in free:
        if node.op_type == "Sin":
            sines.setdefault(id(node.inputs[0]), []).append(node)
    order = index_of(graph)
    out: list[Site] = []
    for cos_node in (n for n in free if n.op_type == "Cos"):
        waiting = sines.get(id(cos_node.inputs[0]))
        if not waiting:
            continue  # a Cos with no Sin: ``unidentified``
        sin_node = waiting.pop(0)
        walk.covered |= {id(cos_node.outputs[0]), id(sin_node.outputs[0])}
        cos, sin = forward(cos_node.outputs[0]), forward(sin_node.outputs[0])
        users = sorted({use.node.name or use.node.op_type for v in (cos, sin) for use in v.uses()})
        out.append(Site(SiteKind.COMPUTED, name_of(cos), name_of(sin), users=users, table=False,
                        inputs=model_inputs(walk.root, [cos, sin]), order=(2, order[id(cos_node)]),
                        values=(cos, sin, None)))  # fmt: skip
    return out


PATTERN = Pattern("computed", "rope", (SiteKind.COMPUTED,), find)
