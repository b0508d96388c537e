"""Rotations read by use: for every rotation of a query or a key, which tensor multiplies x and which multiplies
rotate(x), found by running the rotation, not by the name of the node that made each tensor.

A decomposed rotation is y = x * c + rotate(x) * s, whatever its form: transformers' ``q * cos + rotate_half(q) *
sin`` (a Concat of a negated half and the other), ropeexport's ``(xa cos - xb sin, xb cos + xa sin)`` of halves or
interleaved pairs, GPT-J's interleaved stack, a partial rotation concatenated with the channels it leaves alone. It
is found from the values a site makes (``Rotation.sources``: a computed site's cos and sin, a gathered site's two
gathered rows), followed through nodes that only reshape, cast or scale them to the ``Mul`` nodes that multiply a
tensor with them; that tensor is traced back through nodes that only move, slice or negate channels to the one x it
comes from (``root``). The Muls of one x, and the nodes combining their products up to the value y that depends on
all of them (``merge``), are the rotation: cut out (x and the two multipliers its inputs) and run in ONNX Runtime on
a random x with the multipliers 1 and 0, then 0 and 1. The multiplier whose 1 gives back x is what multiplies x
(``Rotation.cos``); the other's gives rotate(x), whose form says the pairing (halves (i, i + r/2) or interleaved pairs
(2i, 2i + 1)), the sign ((-x2, x1), or (x2, -x1): a rotation the other way) and how many channels turn.

Each rotation also says its layer (``layers.layer_of`` of its Muls) and its role (``role_of``: q when its output
reaches the left of the q.k product (``patterns.base.is_product``: a MatMul or ONNX Runtime's FusedMatMul) or an
attention operator's query, k when it reaches the right, a present key or an attention operator's key). A rotation
whose x or y cannot be told apart, or whose product is not x and rotate(x) in some order, is not read
(``find_rotations`` leaves it out: the site is then read as its pattern reads it).

Shapes: x [.., d] (any leading axes, d channels; the rotated r of them, r <= d), the multipliers broadcast against
it (cos/sin [b, 1, s, r] in transformers' form, [b, 1, s, r/2] or [b, 1, s, r/2, 1] in ropeexport's).
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from ropeexport.audits.channels import moved, pair_swap
from ropeexport.audits.indexer import feeds_selection
from ropeexport.audits.layers import layer_of
from ropeexport.audits.patterns.base import constant_of, is_constant, is_product

# Nodes a cos/sin passes through to the Mul that uses it: one data input, the rest constants (``computed.forward``);
# a Neg too, which turns the rotation the other way (``Rotation.sign``); and a Concat of one value with itself (the
# halves or pairs duplicated to the rotated width, as graft writes them)
CARRIERS = {"Mul", "Div", "Cast", "Unsqueeze", "Squeeze", "Reshape", "Expand", "Identity", "Transpose", "CastLike",
            "Neg"}  # fmt: skip
# Nodes that pick or place values of one cos/sin (Qwen3.5's multimodal recomposition of its three position axes:
# select, slice, scatter) carry it when every other input is a constant or computed from shapes alone (``_static``)
SELECTS = {"Gather", "Slice", "ScatterElements", "ScatterND"}
# Nodes that only move, slice or negate x's channels (x is traced back through them to its root)
CHANNELS = {"Slice", "Split", "Neg", "Concat", "Reshape", "Unsqueeze", "Squeeze", "Identity"}
# Nodes that combine the products into y (and carry y on: a partial rotation's Concat with its untouched channels)
COMBINE = {"Add", "Sub", "Concat", "Reshape", "Neg", "Identity", "Squeeze", "Unsqueeze"}
# Attention operators whose query (input 0) and key (input 1) a rotation may feed
ATTENTION = {"Attention", "GroupQueryAttention", "MultiHeadAttention", "SparseAttention", "PagedAttention"}
ROLE_DEPTH = 24  # nodes followed from a rotation's output to find what reads it


@dataclass
class Rotation:
    """One rotation read by use (module doc). ``cos`` / ``sin``: the operands of the Muls that multiply x and
    rotate(x); ``sources``: the site values they are carried from (cos's, sin's); ``sign``: +1 for rotate(x) =
    (-x2, x1), -1 for (x2, -x1); ``pairing``: ``half`` or ``interleaved``; ``width``: the channels it turns;
    ``muls``: its Mul nodes; ``entries``: per source, the nodes reading the source on the way to these Muls.
    """  # noqa: D205

    x: ir.Value
    y: ir.Value
    cos: ir.Value
    sin: ir.Value
    sources: tuple[ir.Value, ir.Value]
    sign: int
    pairing: str
    width: int
    channels: int = 0  # d: x's channels (the rotated ones and those it leaves alone)
    muls: list[ir.Node] = field(default_factory=list)
    entries: tuple[list[ir.Node], list[ir.Node]] = field(default_factory=lambda: ([], []))
    layer: int | None = None
    role: str | None = None
    indexer: bool = False  # DeepSeek Sparse Attention's indexer's (``indexer.feeds_selection``), not the attention's

    @property
    def key(self) -> tuple[int, int, int, str]:
        """What rotations read alike: the same two sources in the same places, the same sign and pairing (the
        attention's and the indexer's of one use told apart after: ``indexer.mark``).
        """  # noqa: D205
        return (id(self.sources[0]), id(self.sources[1]), self.sign, self.pairing)


def _carried(sources: Iterable[ir.Value]) -> dict[int, tuple[ir.Value, ir.Node | None, int, ir.Value]]:
    """id(value) -> (the source it is carried from, the first node on the way, -1 where a Neg on the way negates it,
    the value) for every value each source reaches through ``CARRIERS`` (each's other inputs constant).
    """  # noqa: D205
    out: dict[int, tuple[ir.Value, ir.Node | None, int, ir.Value]] = {}
    for source in sources:
        out[id(source)] = (source, None, 1, source)
        stack: list[tuple[ir.Value, ir.Node | None, int]] = [(source, None, 1)]
        while stack:
            value, entry, sign = stack.pop()
            for use in value.uses():
                node = use.node
                doubled = node.op_type == "Concat" and all(v is value for v in node.inputs)  # cat(f, f): halves
                if node.op_type in SELECTS and node.outputs and _selects(node, source, sign, out):
                    pass  # every data input carried from this source, the rest static: a carrier (``SELECTS``)
                elif (node.op_type not in CARRIERS and not doubled) or not node.outputs:
                    continue
                elif not doubled and not all(is_constant(v) for i, v in enumerate(node.inputs) if i != use.idx):
                    continue  # a Mul with a tensor: a product of the rotation, not a carrier
                first = entry if entry is not None else node
                turned = -sign if node.op_type == "Neg" else sign
                if id(node.outputs[0]) not in out:
                    out[id(node.outputs[0])] = (source, first, turned, node.outputs[0])
                    stack.append((node.outputs[0], first, turned))
    return out


def _selects(node: ir.Node, source: ir.Value, sign: int, carried: dict[int, Any]) -> bool:
    """Whether ``node`` (one of ``SELECTS``) only picks or places values carried from ``source`` with ``sign``: every
    input carried so, or static (``_static``), at least its first (the data) carried.
    """  # noqa: D205
    inputs = [v for v in node.inputs if v is not None]
    mine = [id(v) in carried and carried[id(v)][0] is source and carried[id(v)][2] == sign for v in inputs]
    return bool(inputs) and mine[0] and all(m or _static(v) for m, v in zip(mine, inputs, strict=True))


def _static(value: ir.Value, depth: int = 16) -> bool:
    """Whether ``value`` is a constant or computed from constants and tensor shapes alone (an index a scatter
    computes from its operands' shapes), within ``depth`` nodes.
    """  # noqa: D205
    if is_constant(value):
        return True
    producer = value.producer()
    if producer is None or depth == 0:
        return False
    if producer.op_type == "Shape":
        return True
    return all(v is None or _static(v, depth - 1) for v in producer.inputs)


def root(value: ir.Value) -> ir.Value | None:
    """The one tensor ``value`` is computed from by nodes that only move, slice or negate channels (itself when its
    producer is none of them); None when it mixes two.
    """  # noqa: D205
    producer = value.producer()
    if producer is None or (producer.op_type not in CHANNELS and not pair_swap(producer)):
        return value
    data = list(producer.inputs) if producer.op_type == "Concat" else [producer.inputs[0]]
    found = {id(r): r for r in (root(v) for v in data if v is not None) if r is not None}
    if len(found) != 1 or any(v is None for v in data):
        return None
    return next(iter(found.values()))


def _products(carried: dict[int, Any], nodes: Iterable[ir.Node],
              ) -> dict[int, list[tuple[ir.Node, int]]]:  # fmt: skip
    """id(x) -> [(Mul, index of its carried operand)] for every Mul of ``nodes`` multiplying a carried value with a
    tensor traced back to x.
    """  # noqa: D205
    out: dict[int, list[tuple[ir.Node, int]]] = {}
    xs: dict[int, ir.Value] = {}
    for node in nodes:
        if node.op_type != "Mul" or len(node.inputs) != 2 or any(v is None for v in node.inputs):
            continue
        which = [i for i, v in enumerate(node.inputs) if v is not None and id(v) in carried]
        if len(which) != 1:
            continue
        other = node.inputs[1 - which[0]]
        if other is None or is_constant(other):
            continue
        x = root(other)
        if x is None:
            continue
        xs[id(x)] = x
        out.setdefault(id(x), []).append((node, which[0]))
    return out


def _merge(muls: list[ir.Node], x: ir.Value) -> ir.Value | None:
    """The value y combining every product of ``muls`` (module doc), carried on through a Concat with x's own channels
    or a Reshape while it is read by that one node; None when they never meet.
    """  # noqa: D205
    wanted = frozenset(id(m) for m in muls)
    deps: dict[int, frozenset[int]] = {id(m.outputs[0]): frozenset({id(m)}) for m in muls}
    frontier = [m.outputs[0] for m in muls]
    merged = None
    while frontier and merged is None:
        value = frontier.pop(0)
        for use in value.uses():
            node = use.node
            if node.op_type not in COMBINE or not node.outputs:
                continue
            data = list(node.inputs) if node.op_type in ("Add", "Sub", "Concat") else node.inputs[:1]
            if not all(v is not None and (id(v) in deps or _from_x(v, x)) for v in data):
                continue
            joined = frozenset().union(*(deps.get(id(v), frozenset()) for v in data if v is not None))
            out = node.outputs[0]
            if deps.get(id(out)) == joined:
                continue
            deps[id(out)] = joined
            if joined == wanted and out.uses():  # a value nothing reads is no rotation's output
                merged = out
                break
            frontier.append(out)
    if merged is None:
        return None
    while True:  # a partial rotation's untouched channels concatenated back, pairs reshaped back to channels
        uses = list(merged.uses())
        if len(uses) != 1 or uses[0].node.op_type not in ("Concat", "Reshape", "Identity"):
            return merged
        node = uses[0].node
        if node.op_type == "Concat" and not all(v is merged or (v is not None and _from_x(v, x)) for v in node.inputs):
            return merged
        merged = node.outputs[0]


def _from_x(value: ir.Value, x: ir.Value) -> bool:
    """``value`` is x's channels moved, sliced or negated (``root``), or a constant."""
    return is_constant(value) or root(value) is x


def _subgraph(x: ir.Value, ops: tuple[ir.Value, ir.Value], y: ir.Value) -> list[ir.Node] | None:
    """The nodes computing ``y`` from x and the two multipliers ``ops`` (constants and Shape of x allowed), in graph
    order; None when ``y`` reads anything else.
    """  # noqa: D205
    inputs = {id(x), id(ops[0]), id(ops[1])}
    taken: dict[int, ir.Node] = {}
    stack = [y]
    while stack:
        value = stack.pop()
        if id(value) in inputs or value.const_value is not None:
            continue
        node = value.producer()
        if node is None:
            return None  # a graph input other than x: not a rotation of x alone
        if id(node) in taken:
            continue
        if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
            return None  # an If or a Loop in the way: not a rotation cut out whole
        taken[id(node)] = node
        stack.extend(v for v in node.inputs if v is not None)
    made = y.producer()
    graph = made.graph if made is not None else None
    order = {id(n): i for i, n in enumerate(graph)} if graph is not None else {}
    return sorted(taken.values(), key=lambda n: order.get(id(n), 0))


def _width_guesses(x: ir.Value, nodes: list[ir.Node]) -> list[int]:
    """x's channel count: declared, else what the nodes' constants imply (a Split's sizes, a Reshape's last dim or
    last two, a Slice's end, twice a Slice's start); each is tried until the cut-out runs.
    """  # noqa: D205
    guesses: list[int] = []
    if x.shape is not None and len(x.shape) and isinstance(x.shape[-1], int):
        guesses.append(int(x.shape[-1]))
    made = x.producer()
    weight = made.inputs[1] if made is not None and made.op_type == "MatMul" and len(made.inputs) > 1 else None
    if weight is not None and weight.shape is not None and len(weight.shape) and isinstance(weight.shape[-1], int):
        guesses.append(int(weight.shape[-1]))  # x a projection's output (a TorchScript export declares no shapes)
    later: list[int] = []
    for node in nodes:
        consts = [_stored(v) for v in node.inputs[1:]]
        first = consts[0] if consts else None
        if node.op_type == "Split" and first is not None:
            guesses.append(int(np.sum(first)))
        elif node.op_type == "Reshape" and first is not None and first.size >= 2:
            guesses += [int(first[-1]), int(np.prod(first[-2:]))]
        elif node.op_type == "Slice" and len(consts) > 1 and first is not None and consts[1] is not None:
            later += [int(consts[1][0]), 2 * int(first[0])]
    return list(dict.fromkeys(g for g in guesses + later if 0 < g < 1 << 16))


def _stored(value: ir.Value | None) -> np.ndarray | None:
    """A constant's values flattened (``constant_of``), or None."""
    found = constant_of(value)
    return None if found is None else found.reshape(-1)


class _Runner:
    """Runs cut-out rotations in ONNX Runtime, each distinct one once (the layers' rotations are one graph, renamed)."""

    def __init__(self, model: ir.Model) -> None:
        self.opsets = dict(model.opset_imports)
        self.ir_version = model.ir_version
        self.done: dict[bytes, Any] = {}

    def probe(self, x: ir.Value, ops: tuple[ir.Value, ir.Value], y: ir.Value,
              nodes: list[ir.Node]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:  # fmt: skip
        """(x, y with ops 1 and 0, y with ops 0 and 1) of the rotation, x random; None when it does not run."""
        from onnx import helper

        protos, consts = _canonical(x, ops, y, nodes)
        if protos is None:
            return None
        dtype = x.dtype.numpy() if x.dtype is not None else np.float32
        mul_dtype = [(v.dtype.numpy() if v.dtype is not None else dtype) for v in ops]
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        # an undeclared x: [b, h, s, d], else [b, s, d] (one head whose axis is added after x: the indexer's key)
        ranks = [len(x.shape)] if x.shape is not None else [4, 3]
        for rank, width in ((r, w) for w in _width_guesses(x, nodes) for r in ranks):
            dims = [1] * (rank - 1) + [width]
            if x.shape is not None:
                dims = [d if isinstance(d, int) else 2 for d in list(x.shape)[:-1]] + [width]
            inputs = [helper.make_tensor_value_info("x", elem, dims),
                      *(helper.make_tensor_value_info(f"m{i}", helper.np_dtype_to_tensor_dtype(np.dtype(t)), [])
                        for i, t in enumerate(mul_dtype))]  # fmt: skip
            graph = helper.make_graph(protos, "rotation", inputs, [helper.make_tensor_value_info("y", elem, None)],
                                      consts)  # fmt: skip
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in self.opsets.items()])
            model.ir_version = min(self.ir_version or 10, 10)
            key = model.SerializeToString() + str(dims).encode()
            if key not in self.done:
                self.done[key] = _run(model, dims, dtype, mul_dtype)
            if self.done[key] is not None:
                return self.done[key]
        return None


def _run(model: Any, dims: list[int], dtype: Any, mul_dtype: list[Any]) -> tuple[np.ndarray, ...] | None:
    import onnxruntime as ort

    from ropeexport.audits.model import quiet

    x = np.random.default_rng(0).standard_normal(dims).astype(dtype)
    try:
        session = ort.InferenceSession(model.SerializeToString(), quiet(1)[0], providers=["CPUExecutionProvider"])
        one, two = ({"x": x, "m0": np.array(a, mul_dtype[0]), "m1": np.array(b, mul_dtype[1])}
                    for a, b in ((1.0, 0.0), (0.0, 1.0)))  # fmt: skip
        first, second = (np.asarray(session.run(["y"], f, quiet()[1])[0], np.float64) for f in (one, two))
    except Exception:  # noqa: BLE001 - a cut-out that does not run is a rotation not read, nothing more
        return None
    if first.shape != x.shape and first.shape == second.shape and first.size == x.size:
        x = x.reshape(first.shape)  # x before its heads are split off (GPT-J's projection output, [b, s, h * d])
    if first.shape != second.shape or first.shape[:-1] != x.shape[:-1]:
        return None
    return x.astype(np.float64), first, second


def _canonical(x: ir.Value, ops: tuple[ir.Value, ir.Value], y: ir.Value,
               nodes: list[ir.Node]) -> tuple[list[Any] | None, list[Any]]:  # fmt: skip
    """The rotation's nodes as NodeProtos with canonical names (x, m0, m1, y, v0, v1, ..) and its constants."""
    names = {id(x): "x", id(ops[0]): "m0", id(ops[1]): "m1", id(y): "y"}
    consts: list[Any] = []
    protos: list[Any] = []
    for node in nodes:
        for value in node.inputs:
            if value is None or id(value) in names:
                continue
            if value.const_value is None:
                continue  # made by an earlier node of the cut-out: named when its producer is
            if value.const_value.size > 1 << 16:
                return None, []  # a weight, not a rotation's constant
            names[id(value)] = f"c{len(consts)}"
            consts.append(ir.serde.serialize_tensor(ir.tensor(value.const_value.numpy(), name=names[id(value)])))
        for value in node.outputs:
            names.setdefault(id(value), f"v{len(names)}")
        proto = ir.serde.serialize_node(node)
        proto.name = ""
        del proto.metadata_props[:]
        proto.input[:] = [names.get(id(v), "") if v is not None else "" for v in node.inputs]
        proto.output[:] = [names[id(v)] for v in node.outputs]
        protos.append(proto)
    return protos, consts


def _form(x: np.ndarray, rotated: np.ndarray) -> tuple[str, int, int, int] | None:
    """(pairing, sign, first channel, width) of ``rotated`` as rotate(x) of x's channels first .. first + width - 1,
    the rest untouched; None when it is no rotation of x.
    """  # noqa: D205
    changed = np.flatnonzero(np.any(~np.isclose(rotated, x[..., : rotated.shape[-1]], rtol=1e-3, atol=1e-6),
                                    axis=tuple(range(rotated.ndim - 1))))  # fmt: skip
    if not len(changed):
        return None
    first, width = int(changed[0]), int(changed[-1] - changed[0] + 1)
    if width % 2:
        return None
    z, got = x[..., first : first + width], rotated[..., first : first + width]
    half = width // 2
    forms = {("half", 1): np.concatenate([-z[..., half:], z[..., :half]], -1),
             ("half", -1): np.concatenate([z[..., half:], -z[..., :half]], -1),
             ("interleaved", 1): np.stack([-z[..., 1::2], z[..., 0::2]], -1).reshape(z.shape),
             ("interleaved", -1): np.stack([z[..., 1::2], -z[..., 0::2]], -1).reshape(z.shape)}  # fmt: skip
    for (pairing, sign), expected in forms.items():
        if np.allclose(got, expected, rtol=1e-3, atol=1e-6):
            return pairing, sign, first, width
    return None


def find_rotations(model: ir.Model, sources: list[ir.Value]) -> list[Rotation]:
    """Every rotation of ``model`` (main graph and subgraphs) whose multipliers are carried from ``sources`` (the
    sites' values), read by running it (module doc).
    """  # noqa: D205
    carried = _carried(sources)
    runner = _Runner(model)
    out: list[Rotation] = []
    for graph in _all_graphs(model.graph):
        for muls in _products(carried, list(graph)).values():
            nodes = [m for m, _ in muls]
            ops_by_value = {id(m.inputs[i]): m.inputs[i] for m, i in muls}
            if len(ops_by_value) != 2:
                continue  # not one x times two tensors
            x = root(next(m.inputs[1 - i] for m, i in muls))  # type: ignore[arg-type]
            if x is None:
                continue
            y = _merge(nodes, x)
            if y is None:
                continue
            ops = tuple(ops_by_value.values())
            cut = _subgraph(x, ops, y)  # type: ignore[arg-type]
            probed = None if cut is None else runner.probe(x, ops, y, cut)  # type: ignore[arg-type]
            read = None if probed is None else _read(*probed)
            if read is None:
                continue
            first_is_cos, pairing, sign, width = read
            cos, sin = ops if first_is_cos else ops[::-1]
            assert cos is not None and sin is not None, "a Mul's operands are values"
            (cos_src, _, cos_sign, _), (sin_src, _, sin_sign, _) = carried[id(cos)], carried[id(sin)]
            if cos_sign != 1:
                continue  # cos negated on its way: no rotation of x (minus one), not read
            rotation = Rotation(x, y, cos, sin, (cos_src, sin_src), sign * sin_sign, pairing, width,
                                probed[0].shape[-1], nodes)  # type: ignore[index]
            for (m, i) in muls:
                entry = carried[id(m.inputs[i])][1] or m
                rotation.entries[0 if m.inputs[i] is cos else 1].append(entry)
            layers = {layer_of(n.name or "", n.metadata_props) for n in nodes} - {None}
            rotation.layer = next(iter(layers)) if len(layers) == 1 else None
            rotation.role = role_of(y)
            rotation.indexer = feeds_selection(y)
            out.append(rotation)
    return out


def _read(x: np.ndarray, first: np.ndarray, second: np.ndarray) -> tuple[bool, str, int, int] | None:
    """(the first multiplier is cos, pairing, sign, width) from the two probes, or None. A rotation whose output
    moves x's channels (transformers' DeepSeek V3 rotates interleaved pairs and writes them as halves: q and k moved
    alike, q.k unchanged) is read with its channels put back where x has them.
    """  # noqa: D205
    width = first.shape[-1]
    same = [np.allclose(p, x[..., :width], rtol=1e-3, atol=1e-6) for p in (first, second)]
    if same[0] == same[1]:
        back = next((o for o in (moved(x[..., :width], p) for p in (first, second)) if o is not None), None)
        if back is None:
            return None
        first, second = first[..., back], second[..., back]
        same = [np.allclose(p, x[..., :width], rtol=1e-3, atol=1e-6) for p in (first, second)]
        if same[0] == same[1]:
            return None
    form = _form(x, second if same[0] else first)
    if form is None:
        return None
    pairing, sign, _, turned = form
    return same[0], pairing, sign, turned


def _all_graphs(graph: ir.Graph) -> Iterable[ir.Graph]:
    yield graph
    for node in graph:
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                yield from _all_graphs(attr.value)
            elif attr.type == ir.AttributeType.GRAPHS:
                for sub in attr.value:
                    yield from _all_graphs(sub)


def role_of(value: ir.Value) -> str | None:
    """``q`` or ``k``: what a rotated value becomes, read from what reads it (module doc); None when not told."""
    seen: set[int] = set()
    frontier = [value]
    for _ in range(ROLE_DEPTH):
        following: list[ir.Value] = []
        for current in frontier:
            if current.is_graph_output() and "key" in (current.name or "").lower():
                return "k"
            for use in current.uses():
                node = use.node
                if id(node) in seen:
                    continue
                seen.add(id(node))
                if is_product(node):  # a FusedMatMul's transposes keep its sides (``is_product``)
                    return "q" if use.idx == 0 else "k"
                if node.op_type in ATTENTION:
                    return {0: "q", 1: "k"}.get(use.idx)
                following.extend(node.outputs)
        frontier = following
        if not frontier:
            break
    return None


def reader_roles(node: ir.Node) -> tuple[str, ...]:
    """The roles of a fused reader's rotation: a GroupQueryAttention rotates its query and key; a RotaryEmbedding
    what its output becomes (``role_of``).
    """  # noqa: D205
    if node.op_type == "GroupQueryAttention":
        return ("q", "k")
    role = role_of(node.outputs[0]) if node.outputs else None
    return (role,) if role else ()
