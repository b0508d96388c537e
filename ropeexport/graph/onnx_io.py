"""Small helpers to build ONNX graphs with onnx.helper and write them deterministically."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ropeexport.graph.guard import add_position_guards
from ropeexport.version import __version__

DATA_FILE = "model.onnx.data"
# Tables go to an external data file once they pass this size: protobuf caps a model at 2 GiB, and a small
# model stays one self-contained file.
EXTERNAL_DATA_THRESHOLD = 64 * 2**20


class GraphBuilder:
    """Collects nodes and initializers; names every node and intermediate value deterministically."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
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
        """Add an initializer and return its name."""
        self.initializers.append(numpy_helper.from_array(np.asarray(array), f"{self.prefix}{name}"))
        return f"{self.prefix}{name}"

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


def sha256(path: Path) -> str:
    """Hex sha256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
