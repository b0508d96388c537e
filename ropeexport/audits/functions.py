"""Model-local functions read where they run: every call inlined into the graph that makes it, for reading.

A model may keep part of its graph in ``model.functions`` (a node whose domain and op_type name a model-local
function calls it; torch's exporters write one per module when asked, other tools their fused blocks): a rotation
inside one is as much the model's as one in the main graph. ``inline(proto)`` returns the model with every call
inlined, nested calls too (a function calling another), with onnx's own inliner (``onnx.inliner``), so that the
audit's walk, its evaluation and graft's repair see one graph.

Each call is first given its own copy of the function (``_specialize``), so that what the inliner writes still says
where it came from: every node of the copy is named ``<call's name>/<its own name>`` (the layer a call names, as
``/model/layers.3/attn/Rotary`` does, is then the layer of every node inside it: ``layers.layer_of``), inherits the
call's module path (``pkg.torch.onnx.name_scopes`` / ``namespace`` metadata, the call's before its own) and carries
``ropeexport.function`` (``FROM``): the functions it was inlined from, outermost first (``local:Block > local:Rot``).

Refused in one line (``SpecError`` on ``model``), never read as if the calls were not there: a function that calls
itself (directly or through others), a call the inliner leaves in place, or calls that would inline to more than
``MAX_NODES`` nodes.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx
import onnx_ir as ir

from ropeexport.audits.patterns.base import Step
from ropeexport.errors import SpecError

FROM = "ropeexport.function"  # metadata of an inlined node: the functions it came from, outermost first
SCOPES = ("pkg.torch.onnx.name_scopes", "namespace")  # a node's module path (``layers.SCOPES``)
MAX_NODES = 1_000_000  # the most nodes the calls of one model may inline to

FunctionId = tuple[str, str, str]  # (domain, name, overload), as a node names the function it calls


def words(key: FunctionId) -> str:
    """A function as the audit names it: ``domain:name`` (``:overload`` where it has one)."""
    domain, name, overload = key
    return f"{domain}:{name}" + (f":{overload}" if overload else "")


def _key(node: onnx.NodeProto | onnx.FunctionProto) -> FunctionId:
    name = node.op_type if isinstance(node, onnx.NodeProto) else node.name
    return node.domain, name, node.overload


class _Specializer:
    """One copy of a function per call (module doc), counting the nodes they add up to."""

    def __init__(self, proto: onnx.ModelProto) -> None:
        self.functions = {_key(f): f for f in proto.functions}
        self.copies: list[onnx.FunctionProto] = []
        self.original: dict[str, FunctionId] = {}  # a copy's name -> the function it copies
        self.taken = {f.name for f in proto.functions}
        self.nodes = 0

    def graph(self, graph: onnx.GraphProto, stack: tuple[FunctionId, ...]) -> None:
        """Every call in ``graph`` (and its subgraphs) pointed at a copy of its own."""
        self.nodes_of(graph.node, stack)

    def nodes_of(self, nodes: object, stack: tuple[FunctionId, ...]) -> None:
        for node in nodes:  # type: ignore[attr-defined]
            for attr in node.attribute:
                for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    self.graph(sub, stack)
            if _key(node) in self.functions:
                self.call(node, stack)

    def call(self, node: onnx.NodeProto, stack: tuple[FunctionId, ...]) -> None:
        key = _key(node)
        if key in stack:
            chain = " > ".join(words(k) for k in (*stack[stack.index(key):], key))
            raise SpecError("model", f"model-local function {words(key)} calls itself ({chain}): ONNX Runtime cannot "
                            "run it and the audit cannot read it")  # fmt: skip
        source = self.functions[key]
        self.nodes += len(source.node)
        if self.nodes > MAX_NODES:
            raise SpecError("model", f"the calls of its model-local functions would inline to more than {MAX_NODES} "
                            f"nodes (at {words(key)}): refused")  # fmt: skip
        copy = onnx.FunctionProto()
        copy.CopyFrom(source)
        name = f"{source.name}__call{len(self.copies)}"
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        self.original[name] = key
        copy.name = name
        caller = node.name or node.op_type
        inherited = {p.key: p.value for p in node.metadata_props}
        outer = inherited.get(FROM)
        origin = f"{outer} > {words(key)}" if outer else words(key)
        for inner in _every_node(copy.node):  # the body's subgraphs too: what they hold came from the call
            inner.name = f"{caller}/{inner.name or inner.op_type}"
            own = {p.key: p.value for p in inner.metadata_props}
            merged = {k: v for k, v in inherited.items() if k in SCOPES}
            for k, v in own.items():  # the call's module path first: the layer it names is the inner node's too
                merged[k] = f"{merged[k]}/{v}" if k in merged and k in SCOPES else v
            merged[FROM] = origin
            del inner.metadata_props[:]
            for k, v in merged.items():
                inner.metadata_props.add(key=k, value=v)
        self.copies.append(copy)
        self.nodes_of(copy.node, (*stack, key))
        node.op_type, node.overload = name, ""


def called(proto: onnx.ModelProto) -> list[str]:
    """The model-local functions some node of the model calls (at any depth, from a function too), in words."""
    functions = {_key(f) for f in proto.functions}
    nodes = [*_every_node(proto.graph.node), *(n for f in proto.functions for n in _every_node(f.node))]
    return sorted({words(_key(n)) for n in nodes if _key(n) in functions})


def inline(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with every call of a model-local function inlined (module doc); ``proto`` itself when it has none."""
    if not proto.functions:
        return proto
    import onnx.inliner

    work = onnx.ModelProto()
    work.CopyFrom(proto)
    specializer = _Specializer(work)
    specializer.graph(work.graph, ())
    del work.functions[:]
    work.functions.extend(specializer.copies)
    try:
        inlined = onnx.inliner.inline_local_functions(work)
    except Exception:  # noqa: BLE001 - a function of another opset than the model's: converted, or said below
        try:
            inlined = onnx.inliner.inline_local_functions(work, convert_version=True)
        except Exception as exc:  # noqa: BLE001 - onnx's reason, in one line
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            names = ", ".join(called(proto))
            raise SpecError("model", f"its model-local functions ({names}) cannot be inlined to be read ({reason}): "
                            "the audit does not read what it cannot inline") from None  # fmt: skip
    left = {_key(f) for f in inlined.functions}
    still = [n for n in _every_node(inlined.graph.node) if _key(n) in left]
    if still:
        node = still[0]
        what = words(specializer.original.get(node.op_type, _key(node)))
        raise SpecError("model", f"node {node.name!r} still calls model-local function {what} after inlining: the "
                        "audit does not read it")  # fmt: skip
    del inlined.functions[:]
    return inlined


