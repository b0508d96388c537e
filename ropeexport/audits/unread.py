"""Rotations no pattern reads: y = x * a + rotate(x) * b written out in the graph where neither a nor b is computed
from a site's values. The audit refuses such a model naming the place (exit 2) rather than saying "no rotary
position encoding" or judging the sites it did read alone: it says nothing of a rotation it has not read.

A rotation-like sum is an ``Add`` of two ``Mul`` whose data operands are the same tensor x moved, sliced or negated
(``rotations.root``), one of them through a ``Neg`` (rotate(x) negates a half or every other channel); the other
operand of each Mul is its multiplier. Where a multiplier's computation reads no site's value (cos, sin, the tables a
gathered site reads), the sum is unread: the refusal names it and the node its multipliers come from (followed back
through nodes that only reshape, cast, widen or split them).
"""  # noqa: D205

from __future__ import annotations

import onnx_ir as ir

from ropeexport.audits.patterns import Site
from ropeexport.audits.patterns.base import ancestors, is_constant
from ropeexport.audits.rotations import CHANNELS, root

# Nodes a multiplier is followed back through to the node that makes it (the one named)
CARRY_BACK = {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Expand", "Tile", "Identity", "Split", "Slice", "Transpose",
              "CastLike"}  # fmt: skip


def _negated(value: ir.Value, x: ir.Value) -> bool:
    """Whether ``value`` reaches x (its root) through a Neg: rotate(x), not x moved."""
    stack, seen = [value], set()
    while stack:
        current = stack.pop()
        if current is x or id(current) in seen:
            continue
        seen.add(id(current))
        producer = current.producer()
        if producer is None or producer.op_type not in CHANNELS:
            continue
        if producer.op_type == "Neg":
            return True
        stack.extend(v for v in producer.inputs if v is not None and not is_constant(v))
    return False


def _split(mul: ir.Node) -> tuple[ir.Value, ir.Value, ir.Value] | None:
    """(data, its root x, multiplier) of a Mul of a tensor traced back to x and another tensor; None otherwise."""
    if len(mul.inputs) != 2 or any(v is None or is_constant(v) for v in mul.inputs):
        return None
    for k in (0, 1):
        data, other = mul.inputs[k], mul.inputs[1 - k]
        assert data is not None and other is not None
        x = root(data)
        if x is not None and root(other) is not x:
            return data, x, other
    return None


def origin(value: ir.Value) -> ir.Node | None:
    """The node making ``value``, followed back through ``CARRY_BACK`` nodes (their data input)."""
    producer = value.producer()
    while producer is not None and producer.op_type in CARRY_BACK and producer.inputs and producer.inputs[0]:
        before = producer.inputs[0].producer()
        if before is None:
            return producer
        producer = before
    return producer


def unread_rotations(model: ir.Model, sites: list[Site]) -> list[tuple[ir.Node, list[ir.Node]]]:
    """(the Add, the nodes its multipliers come from) of every rotation-like sum whose multipliers read no site's
    value (module doc), at any depth.
    """  # noqa: D205
    read = {id(v) for site in sites for v in site.values if v is not None}
    read |= {id(v) for site in sites for node in site.readers for v in (*node.inputs, *node.outputs) if v is not None}
    out = []
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.op_type != "Add" or len(node.inputs) != 2:
            continue
        muls = [v.producer() if v is not None else None for v in node.inputs]
        if any(m is None or m.op_type != "Mul" for m in muls):
            continue
        parts = [_split(m) for m in muls if m is not None]
        if any(p is None for p in parts):
            continue
        (a, x, ma), (b, x2, mb) = parts  # type: ignore[misc]
        if x is not x2 or _negated(a, x) == _negated(b, x):
            continue  # not x and rotate(x) of one x
        if ancestors([ma, mb]) & read:
            continue  # its multipliers are computed from a site's values: read there
        made = {id(n): n for n in (origin(ma), origin(mb)) if n is not None}
        out.append((node, list(made.values())))
    return out


def unread_words(found: list[tuple[ir.Node, list[ir.Node]]]) -> str:
    """The first unread sum and its multipliers' makers in words (and how many more there are)."""
    add, makers = found[0]
    names = ", ".join(_label(n) for n in makers) or "graph inputs"
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return (f"{_label(add)}{more} sums x times one tensor and rotate(x) times another, made by {names}, which no "
            "audit pattern reads (the forms read: GroupQueryAttention do_rotary, RotaryEmbedding, gathered tables, "
            "a split sincos table, Cos/Sin of positions): no verdict on a rotation it has not read")


def _label(node: ir.Node) -> str:
    """``Add '/h.0/attn/Add'``, or for a node without a name the value it makes (``Add making 'q_turned'``)."""
    return f"{node.op_type} {node.name!r}" if node.name else f"{node.op_type} making {node.outputs[0].name!r}"
