"""What the runners say when a model uses an op they cannot run, and the one way ropeexport opens an ORT session.

``onnx-reference`` (``runtimes.onnx_reference``) refuses a model before anything runs, naming every op it has no
kernel for, wherever the op sits: the main graph, an If branch, a model-local function; ONNX Runtime's contrib ops
(com.microsoft) and a default-domain op the installed onnx does not implement alike. Ops it does run (the spec's
own, a local function's body, ropeexport's plugin op handed to it) are never named. ``runtimes.ort.open_session``
turns a model ORT cannot load into one line naming ORT's version.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ropeexport.errors import RuntimeUnavailable
from ropeexport.runtimes import open_runner
from ropeexport.runtimes.onnx_reference import unsupported_ops

X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
MS = helper.make_opsetid("com.microsoft", 1)


def _model(nodes: list[onnx.NodeProto], functions: list[onnx.FunctionProto] | None = None,
           opsets: list[onnx.OperatorSetIdProto] | None = None) -> onnx.ModelProto:  # fmt: skip
    graph = helper.make_graph(nodes, "g", [X], [Y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), *(opsets or [])],
                             functions=functions or [])  # fmt: skip


def _branch(node: onnx.NodeProto) -> onnx.GraphProto:
    return helper.make_graph([node], "branch", [], [Y])


def _contrib_in_if() -> onnx.ModelProto:
    cond = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", TensorProto.BOOL, [], [True]))
    then = _branch(helper.make_node("FastGelu", ["x"], ["y"], domain="com.microsoft"))
    other = _branch(helper.make_node("Relu", ["x"], ["y"]))
    return _model([cond, helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], opsets=[MS])


def _contrib_in_function() -> onnx.ModelProto:
    body = helper.make_node("GroupQueryAttention", ["a"], ["b"], domain="com.microsoft")
    function = helper.make_function("local", "Attend", ["a"], ["b"], [body], [helper.make_opsetid("", 17), MS])
    return _model([helper.make_node("Attend", ["x"], ["y"], domain="local")], [function],
                  [MS, helper.make_opsetid("local", 1)])  # fmt: skip


def _plain_function() -> onnx.ModelProto:
    function = helper.make_function("local", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                                    [helper.make_opsetid("", 17)])  # fmt: skip
    return _model([helper.make_node("Twice", ["x"], ["y"], domain="local")], [function],
                  [helper.make_opsetid("local", 1)])  # fmt: skip


# (case, model, the ops named, in order; [] = runs)
CASES = [
    ("spec ops only", _model([helper.make_node("Relu", ["x"], ["y"])]), []),
    ("two contrib ops in the main graph", _model([
        helper.make_node("SkipSimplifiedLayerNormalization", ["x"], ["t"], domain="com.microsoft"),
        helper.make_node("MatMulNBits", ["t"], ["y"], domain="com.microsoft")], opsets=[MS]),
     ["com.microsoft.MatMulNBits", "com.microsoft.SkipSimplifiedLayerNormalization"]),
    ("a contrib op in an If branch", _contrib_in_if(), ["com.microsoft.FastGelu"]),
    ("a contrib op inside a model-local function", _contrib_in_function(), ["com.microsoft.GroupQueryAttention"]),
    ("a model-local function of spec ops", _plain_function(), []),
    ("a default-domain op onnx.reference does not implement",
     _model([helper.make_node("Multinomial", ["x"], ["y"])]), ["Multinomial (opset 17)"]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "model", "named"), CASES, ids=[c[0] for c in CASES])
def test_reference_names_every_op_it_lacks(case: str, model: onnx.ModelProto, named: list[str],
                                           tmp_path: Path) -> None:  # fmt: skip
    assert unsupported_ops(model, []) == named
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    if not named:
        with open_runner("onnx-reference", path) as runner:
            out = runner.infer({"x": np.array([-1.0, 2.0], np.float32)})
        assert out["y"].shape == (2,)
        return
    with pytest.raises(RuntimeUnavailable) as refused:
        open_runner("onnx-reference", path)
    message = str(refused.value)
    assert message.startswith(f"onnx.reference {onnx.__version__} has no kernel for ") and "\n" not in message
    assert all(op in message for op in named), message


def test_the_plugin_op_handed_to_the_reference_is_not_named() -> None:
    from ropeexport.trt.plugin_op import DOMAIN, PluginReference

    node = helper.make_node("RotaryEmbedding", ["x"], ["y"], domain=DOMAIN)
    model = _model([node], opsets=[helper.make_opsetid(DOMAIN, 1)])
    assert unsupported_ops(model, []) == [f"{DOMAIN}.RotaryEmbedding"]
    assert unsupported_ops(model, [PluginReference.op()]) == []


def test_open_session_says_why_ort_cannot_load_in_one_line() -> None:
    from ropeexport.runtimes.iobinding import PROVIDERS, session_options
    from ropeexport.runtimes.ort import open_session

    broken = _model([helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.microsoft")], opsets=[MS])
    with pytest.raises(RuntimeUnavailable) as refused:
        open_session(broken.SerializeToString(), session_options(1), PROVIDERS)
    import onnxruntime

    assert str(refused.value).startswith(f"onnxruntime {onnxruntime.__version__} cannot load the model: ")
    assert "\n" not in str(refused.value)