def _every_node(nodes: object) -> list[onnx.NodeProto]:
    """Every node of ``nodes`` and of the subgraphs they hold, at any depth."""
    out = []
    for node in nodes:  # type: ignore[attr-defined]
        out.append(node)
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                out += _every_node(sub.node)
    return out


def origins(nodes: Iterable[ir.Node]) -> list[str]:
    """The functions ``nodes`` were inlined from (``FROM``), each chain once."""
    return sorted({n.metadata_props[FROM] for n in nodes if FROM in n.metadata_props})


def original_scope(scope: tuple[Step, ...], inlined: ir.Model, original: ir.Model) -> tuple[Step, ...] | None:
    """``scope`` (a path of subgraphs in ``inlined``: ``patterns.Site.scope``) as a path in ``original``, the model
    before its calls were inlined: each level's holder is the same node, found among the nodes that call no function
    (the inliner keeps their order and puts a call's body where the call was). None when a holder came from a function,
    or the two graphs disagree on it.
    """  # noqa: D205
    local = set(original.functions)
    steps: list[Step] = []
    graphs = (inlined.graph, original.graph)
    for index, name, k in scope:
        mine = list(graphs[0])
        holder = mine[index]
        if FROM in holder.metadata_props:
            return None
        rank = sum(FROM not in n.metadata_props for n in mine[:index])
        theirs = [(i, n) for i, n in enumerate(graphs[1]) if (n.domain, n.op_type, n.overload) not in local]
        if rank >= len(theirs):
            return None
        where, same = theirs[rank]
        if (same.op_type, same.name) != (holder.op_type, holder.name) or name not in same.attributes:
            return None
        steps.append((where, name, k))
        graphs = (_held(holder, name, k), _held(same, name, k))
    return tuple(steps)


def _held(node: ir.Node, name: str, k: int) -> ir.Graph:
    attr = node.attributes[name]
    return attr.value if attr.type == ir.AttributeType.GRAPH else list(attr.value)[k]
