"""Where a value goes: the nodes that compute with it, past the nodes that only carry it.

A table lookup one layer's nodes made may serve every layer: ONNX Runtime's optimizer merges identical subexpressions
(common subexpression elimination, on at every level from ``basic``), so in the graph it runs, ropeexport's decomposed
decoder looks each table up once, with layer 0's Gather, and every layer's rotation multiplies by that lookup. Which
layers read the site is then said by the nodes the lookup reaches, not by the lookup's own name
(``layers.site_layers``).
"""  # noqa: D205

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import onnx_ir as ir

from ropeexport.audits.patterns.base import is_constant
from ropeexport.audits.patterns.computed import CARRIERS


def consumers(values: Iterable[ir.Value | None]) -> list[ir.Node]:
    """The nodes using ``values``, each followed forward through carrier nodes (``patterns.computed.CARRIERS``: one
    data input, the others constants or shapes; a ``Where`` on a constant mask, ``_pick``) to the nodes that compute
    with it, in the order first met.
    """  # noqa: D205
    found: dict[int, ir.Node] = {}
    seen: set[int] = set()
    stack = [v for v in values if v is not None]
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        for use in value.uses():
            node = use.node
            others = [v for i, v in enumerate(node.inputs) if i != use.idx]
            if node.op_type in CARRIERS and all(is_constant(v) for v in others) or _pick(node, use.idx):
                stack.extend(node.outputs)
            else:
                found.setdefault(id(node), node)
    return list(found.values())


def reached(start: ir.Value, depth: int, follow: Callable[[ir.Node], bool]) -> Iterator[Any]:
    """Every use (onnx_ir's ``Usage``: ``node``, ``idx``) of a value ``start`` reaches, breadth first, each node
    once, at most ``depth`` nodes deep, followed past a node only where ``follow(node)`` holds (asked once its use has
    been handed out).
    """  # noqa: D205
    frontier: deque[tuple[ir.Value, int]] = deque([(start, 0)])
    seen: set[int] = set()
    while frontier:
        value, level = frontier.popleft()
        for use in value.uses():
            node = use.node
            if id(node) in seen or level >= depth:
                continue
            seen.add(id(node))
            yield use
            if follow(node):
                frontier.extend((out, level + 1) for out in node.outputs)


def _pick(node: ir.Node, index: int) -> bool:
    """A ``Where`` on a constant mask, ``value`` one of its picks: M-RoPE's choice of each pair's axis (ropeexport's
    decomposed form), which carries the lookups of the three axes alike.
    """  # noqa: D205
    return node.op_type == "Where" and index in (1, 2) and is_constant(node.inputs[0])
