"""``decoder.transformersjs_rows``: a multi-axis position input fed from one row, as transformers.js feeds it.

Tiny hand-made graphs shaped as a Qwen-VL decoder's start (the [3, b, s] positions read by the row gather every layer
keeps and by the M-RoPE piece), driven by a table: the prefixed model fed [b, s] gives what the graph gives fed that
row three times, bit for bit, on every output; a graph without such an input is refused naming what it lacks. The
whole Qwen-VL decoders run in transformers.js in ``test_transformersjs.py``.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ropeexport.decoder.transformersjs_rows import AXES, prefix_rows
from ropeexport.errors import SpecError
from ropeexport.runtimes.ort import load_onnxruntime

_SCALES = np.array([[[1.0]], [[10.0]], [[100.0]]], np.float32)  # [3, 1, 1]: one weight per axis, so rows are told apart


def _model(dims: list[int | str], name: str = "position_ids") -> onnx.ModelProto:
    """position_ids ``dims`` -> ``rows`` (its first row, as the decoder's ``position_rows`` gather) and ``mixed`` (each
    axis times its own weight, as a piece reading all axes would).
    """  # noqa: D205
    nodes = [helper.make_node("Gather", [name, "axis0"], ["rows"], axis=0),
             helper.make_node("Cast", [name], ["as_float"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["as_float", "scales"], ["mixed"])]  # fmt: skip
    inits = [numpy_helper.from_array(np.array(0, np.int64), "axis0"), numpy_helper.from_array(_SCALES, "scales")]
    graph = helper.make_graph(
        nodes, "decoder", [helper.make_tensor_value_info(name, TensorProto.INT64, dims)],
        [helper.make_tensor_value_info("rows", TensorProto.INT64, dims[1:]),
         helper.make_tensor_value_info("mixed", TensorProto.FLOAT, dims)], inits)  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run(model: onnx.ModelProto, positions: np.ndarray) -> dict[str, np.ndarray]:
    ort = load_onnxruntime()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip(["rows", "mixed"], session.run(["rows", "mixed"], {"position_ids": positions}), strict=True))


# (what, positions [b, s] fed): from 0, a prompt's decode step, a batch of two left-padded rows
FED = [("from 0", np.arange(7, dtype=np.int64)[None]), ("one decode step", np.array([[12]], np.int64)),
       ("a batch", np.array([[0, 0, 1, 2], [0, 1, 2, 3]], np.int64))]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("what", "rows"), FED, ids=[f[0] for f in FED])
def test_one_row_fed_gives_what_three_equal_rows_give(what: str, rows: np.ndarray) -> None:
    model = _model([3, "batch_size", "seq"])
    want = _run(model, np.ascontiguousarray(np.broadcast_to(rows, (3, *rows.shape))))
    prefixed = _model([3, "batch_size", "seq"])
    prefix_rows(prefixed, 3)
    onnx.checker.check_model(prefixed, full_check=True)
    (taken,) = prefixed.graph.input
    assert [d.dim_param for d in taken.type.tensor_type.shape.dim] == ["batch_size", "seq"]  # the names kept
    assert [n.op_type for n in prefixed.graph.node] == ["Expand", "Gather", "Cast", "Mul"]  # one node in front
    assert all("position_ids" not in n.input for n in prefixed.graph.node[1:])  # every reader reads the Expand's
    got = _run(prefixed, rows)
    assert all(np.array_equal(want[k], got[k]) and want[k].dtype == got[k].dtype for k in want), (want, got)


# (what, the graph's position input, the axes asked for, what the error says)
BAD = [("one axis", (["batch", "seq"], "position_ids"), 3, "no position_ids input of 3 axes"),
       ("another count of axes", ([4, "batch", "seq"], "position_ids"), 3, "no position_ids input of 3 axes"),
       ("no position input", ([3, "batch", "seq"], "positions"), 3, "no position_ids input of 3 axes")]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("what", "given", "axes", "said"), BAD, ids=[b[0] for b in BAD])
def test_a_graph_without_a_multi_axis_position_input_is_refused(
    what: str, given: tuple[list[int | str], str], axes: int, said: str
) -> None:
    model = _model(*given)
    before = model.SerializeToString()
    with pytest.raises(SpecError, match=said):
        prefix_rows(model, axes)
    assert model.SerializeToString() == before  # nothing changed


@pytest.mark.fast
def test_a_graph_that_already_names_the_made_rows_is_refused() -> None:
    model = _model([3, "batch", "seq"])
    model.graph.node[1].output[0] = AXES
    with pytest.raises(SpecError, match=AXES):
        prefix_rows(model, 3)
