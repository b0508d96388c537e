"""What every site pattern shares: the site (``Site``), its kind (``SiteKind``), the contract of a pattern module
(``Pattern``) and the graph walks the patterns use.

A pattern module finds one form an exporter writes its position encoding in (a fused operator, gathered tables,
cos/sin computed in the graph, an ALiBi bias) and exposes ``PATTERN``; ``patterns.PATTERNS`` lists them, in the order
they claim values: a value a pattern claimed (a fused operator's cache and everything computing it) is not another
pattern's site.
"""  # noqa: D205

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

MICROSOFT = "com.microsoft"

# A subgraph's place in the model: per level, the index of the node holding it in its graph, the attribute, and the
# graph's index in a GRAPHS attribute (0 for GRAPH).
Step = tuple[int, str, int]


class SiteKind(enum.Enum):
    """What a site is; the value is the words audit.json, audit.md and audit.html carry."""

    GROUP_QUERY_ATTENTION = "GroupQueryAttention do_rotary"
    ROTARY_MICROSOFT = "RotaryEmbedding (com.microsoft)"
    MROTARY_MICROSOFT = "MRotaryEmbedding (com.microsoft)"
    ROTARY_ONNX = "RotaryEmbedding (opset 23)"
    GATHERED = "gathered table"
    COMPUTED = "computed cos/sin"
    SPLIT = "split sincos table"
    UNIDENTIFIED = "unidentified"
    ALIBI = "ALiBi bias"
    VISION = "2-D vision rotation (read by running the model)"


@dataclass
class Site:
    """One cos/sin pair a model rotates with (ALiBi: one bias, named by ``cos``; ``sin`` empty).

    ``table``: the values are tables indexed by position (rows), not per-token values of one call.
    ``positions``: the value the operator reads its table rows from (None: the call's positions themselves, as
    GroupQueryAttention counts them); a graph may compute it (a row offset for a second regime, a guard).
    ``inputs``: the model inputs they depend on (none: constants).
    ``scope``: where the values live: () the main graph, else the path of subgraphs to the deepest one they are
    computed in (``where`` says it in words); ``blocked``: why they cannot be evaluated (they change with a Loop's
    iteration), or None. ``layers``: the layers whose nodes read it (None: no reader names one); ``functions``: the
    model-local functions its readers or the nodes making its values were inlined from (``audits.functions``: a
    model's functions are read inlined), outermost first, or (). Read by use (``audits.uses``): ``sign`` -1 where
    the rotations reading it turn the other way (rotate(x) = (x2, -x1)), so that what they apply is minus its sin;
    ``roles``: per layer, whether its rotations rotate the query, the key or both (``q``, ``k``); ``only``: the
    site's readers are the only nodes graft may rewire (its values are read otherwise by other sites' rotations);
    ``shared``: a node on the way to its rotations that other rotations read through too (graft cannot rewire it
    alone). ``values`` (cos,
    sin, positions) and ``readers`` are the graph's own objects, for the walk and the reader checks; ``order`` (tier,
    index of the anchoring node) orders sites within a graph.
    """

    kind: SiteKind
    cos: str
    sin: str
    users: list[str] = field(default_factory=list)
    interleaved: bool | None = None
    table: bool = True
    inputs: list[str] = field(default_factory=list)
    positions: str | None = None
    scope: tuple[Step, ...] = ()
    where: str = ""
    blocked: str | None = None
    order: tuple[int, int] = (0, 0)
    layers: tuple[int, ...] | None = None  # the layers whose nodes read it (``audits.layers``); None: not told
    functions: tuple[str, ...] = ()  # the model-local functions its readers or values were inlined from
    sign: int = 1  # -1: its rotations apply minus its sin (``audits.uses``)
    roles: dict[int, tuple[str, ...]] = field(default_factory=dict)  # layer -> ``q`` / ``k`` its rotations rotate
    only: bool = False  # graft rewires its readers only (other sites read its values otherwise)
    shared: str | None = None  # a node on the way to its rotations that other rotations read through too
    indexer: bool = False  # every rotation reading it is DeepSeek Sparse Attention's indexer's (``audits.indexer``)
    rotations: list[Any] = field(default_factory=list, repr=False, compare=False)  # ``rotations.Rotation``
    # the Muls multiplying its values that no rotation of ``rotations`` holds (``audits.uses``): rotations not read
    unread: list[ir.Node] = field(default_factory=list, repr=False, compare=False)
    # id(value) -> whether it feeds the indexer's selection (``indexer.feeds_selection``), shared by the sites of one
    # reading of a graph (``indexer.mark``), so that a later reader of them (``slices``) asks each value once
    selection: dict[int, bool] = field(default_factory=dict, repr=False, compare=False)
    values: tuple[ir.Value | None, ...] = field(default=(), repr=False, compare=False)
    readers: list[ir.Node] = field(default_factory=list, repr=False, compare=False)

    def to_dict(self) -> dict[str, object]:
        """The site as plain data (audit.json); a site inside a subgraph also says which (``graph``, ``scope``)."""
        out: dict[str, object] = {"kind": self.kind.value, "cos": self.cos, "sin": self.sin, "users": self.users,
                                  "interleaved": self.interleaved, "table": self.table, "inputs": self.inputs,
                                  "positions": self.positions,
                                  "layers": None if self.layers is None else list(self.layers)}  # fmt: skip
        if self.scope:
            out |= {"graph": self.where, "scope": [list(step) for step in self.scope]}
        if self.functions:
            out["functions"] = list(self.functions)
        if self.sign != 1:
            out["sign"] = self.sign
        if self.roles:
            out["roles"] = {str(layer): list(roles) for layer, roles in sorted(self.roles.items())}
        if self.only:
            out["only"] = True
        if self.shared:
            out["shared"] = self.shared
        if self.indexer:
            out["indexer"] = True
        return out

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Site:
        """The site a record of ``to_dict`` (with the audit's own fields beside) describes: enough to evaluate it."""
        scope = tuple((int(i), str(a), int(k)) for i, a, k in record.get("scope", []))
        return cls(SiteKind(record["kind"]), record["cos"], record["sin"], list(record["users"]),
                   record["interleaved"], record["table"], list(record["inputs"]), record["positions"], scope,
                   record.get("graph", ""),
                   layers=None if record.get("layers") is None else tuple(record["layers"]),
                   functions=tuple(record.get("functions", ())), sign=int(record.get("sign", 1)),
                   only=bool(record.get("only", False)), shared=record.get("shared"),
                   indexer=bool(record.get("indexer", False)))  # fmt: skip


