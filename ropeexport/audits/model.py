"""A foreign model file read without trusting it: external data checked first, ONNX Runtime's refusal in one line.

``load_model(path)``: the protobuf is read without its external data; then every tensor anywhere in the model is
checked: initializers and sparse initializers of the main graph and of every subgraph (If branches, Loop and Scan
bodies, at any depth), tensor attributes of every node (a Constant's ``value`` or ``sparse_value``, ..) and the nodes of
model-local functions. External data must name a file inside the model's folder (no ``..``, no absolute path, no link
out), that file must exist, and its offset and length must fit it with length = the product of the dims x the item
size. Anything else is a ``SpecError`` naming the tensor, before anything is read; every call of a model-local
function is then inlined for reading (``audits.functions``: what runs inside one is read as the rest); onnx-ir then
holds the model, its tensors read lazily from the model's folder.

``refusal(path)``: whether ONNX Runtime loads the model at all (an opset it does not know, a cycle, an operator of an
unknown domain, an initializer whose bytes are not what its dims claim, shapes its operators refuse), in ORT's own
words. Checked on the graph without its large weights (a main-graph initializer over 1 MiB whose bytes fit its dims
becomes an input of the same type and shape; every smaller tensor, and any whose bytes do not fit its dims, is
handed over as stored, so that ORT's shape inference reads the shapes, scales and tables it checks; larger tensors
elsewhere become zeros): cheap for a model of any size; only when that is refused is the model itself loaded, so
that a kernel asking for a constant input cannot be mistaken for a refusal. A check ORT makes only on a large
weight's values, at load, is not made here.

``materialize(model)``: every external tensor read into memory. A model handed to ORT as bytes has no folder, and ORT
would read external data relative to the working directory: nothing is handed over before this.

``Initializers(proto, folder)``: the main graph's initializers of a model read without its external data, each read
from its file when asked for (checked as ``load_model`` checks it). ``write_model(model, path)``: a model whose
tensors lie in another model's external data written with its own, copied block by block: what the audit, graft and
the graft's proof hold of a model is its graph and one tensor at a time, never all its weights.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir

from ropeexport.errors import SpecError
from ropeexport.graph.initializers import EXTERNAL, check_external, nbytes


def _tensors(graph: onnx.GraphProto, where: str) -> Iterator[tuple[onnx.TensorProto, str]]:
    """Every TensorProto of ``graph`` and its subgraphs, with words saying where it sits."""
    for tensor in graph.initializer:
        yield tensor, f"initializer {tensor.name!r}{where}"
    for sparse in graph.sparse_initializer:
        for part in (sparse.values, sparse.indices):
            yield part, f"sparse initializer {sparse.values.name!r}{where}"
    yield from _node_tensors(graph.node, where)


def _node_tensors(nodes: Any, where: str) -> Iterator[tuple[onnx.TensorProto, str]]:
    for node in nodes:
        name = node.name or (node.output[0] if node.output else "")
        label = f"{node.op_type} node {name!r}"
        for attr in node.attribute:
            what = f"attribute {attr.name!r} of the {label}{where}"
            if attr.HasField("t"):
                yield attr.t, what
            for tensor in attr.tensors:
                yield tensor, what
            sparse = [attr.sparse_tensor] if attr.HasField("sparse_tensor") else []
            for item in [*sparse, *attr.sparse_tensors]:
                yield item.values, what
                yield item.indices, what
            inner = f" inside {node.op_type} {node.name!r} {attr.name}"
            if attr.HasField("g"):
                yield from _tensors(attr.g, inner)
            for sub in attr.graphs:
                yield from _tensors(sub, inner)


def _every_tensor(proto: onnx.ModelProto) -> list[tuple[onnx.TensorProto, str]]:
    """Every TensorProto of the model: its graphs' (``_tensors``) and its functions' nodes'."""
    functions = ((f.node, f" in function {f.domain}:{f.name}") for f in proto.functions)
    return [*_tensors(proto.graph, ""), *(t for nodes, where in functions for t in _node_tensors(nodes, where))]


def external_files(path: Path) -> set[str]:
    """The names of the files ``path``'s tensors keep their external data in (relative to its folder, as written)."""
    proto = onnx.load(str(path), load_external_data=False)
    return {entry.value for tensor, _ in _every_tensor(proto) if tensor.data_location == EXTERNAL
            for entry in tensor.external_data if entry.key == "location"}  # fmt: skip


