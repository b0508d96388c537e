"""Where a foreign ONNX model applies its rotary position encoding: the cos/sin values every rotation reads.

A site is one (cos, sin) pair of values and the nodes that rotate with it (one pair usually serves every layer).
Anchored on the small stable core every exporter shares, not on one exporter's node sequence:
- ``GroupQueryAttention`` (com.microsoft) with ``do_rotary=1``: its cos_cache / sin_cache inputs (7, 8), tables
  [max_positions, rotary_dim / 2] indexed by position (onnxruntime-genai's builder; an ``If`` may pick between
  two, as its LongRoPE models do);
- ``RotaryEmbedding`` (com.microsoft): inputs 2 and 3, tables indexed by position_ids (Optimum, the ORT
  transformers optimizer);
- ``RotaryEmbedding`` (opset 23): inputs 1 and 2, tables when position_ids (input 3) is given, else the cos/sin of
  each token [b, s, rotary_dim / 2] (torch.onnx.export of transformers models, ropeexport's own);
- gathered: two ``Gather`` of constant 2-D tables by the same rows, one starting with a nonzero row (cos 0 times
  the attention factor), one with zeros (sin 0): the TorchScript exports' cos_cached[position_ids], and what
  ``graft`` writes in place of a computed site;
- computed: a ``Cos`` and a ``Sin`` of the same angles, followed forward through nodes that only reshape, cast or
  scale them by a constant, to the value a rotation multiplies a tensor with (the decomposed rotate-half or
  interleaved form: the TorchScript and dynamo exports of transformers models).
A ``Cos`` (or ``Sin``) that fits none of these is a site of kind ``unidentified``: reported, never skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx_ir as ir

MICROSOFT = "com.microsoft"
# Nodes a computed cos/sin passes through on its way to the rotation: one data input, the rest constants or shapes.
_CARRIERS = {"Mul", "Div", "Cast", "Unsqueeze", "Squeeze", "Reshape", "Expand", "Identity", "Transpose", "CastLike"}


@dataclass
class Site:
    """One cos/sin pair a model rotates with.

    ``table``: the values are tables indexed by position (rows), not per-token values of one call.
    ``positions``: the value the operator reads its table rows from (None: the call's positions themselves, as
    GroupQueryAttention counts them); a graph may compute it (a row offset for a second regime, a guard).
    ``inputs``: the graph inputs they depend on (none: constants).
    """

    kind: str
    cos: str
    sin: str
    users: list[str] = field(default_factory=list)
    interleaved: bool | None = None
    table: bool = True
    inputs: list[str] = field(default_factory=list)
    positions: str | None = None

    def to_dict(self) -> dict[str, object]:
        """The site as plain data (audit.json)."""
        return {"kind": self.kind, "cos": self.cos, "sin": self.sin, "users": self.users,
                "interleaved": self.interleaved, "table": self.table, "inputs": self.inputs,
                "positions": self.positions}  # fmt: skip


def _attr(node: ir.Node, name: str, default: int = 0) -> int:
    attr = node.attributes.get(name)
    return default if attr is None else int(attr.value)


def _is_constant(value: ir.Value | None) -> bool:
    if value is None:
        return True
    if value.const_value is not None:
        return True
    producer = value.producer()
    return producer is not None and producer.op_type in ("Constant", "Shape", "ConstantOfShape")


def _operator_sites(graph: ir.Graph) -> tuple[dict[tuple[str, ...], Site], list[ir.Value]]:
    """Sites of the fused operators, one per distinct (cos, sin, positions), and the values they read."""
    sites: dict[tuple[str, ...], Site] = {}
    read: list[ir.Value] = []
    for node in graph:
        domain = node.domain or ""
        if node.op_type == "GroupQueryAttention" and domain == MICROSOFT and _attr(node, "do_rotary"):
            picked, kind, rows = (7, 8), "GroupQueryAttention do_rotary", None
            interleaved, table = bool(_attr(node, "rotary_interleaved")), True
        elif node.op_type == "RotaryEmbedding" and domain == MICROSOFT:
            picked, kind, rows = (2, 3), "RotaryEmbedding (com.microsoft)", node.inputs[1]
            interleaved, table = bool(_attr(node, "interleaved")), True
        elif node.op_type == "RotaryEmbedding" and domain in ("", "ai.onnx"):
            picked, kind = (1, 2), "RotaryEmbedding (opset 23)"
            rows = node.inputs[3] if len(node.inputs) > 3 else None
            interleaved, table = bool(_attr(node, "interleaved")), rows is not None
        else:
            continue
        if len(node.inputs) <= picked[1] or node.inputs[picked[0]] is None or node.inputs[picked[1]] is None:
            continue  # a GroupQueryAttention with do_rotary but no caches: ORT refuses it; not ours to judge
        cos, sin = node.inputs[picked[0]], node.inputs[picked[1]]
        read += [cos, sin] + ([rows] if rows is not None else [])
        made = Site(kind, cos.name, sin.name, interleaved=interleaved, table=table,
                    inputs=_graph_inputs([v for v in (cos, sin, rows) if v is not None]),
                    positions=None if rows is None else rows.name)  # fmt: skip
        site = sites.setdefault((cos.name, sin.name, made.positions or ""), made)
        site.users.append(node.name or node.op_type)
    return sites, read


def _forward(value: ir.Value) -> ir.Value:
    """``value`` followed through carrier nodes (scaled by constants, cast, reshaped) to what a rotation reads."""
    while True:
        consumers = [use.node for use in value.uses()]
        if not consumers:
            return value
        first = consumers[0]
        if first.op_type not in _CARRIERS or any(c.op_type != first.op_type for c in consumers):
            return value
        others = [v for i, v in enumerate(first.inputs) if i != _position(first, value)]
        if not all(_is_constant(v) for v in others):
            return value  # a Mul with a tensor: the rotation itself
        value = first.outputs[0]


def _position(node: ir.Node, value: ir.Value) -> int:
    return next(i for i, v in enumerate(node.inputs) if v is value)


def _ancestors(values: list[ir.Value]) -> set[int]:
    """ids of every value the given ones are computed from (through If branches' outer reads too)."""
    seen: set[int] = set()
    stack = list(values)
    while stack:
        value = stack.pop()
        if value is None or id(value) in seen:
            continue
        seen.add(id(value))
        producer = value.producer()
        if producer is None:
            continue
        stack.extend(producer.inputs)
        for attr in producer.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                stack.extend(v for node in ir.traversal.RecursiveGraphIterator(attr.value) for v in node.inputs)
            elif attr.type == ir.AttributeType.GRAPHS:
                for sub in attr.value:
                    stack.extend(v for node in ir.traversal.RecursiveGraphIterator(sub) for v in node.inputs)
    return seen


def _graph_inputs(values: list[ir.Value]) -> list[str]:
    graph = values[0].graph
    if graph is None:
        return []
    wanted = _ancestors(values)
    return [v.name for v in graph.inputs if id(v) in wanted]


def _chosen_by_if(graph: ir.Graph, cos: ir.Value, sin: ir.Value) -> tuple[ir.Value, ir.Value] | None:
    """The outputs of a main-graph If one of whose branches returns ``cos`` and ``sin`` (through Identity)."""
    for node in graph:
        if node.op_type != "If":
            continue
        for name in ("then_branch", "else_branch"):
            branch = node.attributes[name].value
            sources = []
            for output in branch.outputs:
                producer = output.producer()
                sources.append(
                    producer.inputs[0] if producer is not None and producer.op_type == "Identity" else output
                )
            if cos in sources and sin in sources:
                return node.outputs[sources.index(cos)], node.outputs[sources.index(sin)]
    return None


def _gathered_sites(graph: ir.Graph, covered: set[int]) -> list[Site]:
    """Two Gathers of constant 2-D tables by the same rows: cos (row 0 nonzero, cos 0 times the factor) and sin
    (row 0 zero); the TorchScript exports' cos_cached[position_ids], and what ``graft`` writes for computed sites.
    """  # noqa: D205
    by_rows: dict[int, list[ir.Node]] = {}
    for node in graph:
        data = node.inputs[0] if node.op_type == "Gather" and node.inputs else None
        if data is None or data.const_value is None or id(node.outputs[0]) in covered:
            continue
        if len(data.const_value.shape) == 2 and _attr(node, "axis") == 0:
            by_rows.setdefault(id(node.inputs[1]), []).append(node)
    out: list[Site] = []
    for nodes in by_rows.values():
        if len(nodes) != 2:
            continue
        first = [abs(float(n.inputs[0].const_value.numpy()[0].max(initial=0))) for n in nodes]
        if (first[0] == 0) == (first[1] == 0):
            continue  # not one cos and one sin
        cos, sin = (nodes[0], nodes[1]) if first[0] else (nodes[1], nodes[0])
        rows = cos.inputs[1]
        chosen = _chosen_by_if(graph, cos.outputs[0], sin.outputs[0])
        if chosen is not None:  # the table is one branch of an If (dynamic NTK's default): the If's outputs rule
            out.append(Site("computed cos/sin", chosen[0].name, chosen[1].name, users=[n.name for n in (cos, sin)],
                            table=False, inputs=_graph_inputs(list(chosen))))  # fmt: skip
            continue
        out.append(Site("gathered table", cos.inputs[0].name, sin.inputs[0].name,
                        users=[n.name or "Gather" for n in (cos, sin)], table=True, inputs=_graph_inputs([rows]),
                        positions=rows.name))  # fmt: skip
    return out


def find_sites(model: ir.Model) -> list[Site]:
    """Every rotary site of ``model``'s main graph (module doc), fused operators first."""
    graph = model.graph
    sites, read = _operator_sites(graph)
    covered = _ancestors(read)  # a Cos computing a fused operator's cache belongs to that site
    gathered = _gathered_sites(graph, covered)
    cosines = [n for n in graph if n.op_type == "Cos" and id(n.outputs[0]) not in covered]
    sines = {id(n.inputs[0]): n for n in graph if n.op_type == "Sin" and id(n.outputs[0]) not in covered}
    out = list(sites.values()) + gathered
    for cos_node in cosines:
        sin_node = sines.pop(id(cos_node.inputs[0]), None)
        if sin_node is None:
            out.append(Site("unidentified", cos_node.outputs[0].name, "", users=[cos_node.name or "Cos"],
                            table=False, inputs=_graph_inputs([cos_node.outputs[0]])))  # fmt: skip
            continue
        cos, sin = _forward(cos_node.outputs[0]), _forward(sin_node.outputs[0])
        users = sorted({use.node.name or use.node.op_type for v in (cos, sin) for use in v.uses()})
        out.append(Site("computed cos/sin", cos.name, sin.name, users=users, table=False,
                        inputs=_graph_inputs([cos, sin])))  # fmt: skip
    for sin_node in sines.values():
        out.append(Site("unidentified", "", sin_node.outputs[0].name, users=[sin_node.name or "Sin"], table=False,
                        inputs=_graph_inputs([sin_node.outputs[0]])))  # fmt: skip
    return out
