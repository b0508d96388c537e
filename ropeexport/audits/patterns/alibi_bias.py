"""The ALiBi bias: walking up from where attention takes its scores' additive terms through the Adds (and the casts,
reshapes and Wheres) that make them, a value computed from the attention mask or position_ids and constants only
(never from input_ids or an activation) is a candidate bias, a site of kind ``ALiBi bias`` (``cos`` names the value;
no ``sin``). An input read only through ``Shape`` is read for its length, not its values: a bias whose positions are
Ranges over the lengths of input_ids and of the cache alone (mobius-onnx's BLOOM, which takes no mask and no
position_ids) is computed from positions too, unless the graph types it as other than float (a shape vector made
from those lengths, as Reshape and Expand take, is not a bias); a value that also reads an input by value is judged as
before, every input it reads a position input. The anchors: each ``Softmax``'s input (attention written out), the
float mask of an opset-23 ``Attention`` (input 3) and the ``attention_bias`` of a com.microsoft
``GroupQueryAttention`` (input 10): fused attention adds them to q.k itself (ropeexport's fused, tensorrt and gqa
decoders carry BLOOM's bias there). One bias read by every layer is one candidate; a candidate another is computed
from (the bias inside a bias + mask sum) is dropped. Whether a candidate is a mask, ALiBi, or neither is for its
values to say (``audit.alibi``).
"""  # noqa: D205

from __future__ import annotations

import onnx_ir as ir

from ropeexport.audits.patterns.base import MICROSOFT, Pattern, Site, SiteKind, Walk, ancestors, name_of, subgraphs

PASS_THROUGH = {"Add", "Cast", "Reshape", "Where", "Squeeze", "Unsqueeze", "Expand", "Identity", "Mul", "Sub"}
POSITIONAL = ("attention_mask", "position_ids")
FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE)
# (domain, op_type) -> the input index of the additive term a fused attention adds to q.k (module doc)
FUSED = {("", "Attention"): 3, (MICROSOFT, "GroupQueryAttention"): 10}


def _anchor(node: ir.Node) -> ir.Value | None:
    """The value ``node`` adds to its attention scores: a Softmax's input, a fused attention's float bias / mask."""
    if node.op_type == "Softmax":
        return node.inputs[0] if node.inputs else None
    index = FUSED.get(("" if node.domain == "ai.onnx" else node.domain, node.op_type))
    value = node.inputs[index] if index is not None and len(node.inputs) > index else None
    return None if value is None or value.dtype == ir.DataType.BOOL else value  # a boolean mask is never a bias


def _reads(value: ir.Value, inputs: dict[int, str]) -> tuple[set[str], set[str]]:
    """The model inputs ``value`` is computed from: (those whose values it reads, those it reads only the length of,
    through a ``Shape``). A node holding subgraphs counts every input it reaches as read by value.
    """  # noqa: D205
    by_value: set[str] = set()
    by_length: set[str] = set()
    stack: list[ir.Value | None] = [value]
    seen: set[int] = set()
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if id(current) in inputs:
            by_value.add(inputs[id(current)])
            continue
        node = current.producer()
        if node is None:
            continue
        if node.op_type == "Shape" and node.inputs and id(node.inputs[0]) in inputs:
            by_length.add(inputs[id(node.inputs[0])])
            continue
        if any(True for _ in subgraphs(node)):
            by_value |= {inputs[i] for i in ancestors([current]) if i in inputs}
            continue
        stack.extend(node.inputs)
    return by_value, by_length


def find(graph: ir.Graph, walk: Walk) -> list[Site]:
    """Candidate bias values of ``graph`` (module doc), in the order the anchors find them."""
    inputs = {id(v): name_of(v) for v in walk.root.inputs}
    found: dict[int, Site] = {}

    def positional(value: ir.Value) -> list[str] | None:
        by_value, by_length = _reads(value, inputs)
        if by_value:  # read by value: every input it reads, lengths included, must be a position input
            reads = by_value | by_length
            return sorted(reads) if all(name.endswith(POSITIONAL) for name in reads) else None
        if value.dtype is not None and value.dtype not in FLOATS:  # from lengths alone, a value typed as anything
            return None  # but float is no bias (an int64 shape vector being made for a Reshape or Expand)
        return sorted(by_length) or None  # positions from lengths alone (module doc)

    for user in graph:
        start = _anchor(user)
        if start is None:
            continue
        stack, seen = [start], set()
        while stack:
            value = stack.pop()
            reads = positional(value) if value.const_value is None else None
            if reads is not None:  # the anchor itself (a fused attention's bias), or an operand of the sums making it
                if id(value) not in found:
                    found[id(value)] = Site(SiteKind.ALIBI, name_of(value), "", table=False, inputs=reads,
                                            order=(0, len(found)), values=(value, None, None))  # fmt: skip
                found[id(value)].users.append(user.name or user.op_type)
                continue
            node = value.producer()
            if node is None or id(node) in seen or node.op_type not in PASS_THROUGH:
                continue
            seen.add(id(node))
            stack.extend(o for o in node.inputs if o is not None and o.const_value is None)
    # keep the outermost: a candidate another is computed from (the bias inside a bias + mask sum) is dropped
    inner = {i for key, s in found.items() for i in ancestors([s.values[0]]) - {key}}
    return [s for key, s in found.items()
            if key not in inner or (s.values[0] is not None and s.values[0].producer() is None)]  # fmt: skip


PATTERN = Pattern("alibi_bias", "alibi", (SiteKind.ALIBI,), find)