def load_model(path: Path, inline: bool = True) -> ir.Model:
    """``path`` as onnx-ir holds it, every tensor's external data checked first (module doc); with ``inline``, every
    call of a model-local function inlined for reading (``audits.functions``).
    """  # noqa: D205
    if not path.is_file():
        raise SpecError("model", f"{str(path)!r} is not a file")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf's and onnx's errors for a file that is not ONNX
        raise SpecError("model", f"{str(path)!r} is not an ONNX model ({_first_line(exc)})") from None
    folder = path.resolve().parent
    for tensor, what in _every_tensor(proto):
        if tensor.data_location == EXTERNAL:
            check_external(tensor, what, folder)
    if inline:
        from ropeexport.audits.functions import inline as inline_functions

        proto = inline_functions(proto)
    try:
        model = ir.serde.deserialize_model(proto)
    except Exception as exc:  # onnx-ir refuses what it cannot hold (sparse attributes, ..)
        raise SpecError("model", f"{str(path)!r} cannot be read by onnx-ir ({_first_line(exc)})") from None
    ir.external_data.set_base_dir(model.graph, folder)
    return model


def materialize(model: ir.Model) -> None:
    """Every external tensor of ``model`` (initializers and attributes, every graph) read into memory (module doc)."""
    for graph in (model.graph, *model.graph.subgraphs()):
        for value in graph.initializers.values():
            if isinstance(value.const_value, ir.ExternalTensor):
                value.const_value = ir.tensor(value.const_value.numpy(), name=value.name)
    functions = [node for f in model.functions.values() for node in f]
    for node in [*ir.traversal.RecursiveGraphIterator(model.graph), *functions]:
        for name, attr in list(node.attributes.items()):
            if attr.type == ir.AttributeType.TENSOR and isinstance(attr.value, ir.ExternalTensor):
                node.attributes[name] = ir.AttrTensor(name, ir.tensor(attr.value.numpy(), name=attr.value.name))
            elif attr.type == ir.AttributeType.TENSORS and any(isinstance(t, ir.ExternalTensor) for t in attr.value):
                node.attributes[name] = ir.AttrTensors(name, [ir.tensor(t.numpy(), name=t.name) for t in attr.value])


COPY_BLOCK = 64 * 2**20  # bytes of a tensor copied at once from one data file to another


def write_model(model: ir.Model, path: Path) -> list[str]:
    """``model`` written to ``path`` and ``path.name + ".data"`` (the file names), in onnx's external-data layout
    (``graph.onnx_io.ExternalData``): a tensor still in its source's external data (``ir.ExternalTensor``, as
    ``load_model`` reads it) copied in blocks of ``COPY_BLOCK`` bytes, one in memory written as it is. A tensor of a
    node attribute kept in external data is written inline (a Constant's: tables, never weights).
    """  # noqa: D205
    from ropeexport.graph.onnx_io import ExternalData

    sources: dict[tuple[str, str], tuple[Path, int, int]] = {}  # (graph, initializer) -> (file, offset, length)
    for where, graph in _graphs(model.graph, ""):
        for value in graph.initializers.values():
            tensor = value.const_value
            if isinstance(tensor, ir.ExternalTensor):
                sources[where, value.name or ""] = (Path(tensor.path), tensor.offset or 0, tensor.nbytes)
    _inline_attributes(model)
    proto = ir.serde.serialize_model(model)
    data = path.with_name(f"{path.name}.data")
    with ExternalData(data) as sink:
        for where, graph_proto in _graph_protos(proto.graph, ""):  # onnx's order (``onnx_io._initializers``)
            for tensor in graph_proto.initializer:
                source = sources.get((where, tensor.name))
                if source is None:
                    sink.adopt(tensor)
                    continue
                file, offset, length = source
                del tensor.external_data[:]
                tensor.data_location = onnx.TensorProto.DEFAULT
                if not sink.takes(length):  # small: inline, as onnx would keep it
                    with open(file, "rb") as f:
                        f.seek(offset)
                        tensor.raw_data = f.read(length)
                    continue
                sink.copy(tensor, file, offset, length, COPY_BLOCK)
        sink.finish(proto)
    onnx.save_model(proto, path)
    return [path.name, data.name]


def _graphs(graph: ir.Graph, where: str) -> Iterator[tuple[str, ir.Graph]]:
    """(path, graph) of ``graph`` and its subgraphs, depth first in node order (``_graph_protos``' paths)."""
    yield where, graph
    for index, node in enumerate(graph):
        for name, attr in node.attributes.items():
            held = [attr.value] if attr.type == ir.AttributeType.GRAPH else []
            held = list(attr.value) if attr.type == ir.AttributeType.GRAPHS else held
            for k, sub in enumerate(held):
                yield from _graphs(sub, f"{where}/{index}.{name}.{k}")


def _graph_protos(graph: onnx.GraphProto, where: str) -> Iterator[tuple[str, onnx.GraphProto]]:
    """(path, graph) of ``graph`` and its subgraphs, as ``_graphs`` walks the model they were serialized from."""
    yield where, graph
    for index, node in enumerate(graph.node):
        for attr in node.attribute:
            held = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else []
            held = list(attr.graphs) if attr.type == onnx.AttributeProto.GRAPHS else held
            for k, sub in enumerate(held):
                yield from _graph_protos(sub, f"{where}/{index}.{attr.name}.{k}")


