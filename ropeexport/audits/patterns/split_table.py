"""One sin|cos table, read per token and split: transformers' GPT-J (``embed_positions``, sin and cos of every position
concatenated into one [P, r] table) as the TorchScript export writes it (optimum's GPT-J): the table expanded to the
batch, ``GatherElements`` on axis 1 by position_ids repeated to the table's width, then split into its two halves
(``Split``, or two ``Slice`` on the last axis), each widened (repeat_interleave: Unsqueeze, Tile, Reshape) to the
value a rotation multiplies with.

The halves are told apart by the stored table's row 0 (position 0: sin 0 = 0, cos 0 = the attention factor), not by
their order: a table stored cos|sin where the graph splits sin|cos is then a site whose rotations use it otherwise,
which ``audits.uses`` names (cos and sin exchanged). A table whose row 0 has both halves zero or both nonzero is no
sin|cos table this pattern reads (``audits.sites.refuse_unread`` names a rotation reading it).

Each site is the two widened values as the rotations read them, per token ([b, s, 1, r] in GPT-J's form;
``table`` False): the audit evaluates them from position_ids and ``graft`` replaces them by the rope family's own
rows (``audits.rows``), as for cos/sin computed in the graph.

Shapes: table [P, r] (r = rotary_dim, sin then cos, r / 2 each); gathered [b, s, r]; halves [b, s, r / 2].
"""  # noqa: D205

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ropeexport.audits.patterns.base import Pattern, Site, SiteKind, Walk, attr, index_of, model_inputs, name_of

# Nodes between the stored table and the GatherElements (the table expanded to the batch), or between the gathered
# rows and their split: data is input 0, the rest shapes or constants
TO_TABLE = {"Expand", "Tile", "Cast", "Identity", "Unsqueeze", "Reshape", "Squeeze"}
# Nodes carrying one half to what a rotation multiplies with (repeat_interleave's Unsqueeze, Tile, Reshape)
WIDEN = {"Cast", "Unsqueeze", "Squeeze", "Tile", "Reshape", "Expand", "Identity", "CastLike"}


def _constant(value: ir.Value) -> np.ndarray | None:
    """``value``'s stored tensor (an initializer or a Constant node's), as float64; None when computed."""
    tensor = value.const_value
    producer = value.producer()
    if tensor is None and producer is not None and producer.op_type == "Constant" and "value" in producer.attributes:
        tensor = producer.attributes["value"].value
    return None if tensor is None else np.asarray(tensor.numpy(), np.float64)


def stored_table(value: ir.Value) -> np.ndarray | None:
    """The 2-D table [P, r] ``value`` (a GatherElements' data) is expanded from, or None (not a stored table)."""
    while True:
        found = _constant(value)
        if found is not None:
            found = found.reshape(found.shape[-2:]) if found.ndim > 2 and found.shape[0] == 1 else found
            return found if found.ndim == 2 else None
        producer = value.producer()
        if producer is None or producer.op_type not in TO_TABLE or not producer.inputs or producer.inputs[0] is None:
            return None
        value = producer.inputs[0]


def _static(value: ir.Value | None, depth: int = 16) -> bool:
    """A constant or a value computed from constants and tensor shapes alone (a Reshape's target shape)."""
    if value is None or value.const_value is not None:
        return True
    producer = value.producer()
    if producer is None or depth == 0:
        return False
    if producer.op_type in ("Constant", "Shape", "ConstantOfShape"):
        return True
    return all(_static(v, depth - 1) for v in producer.inputs)


def _through(value: ir.Value, ops: set[str]) -> ir.Value:
    """``value`` followed through one chain of ``ops`` nodes (other inputs static; a Shape of it read aside) to the
    first value read otherwise or by several nodes.
    """  # noqa: D205
    while True:
        readers = [u for u in value.uses() if u.node.op_type != "Shape"]
        if len(readers) != 1:
            return value
        node, index = readers[0].node, readers[0].idx
        if node.op_type not in ops or index != 0 or not all(_static(v) for v in node.inputs[1:]):
            return value
        value = node.outputs[0]


