"""``audits.model``: a foreign model's tensors read one at a time, and written again without holding its weights.

``write_model`` copies every initializer still in the source's external data block by block; the model it writes
must hold the same values everywhere (main graph and If branches), laid out as onnx lays out external data, and run
in ONNX Runtime as the source does. ``Initializers`` reads one initializer at a time, inline or external.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ropeexport.audits import model as audit_model
from ropeexport.audits.model import load_model, write_model
from ropeexport.errors import SpecError
from ropeexport.graph.initializers import Initializers


def _source(folder: Path, threshold: int) -> Path:
    """y = If(c, x @ W1 + b, x @ W2): W1, W2 [64, 32] float32 (W2 inside the else branch), b [32]; saved with every
    tensor of at least ``threshold`` bytes in model.onnx.data.
    """  # noqa: D205
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((2, 64, 32)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["m"]), helper.make_node("Add", ["m", "b"], ["t"])]
    then = helper.make_graph(nodes, "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("MatMul", ["x", "W2"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w2, "W2")])  # fmt: skip
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64]),
                                            helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
                              [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(b, "b")])  # fmt: skip
    folder.mkdir()
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save_model(model, folder / "model.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=threshold)  # fmt: skip
    return folder / "model.onnx"


def _values(path: Path) -> dict[str, np.ndarray]:
    """Every initializer of the model at ``path``, main graph and branches, by name."""
    proto = onnx.load(str(path))
    branches = [a.g for a in proto.graph.node[0].attribute]
    return {t.name: numpy_helper.to_array(t) for g in (proto.graph, *branches) for t in g.initializer}


def _run(path: Path, c: bool) -> np.ndarray:
    import onnxruntime as ort

    x = np.arange(64, dtype=np.float32).reshape(1, 64) / 64
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x, "c": np.array(c)})[0]


# (case, onnx's size_threshold for the source: what lies in its data file; the copy block in bytes)
CASES = [("all-external", 0, 1 << 20), ("weights-external", 1024, 1 << 20), ("copied-in-small-blocks", 0, 100)]


@pytest.mark.parametrize(("case", "threshold", "block"), CASES, ids=[c[0] for c in CASES])
def test_a_written_model_holds_the_source_values_in_onnx_layout(case: str, threshold: int, block: int,
                                                                 tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001  # fmt: skip
    source = _source(tmp_path / "source", threshold)
    monkeypatch.setattr(audit_model, "COPY_BLOCK", block)
    (tmp_path / "out").mkdir()
    written = write_model(load_model(source), tmp_path / "out" / "m.onnx")
    assert written == ["m.onnx", "m.onnx.data"]
    before, after = _values(source), _values(tmp_path / "out" / "m.onnx")
    assert sorted(before) == sorted(after) == ["W1", "W2", "b"]
    for name, value in before.items():
        assert np.array_equal(value, after[name]), name
    proto = onnx.load(str(tmp_path / "out" / "m.onnx"), load_external_data=False)
    where = {t.name: t.data_location for t in proto.graph.initializer}
    assert where == {"W1": TensorProto.EXTERNAL, "b": TensorProto.DEFAULT}  # onnx's rule: 128 bytes stay inline
    for c in (True, False):
        assert np.array_equal(_run(source, c), _run(tmp_path / "out" / "m.onnx", c))


def test_initializers_are_read_one_at_a_time_and_checked(tmp_path: Path) -> None:
    source = _source(tmp_path / "source", 0)
    proto = onnx.load(str(source), load_external_data=False)
    tensors = Initializers(proto, source.parent)
    assert sorted(tensors) == ["W1", "b"] and np.array_equal(tensors["W1"], _values(source)["W1"])
    assert all(t.data_location == TensorProto.EXTERNAL and not t.raw_data for t in proto.graph.initializer)
    (source.parent / "model.onnx.data").write_bytes(b"short")
    with pytest.raises(SpecError, match="initializer 'W1' reads"):
        tensors["W1"]
