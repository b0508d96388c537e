"""Any artifact as a piece of a bigger graph: its nodes called inside another graph, its tables shared.

Every family's artifact is a graph with a contract (positions and tensors in, tensors out; its kind's docstring).
``call`` inlines that graph into a ``GraphBuilder``: the piece's inputs are wired to values the bigger graph already
has, its node and value names get a prefix (so one piece can be called once per layer), its range guards come along
(a position outside [0, max_positions) still fails inside the bigger graph), and its initializers are shared by
content: calling a RoPE piece in 32 layers stores its cos/sin tables once. This is how model-level graphs (an
attention block, a decoder) compose the families instead of copying them.

Shapes are the piece's contract; ``call`` checks names, not shapes (the bigger graph's own inputs declare those).
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Mapping

import onnx
from onnx import helper

from ropeexport.errors import SpecError
from ropeexport.graph.onnx_io import GraphBuilder

_INDEX: weakref.WeakKeyDictionary[GraphBuilder, tuple[int, dict[str, str]]] = weakref.WeakKeyDictionary()


def _constants(g: GraphBuilder) -> dict[str, str]:
    """{content digest: initializer name} of ``g``, hashing only the initializers added since the last call.

    A decoder calls a piece once per layer: rehashing every table each time would grow with the square of the layers.
    """
    counted, index = _INDEX.get(g, (0, {}))
    for tensor in g.initializers[counted:]:
        index.setdefault(_content(tensor), tensor.name)
    _INDEX[g] = (len(g.initializers), index)
    return index


def _content(tensor: onnx.TensorProto) -> str:
    """A digest of a constant's type, shape and values (not its name)."""
    if tensor.HasField("raw_data") and not tensor.external_data:
        # The usual case (numpy_helper writes raw_data): hash the bytes where they are; a 64 MiB table is not copied.
        header = f"{tensor.data_type}:{list(tensor.dims)}:".encode()
        return hashlib.sha256(header + tensor.raw_data).hexdigest()
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    copy.name = ""
    return hashlib.sha256(copy.SerializeToString()).hexdigest()


def call(
    g: GraphBuilder, piece: onnx.ModelProto | onnx.GraphProto, inputs: Mapping[str, str], prefix: str
) -> dict[str, str]:
    """Inline ``piece`` into ``g``, its inputs read from ``inputs`` ({piece input: value in g}); its outputs by name.

    Every piece input must be given (an unknown or missing name is a SpecError naming it). ``prefix`` (``layer3/``)
    starts every node and value name the piece adds; an initializer equal in type, shape and values to one ``g``
    already holds is shared, others are added under the prefix. The model ``g`` ends up in must import the piece's
    opsets (``opset_imports(piece)``).
    """
    graph = piece.graph if isinstance(piece, onnx.ModelProto) else piece
    wanted = [i.name for i in graph.input]
    missing = [n for n in wanted if n not in inputs]
    unknown = [n for n in inputs if n not in wanted]
    if missing or unknown:
        name = (missing or unknown)[0]
        raise SpecError("inputs", f"{name!r} is {'not given' if missing else 'not an input of the piece'}; "
                        f"the piece's inputs: {', '.join(wanted)}")  # fmt: skip
    names: dict[str, str] = {n: inputs[n] for n in wanted}
    made = {o for node in g.nodes for o in node.output if o}
    clash = next((f"{prefix}{o}" for node in graph.node for o in node.output if f"{prefix}{o}" in made), None)
    if clash is not None:  # one prefix per call: a second call under the same one would redefine its values
        raise SpecError("prefix", f"{prefix!r} was used already: {clash!r} is defined twice; give each call its own")
    held = _constants(g)
    taken = {t.name for t in g.initializers}
    for tensor in graph.initializer:
        content = _content(tensor)
        if content in held:  # the same constant (a table, an axis list): stored once, whoever added it
            names[tensor.name] = held[content]
            continue
        copy = onnx.TensorProto()
        copy.CopyFrom(tensor)
        copy.name = f"{prefix}{tensor.name}"
        if copy.name in taken:
            raise SpecError("prefix", f"{prefix!r} was used already for another piece: {copy.name!r} differs")
        g.add_initializer(copy)  # to g's data file at once when g streams its weights
        held[content], names[tensor.name] = copy.name, copy.name
        _INDEX[g] = (len(g.initializers), held)
        taken.add(copy.name)
    for node in graph.node:
        g.nodes.append(_renamed(node, names, prefix))
    return {o.name: names[o.name] for o in graph.output}


def _renamed(node: onnx.NodeProto, names: dict[str, str], prefix: str) -> onnx.NodeProto:
    """A copy of ``node`` reading renamed values, writing prefixed ones (recorded in ``names``), subgraphs too."""
    out = onnx.NodeProto()
    out.CopyFrom(node)
    out.name = f"{prefix}{node.name}" if node.name else ""
    del out.input[:]
    out.input.extend(names.get(i, i) if i else "" for i in node.input)
    del out.output[:]
    for o in node.output:
        if o:
            names[o] = f"{prefix}{o}"
        out.output.append(names[o] if o else "")
    for attribute in out.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            _rename_subgraph(attribute.g, dict(names), prefix)
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            for sub in attribute.graphs:
                _rename_subgraph(sub, dict(names), prefix)
    return out


def _rename_subgraph(graph: onnx.GraphProto, names: dict[str, str], prefix: str) -> None:
    """Rename a branch in place: its own values get the prefix, outer values it reads follow ``names``."""
    for value in graph.input:
        names[value.name] = f"{prefix}{value.name}"
        value.name = names[value.name]
    for tensor in graph.initializer:
        names[tensor.name] = f"{prefix}{tensor.name}"
        tensor.name = names[tensor.name]
    nodes = [_renamed(node, names, prefix) for node in graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    for value in graph.output:
        value.name = names.get(value.name, value.name)
    graph.name = f"{prefix}{graph.name}"


def opset_imports(piece: onnx.ModelProto) -> dict[str, int]:
    """The opsets a model calling ``piece`` must import, by domain ("" for the ONNX domain)."""
    return {o.domain: o.version for o in piece.opset_import}


def model_around(
    g: GraphBuilder,
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    opsets: Mapping[str, int],
    name: str = "composed",
) -> onnx.ModelProto:
    """A model of ``g``'s nodes with the given inputs and outputs, at the lowest IR version its opsets need."""
    graph = helper.make_graph(g.nodes, name, inputs, outputs, g.initializers)
    imports = [helper.make_opsetid(d, v) for d, v in opsets.items()]
    model = helper.make_model(graph, opset_imports=imports, producer_name="ropeexport")
    model.ir_version = helper.find_min_ir_version_for(imports, ignore_unknown=True)
    return model