def halves(value: ir.Value, width: int) -> tuple[ir.Value, ir.Value, ir.Node] | None:
    """The first and second halves of ``value`` [.., width] on its last axis, and the node splitting it: a ``Split``
    in two equal parts, or two ``Slice`` [0:w/2] and [w/2:w]; None for any other reading.
    """  # noqa: D205
    readers = [u.node for u in value.uses() if u.node.op_type != "Shape"]
    half = width // 2
    if len(readers) == 1 and readers[0].op_type == "Split" and len(readers[0].outputs) == 2:
        split = readers[0]
        sizes = _constant(split.inputs[1]) if len(split.inputs) > 1 and split.inputs[1] is not None else None
        equal = sizes is None or [int(s) for s in sizes.reshape(-1)] == [half, half]
        if equal and attr(split, "axis") in (-1, _rank(value) - 1):
            return split.outputs[0], split.outputs[1], split
    if len(readers) == 2 and all(n.op_type == "Slice" for n in readers):
        spans = {_span(n, width): n for n in readers}
        if set(spans) == {(0, half), (half, width)}:
            return spans[(0, half)].outputs[0], spans[(half, width)].outputs[0], spans[(0, half)]
    return None


def _rank(value: ir.Value) -> int:
    return len(value.shape) if value.shape is not None else -2  # unknown: only axis -1 says the last axis


def _span(node: ir.Node, width: int) -> tuple[int, int] | None:
    """[start, end) a Slice takes of the last axis (ends clipped to ``width``), or None when not that alone."""
    parts = [_constant(v) if v is not None else None for v in node.inputs[1:5]]
    if len(parts) < 3 or any(p is None for p in parts[:3]):
        return None
    starts, ends, axes = (np.asarray(p).reshape(-1) for p in parts[:3])
    steps = np.asarray(parts[3]).reshape(-1) if len(parts) > 3 and parts[3] is not None else np.ones(1)
    data = node.inputs[0]
    if data is None or len(axes) != 1 or int(axes[0]) not in (-1, _rank(data) - 1) or int(steps[0]) != 1:
        return None
    return int(starts[0]), min(int(ends[0]), width)


def find(graph: ir.Graph, walk: Walk) -> list[Site]:
    """Its sites in ``graph`` (module doc): every GatherElements of a stored sin|cos table, split in two."""
    order = index_of(graph)
    out: list[Site] = []
    for node in graph:
        if node.op_type != "GatherElements" or id(node.outputs[0]) in walk.covered or node.inputs[0] is None:
            continue
        table = stored_table(node.inputs[0])
        if table is None or table.shape[-1] % 2:
            continue
        split = halves(_through(node.outputs[0], {"Cast", "Identity"}), table.shape[-1])
        if split is None:
            continue
        first, second, _ = split
        w = table.shape[-1] // 2
        zero = [not np.any(table[0, :w]), not np.any(table[0, w:])]
        if zero[0] == zero[1]:
            continue  # row 0 does not say which half is sin: not read here (``refuse_unread``)
        sin, cos = (first, second) if zero[0] else (second, first)
        walk.covered |= {id(node.outputs[0]), id(first), id(second)}
        cos, sin = _through(cos, WIDEN), _through(sin, WIDEN)
        users = sorted({use.node.name or use.node.op_type for v in (cos, sin) for use in v.uses()})
        out.append(Site(SiteKind.SPLIT, name_of(cos), name_of(sin), users=users, table=False,
                        inputs=model_inputs(walk.root, [cos, sin]), order=(1, order[id(node)]),
                        values=(cos, sin, None)))  # fmt: skip
    return out


PATTERN = Pattern("split_table", "rope", (SiteKind.SPLIT,), find)
