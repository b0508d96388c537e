"""Small helpers to build ONNX graphs with onnx.helper and write them deterministically."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ropeexport.graph.guard import add_position_guards
from ropeexport.version import __version__

DATA_FILE = "model.onnx.data"
# Tables go to an external data file once they pass this size: protobuf caps a model at 2 GiB, and a small
# model stays one self-contained file.
EXTERNAL_DATA_THRESHOLD = 64 * 2**20
# onnx's rule for which tensors go to the data file (``size_threshold=1024`` on ``sys.getsizeof(raw_data)``, which
# counts the bytes object's header): kept exactly, so a streamed model is laid out as ``onnx.save_model`` lays it out.
ONNX_SIZE_THRESHOLD = 1024
_BYTES_HEADER = sys.getsizeof(b"")


class ExternalData:
    """A model's data file written as its initializers are made: each large tensor's bytes go to the end of the file
    at once and the graph keeps only its name, type, shape and place (``location``, ``offset``, ``length``).

    The layout is ``onnx.save_model(..., all_tensors_to_one_file=True, size_threshold=1024)``'s: tensors in graph
    order, back to back, no padding, the same tensors inline. A decoder's weights so pass through memory one tensor
    at a time (``decoder.export.write_decoder``); ``finish`` moves what is still inline and large (constants added
    after the weights) and checks the order.
    """  # noqa: D205

    def __init__(self, path: Path) -> None:
        self.path = path
        self.location = path.name  # relative to the model file, which sits beside it
        self._file = open(path, "xb")  # noqa: SIM115 (closed by close(), the build's context manager)
        self._end = 0

    def __enter__(self) -> ExternalData:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush and close the file (a write error such as ENOSPC surfaces here or at the write)."""
        if not self._file.closed:
            self._file.close()

    @staticmethod
    def takes(nbytes: int) -> bool:
        """True when a tensor of ``nbytes`` raw bytes goes to the data file (onnx's rule)."""
        return _BYTES_HEADER + nbytes >= ONNX_SIZE_THRESHOLD

    def _place(self, tensor: TensorProto, data: memoryview | bytes) -> TensorProto:
        """Write ``data`` at the end of the file and point ``tensor`` (no raw bytes) at it."""
        self._file.write(data)
        return self._point(tensor, len(data))

    def _point(self, tensor: TensorProto, length: int) -> TensorProto:
        """``tensor`` pointed at the ``length`` bytes just written at the end of the file."""
        offset = self._end
        self._end += length
        tensor.data_location = TensorProto.EXTERNAL
        del tensor.external_data[:]
        for key, value in (("location", self.location), ("offset", str(offset)), ("length", str(length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        return tensor

    def array(self, name: str, array: np.ndarray) -> TensorProto:
        """The initializer ``numpy_helper.from_array(array, name)`` makes, its bytes written here, not held."""
        array = _contiguous(array)
        if array.dtype.byteorder == ">" or array.dtype == object:  # what from_array converts: let it
            return self.adopt(numpy_helper.from_array(array, name))
        tensor = TensorProto()
        tensor.name = name
        tensor.dims.extend(array.shape)
        tensor.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        return self._place(tensor, array.reshape(-1).view(np.uint8).data)

    def copy(self, tensor: TensorProto, source: Path, offset: int, length: int, block: int) -> TensorProto:
        """``tensor`` (no raw bytes) pointed at ``length`` bytes copied here from ``source`` at ``offset``, ``block``
        bytes at a time (another model's data file: nothing of it is held).
        """  # noqa: D205
        with open(source, "rb") as f:
            f.seek(offset)
            left = length
            while left:
                chunk = f.read(min(block, left))
                if not chunk:
                    raise ValueError(f"{source.name} ends before the {length} bytes of {tensor.name!r}")
                self._file.write(chunk)
                left -= len(chunk)
        return self._point(tensor, length)

    def adopt(self, tensor: TensorProto) -> TensorProto:
        """``tensor`` with its raw bytes moved here (in place; a tensor without raw bytes is left as it is)."""
        if not tensor.HasField("raw_data") or not self.takes(len(tensor.raw_data)):
            return tensor
        data = tensor.raw_data
        tensor.ClearField("raw_data")
        return self._place(tensor, data)

    def finish(self, model: onnx.ModelProto) -> None:
        """Move the large tensors still inline (in onnx's order: after every one already here) and close the file;
        ValueError when the tensors already written are not in graph order (the file would not be onnx's layout).
        """  # noqa: D205
        seen = 0
        for tensor in _initializers(model.graph):
            if tensor.data_location == TensorProto.EXTERNAL:
                place = {e.key: e.value for e in tensor.external_data}
                if place.get("location") != self.location or int(place.get("offset", -1)) != seen:
                    raise ValueError(f"initializer {tensor.name!r} is not where onnx would write it")
                seen += int(place["length"])
            elif seen == self._end:
                self.adopt(tensor)
                seen = self._end
            elif tensor.HasField("raw_data") and self.takes(len(tensor.raw_data)):
                raise ValueError(f"initializer {tensor.name!r} would come before data already written")
        if seen != self._end:
            raise ValueError(f"{self._end - seen} bytes of {self.location} are read by no initializer")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.close()


def _contiguous(array: np.ndarray) -> np.ndarray:
    """``array`` in C order. A transposed view (a checkpoint's [out, in] weight read as [in, out]) is copied in blocks
    of 64 of its source's rows: numpy's own copy walks the source a whole row apart per element, three times slower
    on a 8192 x 2048 weight (0.20 s against 0.06 s here).
    """  # noqa: D205
    if array.flags.c_contiguous or array.ndim != 2 or not array.T.flags.c_contiguous:
        return np.ascontiguousarray(array)
    source, out = array.T, np.empty(array.shape, array.dtype)
    for start in range(0, source.shape[0], 64):
        out[:, start : start + 64] = source[start : start + 64].T
    return out


def _initializers(graph: onnx.GraphProto) -> Iterator[TensorProto]:
    """Every initializer in onnx's external-data order: the graph's, then each node's subgraphs', depth first."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _initializers(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    yield from _initializers(sub)


class GraphBuilder:
    """Collects nodes and initializers; names every node and intermediate value deterministically.

    ``sink``: where large initializers go as they are added (``ExternalData``: a model too large to hold); None keeps
    them in the graph.
    """

    def __init__(self, prefix: str = "", sink: ExternalData | None = None) -> None:
        self.prefix = prefix
        self.sink = sink
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0
        self._shared: dict[str, tuple[str, np.ndarray]] = {}

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, name: str | None = None, **attrs: Any) -> Any:
        """Append a node; return its output name (or a list of names when ``n_out > 1``)."""
        self._count += 1
        base = name or f"{self.prefix}{op_type.lower()}_{self._count}"
        outputs = [base] if n_out == 1 else [f"{base}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=f"{base}_node", **attrs))
        return outputs[0] if n_out == 1 else outputs

    def name_output(self, value: str, name: str) -> None:
        """Make ``value`` available as ``name``: rename its producer's output (no copy) when nothing else reads it.

        An Identity in front of a graph output is a full copy in ONNX Runtime, which memory-bound graphs cannot
        afford; it remains only when the value is an input, an initializer or read by another node.
        """
        producer = next((n for n in self.nodes if value in n.output), None)
        consumed = any(value in n.input for n in self.nodes)
        if producer is None or consumed:
            self.op("Identity", [value], name=name)
            return
        producer.output[list(producer.output).index(value)] = name

    def const(self, name: str, array: np.ndarray) -> str:
        """Add an initializer and return its name (its bytes written to the sink at once when it has one)."""
        array, full = np.asarray(array), f"{self.prefix}{name}"
        if self.sink is not None and ExternalData.takes(array.nbytes):
            self.initializers.append(self.sink.array(full, array))
        else:
            self.initializers.append(numpy_helper.from_array(array, full))
        return full

    def add_initializer(self, tensor: onnx.TensorProto) -> None:
        """Append ``tensor`` (moved to the sink when it has one and the tensor is large)."""
        self.initializers.append(tensor if self.sink is None else self.sink.adopt(tensor))

    def shared_const(self, name: str, array: np.ndarray) -> str:
        """An initializer added on the first call under ``name``; later calls with that name reuse it (a constant a
        repeated sub-graph needs, like an activation's coefficients in every layer). Other values under a name
        already used get a name of their own (``name_2``, ...).
        """  # noqa: D205
        array = np.asarray(array)
        key, count = name, 1
        while key in self._shared:
            held = self._shared[key]
            if held[1].dtype == array.dtype and np.array_equal(held[1], array):
                return held[0]
            count += 1  # the same name with other values (two norms' eps, two MLP widths): never the first's value
            key = f"{name}_{count}"
        self._shared[key] = (self.const(key, array), array)
        return self._shared[key][0]


def artifact_metadata(spec: Any, position_inputs: list[str]) -> dict[str, str]:
    """The metadata props every artifact carries: its spec, and what runners need to reject bad positions.

    Runners read ``ropeexport.max_positions`` and ``ropeexport.position_inputs`` to refuse positions outside
    [0, max_positions) before running anything.
    """
    return {
        "ropeexport.encoding": spec.encoding,
        "ropeexport.artifact": spec.artifact,
        "ropeexport.spec": json.dumps(spec.to_dict(), sort_keys=True),
        "ropeexport.max_positions": str(spec.max_positions),
        "ropeexport.position_inputs": ",".join(position_inputs),
    }


def make_model(
    graph: onnx.GraphProto, opset: int, metadata: dict[str, str], domains: dict[str, int] | None = None
) -> onnx.ModelProto:
    """A model with the lowest IR version its opsets need (ONNX Runtime 1.31 reads IR 13 at most).

    Every position input named in the metadata gets an in-graph range guard (``graph.guard``).
    """
    positions = [p for p in metadata.get("ropeexport.position_inputs", "").split(",") if p]
    if positions:
        add_position_guards(graph, positions, int(metadata["ropeexport.max_positions"]))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (domains or {}).items()]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="ropeexport", producer_version=__version__)
    model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)  # custom domains: plugins
    helper.set_model_props(model, dict(sorted(metadata.items())))
    return model


def save_model(model: onnx.ModelProto, directory: Path, name: str = "model.onnx") -> list[str]:
    """Write the model (tables external once large), check it, and return the file names written."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    external = sum(t.ByteSize() for t in model.graph.initializer) > EXTERNAL_DATA_THRESHOLD
    if external:
        onnx.save_model(
            model,
            path,
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=DATA_FILE,
            size_threshold=1024,
        )
    else:
        onnx.save_model(model, path)
    onnx.checker.check_model(str(path), full_check=True)
    return [name, DATA_FILE] if external else [name]


def save_streamed(model: onnx.ModelProto, directory: Path, sink: ExternalData, name: str = "model.onnx") -> list[str]:
    """Write a model whose large initializers ``sink`` holds already (``GraphBuilder(sink=...)``), check it, and
    return the file names written: the graph proto alone is serialized, no weight passes through memory again.
    """  # noqa: D205
    sink.finish(model)
    path = directory / name
    onnx.save_model(model, path)
    onnx.checker.check_model(str(path), full_check=True)
    return [name, sink.location]


def sha256(path: Path) -> str:
    """Hex sha256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