def _inline_attributes(model: ir.Model) -> None:
    """Every node attribute's tensor kept in external data read into memory (``materialize``'s, attributes only)."""
    functions = [node for f in model.functions.values() for node in f]
    for node in [*ir.traversal.RecursiveGraphIterator(model.graph), *functions]:
        for name, attr in list(node.attributes.items()):
            if attr.type == ir.AttributeType.TENSOR and isinstance(attr.value, ir.ExternalTensor):
                node.attributes[name] = ir.AttrTensor(name, ir.tensor(attr.value.numpy().copy(), name=attr.value.name))
            elif attr.type == ir.AttributeType.TENSORS and any(isinstance(t, ir.ExternalTensor) for t in attr.value):
                node.attributes[name] = ir.AttrTensors(name, [ir.tensor(t.numpy().copy(), name=t.name)
                                                               for t in attr.value])  # fmt: skip


def quiet(threads: int | None = None) -> tuple[Any, Any]:
    """ORT session and run options that log nothing: what ORT refuses is said once, in ropeexport's one line."""
    import onnxruntime as ort

    options, run = ort.SessionOptions(), ort.RunOptions()
    options.log_severity_level = run.log_severity_level = 4
    if threads is not None:
        options.intra_op_num_threads = threads
    return options, run


def refusal(path: Path) -> str | None:
    """ONNX Runtime's reason for not loading the model at ``path``, or None (module doc)."""
    import onnxruntime as ort

    options = quiet()[0]
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        ort.InferenceSession(_skeleton(path).SerializeToString(), options, providers=["CPUExecutionProvider"])
        return None
    except Exception:  # noqa: BLE001 - the skeleton may lack a constant a kernel wants: ask the model itself
        pass
    try:
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return None
    except Exception as exc:  # noqa: BLE001 - ORT's own words are the answer
        return ort_reason(exc)


SKELETON_BYTES = 1 << 20  # a tensor up to this size is handed to ORT as stored in ``refusal``'s skeleton


def _skeleton(path: Path) -> onnx.ModelProto:
    """The model without its weights: each main-graph initializer over ``SKELETON_BYTES`` whose bytes fit its dims a
    typed input of its shape; every other tensor as stored (shapes, scales and zero points, small tables; a tensor
    whose bytes do not fit its dims: what ORT refuses to load), external ones up to that size read in, larger ones
    inside subgraphs, attributes and functions zeros of their size.
    """  # noqa: D205
    proto = onnx.load(str(path), load_external_data=False)
    folder = path.resolve().parent
    graph = proto.graph
    declared = {i.name for i in graph.input}
    kept = []
    for tensor in graph.initializer:
        if nbytes(tensor) is None or (nbytes(tensor) or 0) <= SKELETON_BYTES or not _fits(tensor):
            kept.append(tensor)
        elif tensor.name not in declared:
            graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    held = [onnx.TensorProto() for _ in kept]
    for copy, tensor in zip(held, kept, strict=True):
        copy.CopyFrom(tensor)
    del graph.initializer[:]
    graph.initializer.extend(held)
    for tensor, what in _every_tensor(proto):
        if tensor.data_location != EXTERNAL:
            continue
        if (nbytes(tensor) or 0) <= SKELETON_BYTES:
            check_external(tensor, what, folder)  # load_model has; a caller that did not is not read outside
            onnx.external_data_helper.load_external_data_for_tensor(tensor, str(folder))
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT
            continue
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT
        tensor.raw_data = bytes(nbytes(tensor) or 0)
    return proto


def _fits(tensor: onnx.TensorProto) -> bool:
    """The bytes a tensor holds are those its dims and type take (external data: ``_check_external`` says so)."""
    if tensor.data_location == EXTERNAL:
        return True
    if tensor.HasField("raw_data"):
        return len(tensor.raw_data) == nbytes(tensor)
    typed = (tensor.float_data, tensor.int32_data, tensor.int64_data, tensor.double_data, tensor.uint64_data)
    return sum(len(field) for field in typed) == math.prod(tensor.dims)


def ort_reason(exc: BaseException) -> str:
    """ONNX Runtime's message in one line: its status prefix and C++ source location dropped."""
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", _first_line(exc))
    text = re.sub(r"Non-zero status code returned while running (\w+) node\. Name:'([^']*)' Status Message: ",
                  lambda m: f"{m[1]} {m[2]!r}: " if m[2] else f"{m[1]}: ", text)  # fmt: skip
    while (start := text.find("/onnxruntime_src/")) >= 0:  # "/onnxruntime_src/..h:46 void f(a, b) " before words
        depth, end = 0, text.find("(", start)
        while 0 <= end < len(text):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
            end += 1
        if end < 0 or end >= len(text):
            break
        text = f"{text[:start].rstrip()} {text[end + 1 :].lstrip()}".strip()
    return text if len(text) <= 300 else text[:297] + "..."


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