@dataclass
class Walk:
    """What a pattern is handed besides the graph it searches: the model's main graph (its inputs are what a site may
    depend on) and the ids of the values earlier patterns claimed (a pattern adds what it claims).
    """  # noqa: D205

    root: ir.Graph
    covered: set[int] = field(default_factory=set)


# A reader check: ONNX Runtime's reason for refusing to run ``node`` with these tables (cos, sin as the model stores
# them, of a short call), the config's spec for what the graph does not say; None when it runs.
ReaderCheck = Callable[[ir.Node, np.ndarray, np.ndarray, Any], "str | None"]


@dataclass(frozen=True)
class Pattern:
    """One form of site (module doc): ``find(graph, walk)`` returns its sites in ``graph`` (one graph: the main one or
    a subgraph); ``encoding`` says which audit looks for it (``rope`` or ``alibi``); ``check_reader``, where given,
    runs one reader alone in ONNX Runtime with the site's tables (the operators that refuse some tables at run time).
    """  # noqa: D205

    name: str
    encoding: str
    kinds: tuple[SiteKind, ...]
    find: Callable[[ir.Graph, Walk], list[Site]]
    check_reader: ReaderCheck | None = None


def attr(node: ir.Node, name: str, default: int = 0) -> int:
    """An integer attribute of ``node``, or ``default``."""
    found = node.attributes.get(name)
    return default if found is None else int(found.value)


def is_product(node: ir.Node) -> bool:
    """A matrix product that can be q . k: ``MatMul``, or ONNX Runtime's ``FusedMatMul`` (com.microsoft; its optimizer's
    MatmulTransposeFusion and MatMulScaleFusion write it: Y = alpha * op(A) @ op(B), op transposing A's or B's last two
    axes where ``transA`` / ``transB`` say, ``transBatchA`` / ``transBatchB`` moving their batch axes). A transpose
    changes an operand's layout, not its side: input 0 is the left factor (the query's), input 1 the right (the
    key's), in both; the scale it folds in is ``product_scale``.
    """  # noqa: D205
    if node.op_type == "MatMul":
        return node.domain in ("", "ai.onnx")
    return node.op_type == "FusedMatMul" and node.domain == MICROSOFT


def product_scale(node: ir.Node) -> float:
    """The factor a product of ``is_product`` multiplies its result by: ``FusedMatMul``'s ``alpha`` (default 1.0 in
    its schema), 1.0 for a ``MatMul``.
    """  # noqa: D205
    found = node.attributes.get("alpha") if node.op_type == "FusedMatMul" else None
    return 1.0 if found is None else float(found.value)


def name_of(value: ir.Value) -> str:
    """``value``'s name: ONNX names every value of a loaded model (only a value built in memory may have none)."""
    assert value.name is not None, "a value of a loaded model has a name"
    return value.name


def is_constant(value: ir.Value | None) -> bool:
    """An absent input, an initializer, or the output of Constant / Shape / ConstantOfShape."""
    if value is None:
        return True
    if value.const_value is not None:
        return True
    producer = value.producer()
    return producer is not None and producer.op_type in ("Constant", "Shape", "ConstantOfShape")


def constant_of(value: ir.Value | None) -> np.ndarray | None:
    """``value``'s tensor when the graph holds it as a constant (an initializer, or a Constant node's ``value``:
    TorchScript exports write those), else None.
    """  # noqa: D205
    if value is None:
        return None
    tensor = value.const_value
    producer = value.producer()
    if tensor is None and producer is not None and producer.op_type == "Constant" and "value" in producer.attributes:
        tensor = producer.attributes["value"].value
    return None if tensor is None else np.asarray(tensor.numpy())


