"""In-graph range guards: every artifact refuses a position outside [0, max_positions) inside the graph itself.

Runners check positions before running (from the metadata), but a user's own ONNX Runtime session does not, and
ONNX ``Gather`` wraps a negative index while a bias computed from positions has no table to overflow: without a
guard, a 2048-position ALiBi graph returns numbers for position 5000 or -7.

The guard is added at the graph boundary, once for every family: each position input ``pos`` [b, s] is counted for
entries outside the range, and a ``Gather`` from a one-element table at index 0 (all in range) or 1 (any out of
range) fails the call. Its scalar 0 is added to the positions, and every node that read ``pos`` reads the sum
instead, so nothing downstream can run before the check. The failing node is named after the input and its range:
ONNX Runtime's error reads ``... running Gather node. Name:'position_ids must lie in [0, 2047]' Status Message:
indices element out of data bounds, idx=1 ...``, which names no position the caller never gave. The count is a
float32 ReduceSum (an empty call has none out of range; TensorRT 8.6 reduces no INT64), at opset 17 and 23 alike.

A graph that calls another artifact (a block its rope piece, a decoder its blocks) would otherwise check the same
input once per level: a guard of the called piece that reads an input this level already checked, against the same
range, is dropped, so a decoder checks ``position_ids`` once per call, not three times (and ONNX Runtime runs
ten nodes instead of thirty each decode step).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def guard_node_name(pos: str, max_positions: int) -> str:
    """The failing node's name, which ONNX Runtime quotes in its error message."""
    return f"{pos} must lie in [0, {max_positions - 1}]"


def rename_inputs(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Every read of ``old`` in ``graph`` and its subgraphs (If branches read outer names) reads ``new``."""
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                rename_inputs(attr.g, old, new)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    rename_inputs(sub, old, new)


def _guard_nodes(pos: str, max_positions: int) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], str]:
    """Nodes and initializers that pass ``pos`` through the range check; returns the checked name."""
    p = f"{pos}__guard"
    consts: dict[str, np.ndarray] = {
        f"{p}_zero": np.array(0, np.int64),
        f"{p}_zero_f32": np.array(0, np.float32),
        f"{p}_limit": np.array(max_positions, np.int64),
        f"{p}_table": np.zeros(1, np.int64),  # one element: index 1 is out of bounds, whatever the position was
    }
    initializers = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    checked = f"{pos}__checked"
    nodes = [
        helper.make_node("Less", [pos, f"{p}_zero"], [f"{p}_below"], name=f"{p}_below"),
        helper.make_node("Less", [pos, f"{p}_limit"], [f"{p}_inside"], name=f"{p}_inside"),
        helper.make_node("Not", [f"{p}_inside"], [f"{p}_beyond"], name=f"{p}_beyond"),
        helper.make_node("Or", [f"{p}_below", f"{p}_beyond"], [f"{p}_bad"], name=f"{p}_bad"),
        # Counted in float32: TensorRT 8.6 reduces no INT64, and a sum of 0/1 values is 0 exactly when none is bad.
        helper.make_node("Cast", [f"{p}_bad"], [f"{p}_bad_f32"], name=f"{p}_cast", to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", [f"{p}_bad_f32"], [f"{p}_count"], name=f"{p}_count", keepdims=0),
        helper.make_node("Greater", [f"{p}_count", f"{p}_zero_f32"], [f"{p}_any"], name=f"{p}_any"),
        helper.make_node("Cast", [f"{p}_any"], [f"{p}_index"], name=f"{p}_index", to=TensorProto.INT64),
        helper.make_node(
            "Gather", [f"{p}_table", f"{p}_index"], [f"{p}_ok"], name=guard_node_name(pos, max_positions), axis=0
        ),
        helper.make_node("Add", [pos, f"{p}_ok"], [checked], name=f"{p}_checked"),
    ]
    return nodes, initializers, checked


def add_position_guards(graph: onnx.GraphProto, position_inputs: list[str], max_positions: int) -> None:
    """Put a range guard between each position input of ``graph`` and everything that reads it (in place)."""
    inputs = {i.name for i in graph.input}
    guard_nodes: list[onnx.NodeProto] = []
    orphans: set[str] = set()
    for pos in position_inputs:
        if pos not in inputs:
            raise ValueError(f"{pos!r} is not an input of the graph")
        nodes, initializers, checked = _guard_nodes(pos, max_positions)
        rename_inputs(graph, pos, checked)
        guard_nodes += nodes
        graph.initializer.extend(initializers)
        orphans |= _drop_nested_guards(graph, checked, max_positions)
    # Topological order: the guards read only graph inputs and their own constants, so they go first.
    existing = list(graph.node)
    del graph.node[:]
    graph.node.extend(guard_nodes + existing)
    if orphans:
        read = _reads(graph)
        kept = [t for t in graph.initializer if t.name in read or t.name not in orphans]
        del graph.initializer[:]
        graph.initializer.extend(kept)


def _drop_nested_guards(graph: onnx.GraphProto, checked: str, max_positions: int) -> set[str]:
    """Drop each called piece's guard that reads ``checked`` against the same range; its readers read ``checked``.

    Returns the constants the dropped nodes read (the caller removes those nothing reads any more).
    A guard is recognised by its last node, ``{p}_checked`` (an Add of the position and ``{p}_ok``), and its range by
    the limit its ``{p}_inside`` node compares with; its nodes are those writing ``{p}_*`` values.
    """
    constants = {t.name: t for t in graph.initializer}
    producers = {o: n for n in graph.node for o in n.output}
    dropped: dict[str, str] = {}  # every value a dropped guard writes -> what its readers read instead
    for add in graph.node:
        if add.op_type != "Add" or not add.name.endswith("__guard_checked") or add.input[0] != checked:
            continue
        p = add.name[: -len("_checked")]
        inside = producers.get(f"{p}_inside")
        limit = constants.get(inside.input[1]) if inside is not None else None
        if limit is None or int(numpy_helper.to_array(limit)) != max_positions:
            continue  # another range: both checks stay
        steps = ("below", "inside", "beyond", "bad", "bad_f32", "count", "any", "index", "ok")
        dropped |= {f"{p}_{s}": "" for s in steps} | {add.output[0]: checked}
    gone = [n for n in graph.node if n.output and all(o in dropped for o in n.output)]
    orphans = {i for n in gone for i in n.input if i in constants}
    kept = [n for n in graph.node if not (n.output and all(o in dropped for o in n.output))]
    del graph.node[:]
    graph.node.extend(kept)
    for old, new in dropped.items():
        if new:
            rename_inputs(graph, old, new)
    return orphans


def _reads(graph: onnx.GraphProto) -> set[str]:
    """Every value name a node of ``graph`` or of its subgraphs reads."""
    names = set()
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            subgraphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in subgraphs:
                names |= _reads(sub)
    return names
