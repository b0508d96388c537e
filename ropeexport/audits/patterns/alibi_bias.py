"""The ALiBi bias: walking up from each ``Softmax`` through the Adds (and the casts, reshapes and Wheres) that make its
input, an operand computed from the attention mask or position_ids and constants only (never from input_ids or an
activation) is a candidate bias, a site of kind ``ALiBi bias`` (``cos`` names the value; no ``sin``). One bias read by
every layer is one candidate; a candidate another is computed from (the bias inside a bias + mask sum) is dropped.
Whether a candidate is a mask, ALiBi, or neither is for its values to say (``audit.alibi``).
"""  # noqa: D205

from __future__ import annotations

import onnx_ir as ir

from ropeexport.audits.patterns.base import Pattern, Site, SiteKind, Walk, ancestors, name_of

PASS_THROUGH = {"Add", "Cast", "Reshape", "Where", "Squeeze", "Unsqueeze", "Expand", "Identity", "Mul", "Sub"}
POSITIONAL = ("attention_mask", "position_ids")


def find(graph: ir.Graph, walk: Walk) -> list[Site]:
    """Candidate bias values of ``graph`` (module doc), in the order the Softmaxes find them."""
    inputs = {id(v): name_of(v) for v in walk.root.inputs}
    found: dict[int, Site] = {}
    for softmax in (n for n in graph if n.op_type == "Softmax"):
        stack, seen = [softmax.inputs[0]], set()
        while stack:
            value = stack.pop()
            node = value.producer() if value is not None else None
            if node is None or id(node) in seen or node.op_type not in PASS_THROUGH:
                continue
            seen.add(id(node))
            for operand in node.inputs:
                if operand is None or operand.const_value is not None:
                    continue
                reads = {inputs[i] for i in ancestors([operand]) if i in inputs}
                if reads and all(name.endswith(POSITIONAL) for name in reads):
                    if id(operand) not in found:
                        found[id(operand)] = Site(SiteKind.ALIBI, name_of(operand), "", table=False,
                                                  inputs=sorted(reads), order=(0, len(found)),
                                                  values=(operand, None, None))  # fmt: skip
                    found[id(operand)].users.append(softmax.name or "Softmax")
                else:
                    stack.append(operand)
    # keep the outermost: a candidate another is computed from (the bias inside a bias + mask sum) is dropped
    inner = {i for key, s in found.items() for i in ancestors([s.values[0]]) - {key}}
    return [s for key, s in found.items()
            if key not in inner or (s.values[0] is not None and s.values[0].producer() is None)]  # fmt: skip


PATTERN = Pattern("alibi_bias", "alibi", (SiteKind.ALIBI,), find)