# Casts that keep every value: ONNX Runtime's CPU provider has no float16 kernel for some operators (Where among
# them), and its optimizer casts a float16 table to float32 where it is stored (a Cast named
# ``InsertedPrecisionFreeCast_<table>``), its lookups reading the cast; each (from, to) holds every value of ``from``
WIDENING = {(ir.DataType.FLOAT16, ir.DataType.FLOAT), (ir.DataType.FLOAT16, ir.DataType.DOUBLE),
            (ir.DataType.BFLOAT16, ir.DataType.FLOAT), (ir.DataType.BFLOAT16, ir.DataType.DOUBLE),
            (ir.DataType.FLOAT, ir.DataType.DOUBLE)}  # fmt: skip


def stored(value: ir.Value | None) -> ir.Value | None:
    """The initializer ``value`` holds the values of: itself, or the one a widening Cast of it reads (``WIDENING``:
    the same values, so the table is the stored one, read in its stored dtype); None when neither.
    """  # noqa: D205
    if value is None or value.const_value is not None:
        return value
    cast = value.producer()
    if cast is None or cast.op_type != "Cast" or not cast.inputs:
        return None
    source = cast.inputs[0]
    if source is None or source.const_value is None:
        return None
    widened = (source.const_value.dtype, ir.DataType(attr(cast, "to")))
    return source if widened in WIDENING else None


def lookups(table: ir.Value) -> list[ir.Node]:
    """The Gathers that look rows of the initializer ``table`` up: directly, or through a widening Cast of it."""
    found = []
    for use in table.uses():
        if use.node.op_type == "Gather" and use.idx == 0:
            found.append(use.node)
        elif use.node.op_type == "Cast" and stored(use.node.outputs[0]) is table:
            found += [u.node for u in use.node.outputs[0].uses() if u.node.op_type == "Gather" and u.idx == 0]
    return found


def subgraphs(node: ir.Node) -> Iterable[ir.Graph]:
    """The graphs ``node`` holds in its attributes (an If's branches, a Loop's or Scan's body)."""
    for found in node.attributes.values():
        if found.type == ir.AttributeType.GRAPH:
            yield found.value
        elif found.type == ir.AttributeType.GRAPHS:
            yield from found.value


def ancestors(values: Iterable[ir.Value | None]) -> set[int]:
    """ids of the given values and of every value they are computed from: through a node holding subgraphs, every
    value inside them (at any depth) and every outer value they read.
    """  # noqa: D205
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
        for sub in subgraphs(producer):
            stack.extend(sub.outputs)
            stack.extend(sub.initializers.values())
            for node in ir.traversal.RecursiveGraphIterator(sub):
                stack.extend(node.inputs)
                stack.extend(node.outputs)
    return seen


def model_inputs(root: ir.Graph, values: Iterable[ir.Value | None]) -> list[str]:
    """Names of the model's inputs (``root``'s) that ``values`` are computed from, in the model's order."""
    wanted = ancestors(values)
    return [name_of(v) for v in root.inputs if id(v) in wanted]


def index_of(graph: ir.Graph) -> dict[int, int]:
    """id(node) -> its index in ``graph`` (the order sites are reported in)."""
    return {id(node): i for i, node in enumerate(graph)}


# What a fused operator's node reads (``operator_sites``): (cos input index, sin input index, positions value or None,
# interleaved, table).
Match = tuple[int, int, "ir.Value | None", bool, bool]


def operator_sites(graph: ir.Graph, walk: Walk, kind: SiteKind, match: Callable[[ir.Node], Match | None]) -> list[Site]:
    """Sites of one fused operator, one per distinct (cos, sin, positions, pairing) it reads, and every value computing
    them claimed. ``match(node)`` gives the ``Match`` of a node of the operator, None for any other node.
    """  # noqa: D205
    sites: dict[tuple[int, ...], Site] = {}
    read: list[ir.Value] = []
    order = index_of(graph)
    for node in graph:
        found = match(node)
        if found is None:
            continue
        c, s, rows, interleaved, table = found
        cos, sin = (node.inputs[c], node.inputs[s]) if len(node.inputs) > s else (None, None)
        if cos is None or sin is None:
            continue  # a GroupQueryAttention with do_rotary but no caches: ORT refuses it; not ours to judge
        read += [cos, sin] + ([rows] if rows is not None else [])
        key = (id(cos), id(sin), id(rows), interleaved)  # a layer paired otherwise is a site of its own
        if key not in sites:
            sites[key] = Site(kind, name_of(cos), name_of(sin), interleaved=interleaved, table=table,
                              inputs=model_inputs(walk.root, [cos, sin, rows]),
                              positions=None if rows is None else name_of(rows), order=(0, order[id(node)]),
                              values=(cos, sin, rows))  # fmt: skip
        sites[key].users.append(node.name or node.op_type)
        sites[key].readers.append(node)
    walk.covered |= ancestors(read)  # a Cos computing a fused operator's cache belongs to that site
    return list(sites.values())
