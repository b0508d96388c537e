"""A hybrid's state inputs (convolution, SSM, recurrent) told apart from the rest, fed zeros by the proof and carried
from call to call by a run as users run the model; an input whose shape cannot be made is refused naming it.

The model here is hand-built in mobius-onnx's naming (``past_key_values.{i}.conv_state`` given back as
``present.{i}.conv_state``): layer 0 attention (its key and value cache), layer 1 a short convolution (its state).
Its logits [1, s, V] are the state's sum broadcast, and the state it gives back is the one given plus 1: so the
logits of a call tell how many calls carried the state before it.
"""  # noqa: D205

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ropeexport.audits.hf_truth import LayerShape
from ropeexport.audits.prove import Feeder, Signature
from ropeexport.audits.states import layer_tail, state_shape
from ropeexport.errors import SpecError

V, KV, D, WIDTH, KERNEL = 16, 2, 8, 6, 3
RECURRENT = ["batch", 2, 4, 4]  # [b, heads, k, v]: four axes, as a cache's, but all fixed past the batch

# (input name, declared shape, the zeros' shape fed, None: not a state input)
SHAPES: list[tuple[str, list[Any], tuple[int, ...] | None]] = [
    ("past_key_values.1.conv_state", ["batch", WIDTH, KERNEL - 1], (1, WIDTH, KERNEL - 1)),
    ("past_key_values.3.ssm_state", ["batch", 4, 8, 16], (1, 4, 8, 16)),
    ("past_key_values.2.recurrent_state", [1, 2, 8, 8], (1, 2, 8, 8)),
    ("past_key_values.1.conv_state", ["batch", "conv_dim", 2], None),  # an axis not fixed: its shape unknown
    ("past_key_values.1.conv_state", [2, WIDTH, 2], None),  # a batch of 2 fixed: not a call's
    ("past_key_values.0.key", ["batch", KV, "past", D], None),
    ("token_type_ids", ["batch", "sequence"], None),
]


@pytest.mark.parametrize(("name", "shape", "zeros"), SHAPES, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(SHAPES)])
def test_a_state_input_is_told_by_its_name_and_fixed_axes(name: str, shape: list[Any],
                                                          zeros: tuple[int, ...] | None) -> None:  # fmt: skip
    assert state_shape(name, shape) == zeros


def test_a_state_and_its_present_name_the_same_layer_and_tail() -> None:
    assert layer_tail("past_key_values.1.conv_state") == layer_tail("present.1.conv_state") == (1, "conv_state")
    assert layer_tail("past_key_values.1.conv_state") != layer_tail("present.2.conv_state")


def hybrid(path: Path, state_dims: list[Any]) -> Path:
    """The model of the module doc; ``state_dims``: the state input's declared shape."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    io = helper.make_tensor_value_info
    nodes = [
        helper.make_node("ReduceSum", ["past_key_values.1.conv_state"], ["total"], keepdims=0),  # a scalar
        helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
        helper.make_node("Concat", ["ids_shape", "vocab"], ["logits_shape"], axis=0),
        helper.make_node("Expand", ["total", "logits_shape"], ["logits"]),
        helper.make_node("Add", ["past_key_values.1.conv_state", "one"], ["present.1.conv_state"]),
        helper.make_node("Identity", ["past_key_values.0.key"], ["present.0.key"]),
        helper.make_node("Identity", ["past_key_values.0.value"], ["present.0.value"]),
        helper.make_node("Identity", ["past_key_values.1.recurrent_state"], ["present.1.recurrent_state"]),
    ]
    inits = [numpy_helper.from_array(np.array([V], np.int64), "vocab"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one")]  # fmt: skip
    kv = ["batch", KV, "past", D]
    inputs = [io("input_ids", i64, ["batch", "s"]), io("attention_mask", i64, ["batch", "t"]),
              io("position_ids", i64, ["batch", "s"]), io("past_key_values.0.key", f, kv),
              io("past_key_values.0.value", f, kv), io("past_key_values.1.conv_state", f, state_dims),
              io("past_key_values.1.recurrent_state", f, RECURRENT)]  # fmt: skip
    outputs = [io("logits", f, ["batch", "s", V]), io("present.0.key", f, kv), io("present.0.value", f, kv),
               io("present.1.conv_state", f, state_dims), io("present.1.recurrent_state", f, RECURRENT)]  # fmt: skip
    model = helper.make_model(helper.make_graph(nodes, "hybrid", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])  # fmt: skip
    model.ir_version = 10
    onnx.save(model, str(path))
    return path


SPEC = SimpleNamespace(num_layers=2, graph="", vocab_size=V, max_positions=64, num_heads=KV, num_kv_heads=KV,
                       head_dim=D, layers=[LayerShape((KV, KV, D))] * 2)  # fmt: skip


def test_the_proof_feeds_a_state_input_zeros_of_its_shape(tmp_path: Path) -> None:
    path = hybrid(tmp_path / "hybrid.onnx", ["batch", WIDTH, KERNEL - 1])
    feeder = Feeder(Signature(path), SPEC, path)
    assert feeder.states == {"past_key_values.1.conv_state": ((1, WIDTH, KERNEL - 1), "tensor(float)"),
                             "past_key_values.1.recurrent_state": ((1, 2, 4, 4), "tensor(float)")}
    assert sorted(feeder.cached) == [0]  # the convolution layer holds a state, not a cache


def test_the_proof_refuses_a_state_whose_shape_it_cannot_make_naming_it(tmp_path: Path) -> None:
    path = hybrid(tmp_path / "hybrid.onnx", ["batch", "conv_dim", KERNEL - 1])
    with pytest.raises(SpecError) as refused:
        Feeder(Signature(path), SPEC, path)
    assert "past_key_values.1.conv_state" in str(refused.value) and "every axis but the batch" in str(refused.value)


def test_a_run_as_users_run_it_carries_the_state_from_call_to_call(tmp_path: Path) -> None:
    from ropeexport.audits.runs import plan, run

    path = hybrid(tmp_path / "hybrid.onnx", ["batch", WIDTH, KERNEL - 1])
    planned = plan(path, SPEC, [])
    assert not isinstance(planned, str), planned
    assert planned.mode == "cache" and planned.caches["past_key_values.1.conv_state"] == "present.1.conv_state"
    assert planned.caches["past_key_values.1.recurrent_state"] == "present.1.recurrent_state"
    got = run(path, planned, SPEC, threads=1)[0]
    calls = -(-(planned.reach - 8) // planned.chunk)  # the prefill's calls, each adding 1 to every state entry
    draws = [p for p in planned.places if p.draw is not None]
    for place in draws:  # each draw from the prefilled state: calls x the state's entries, as its logits
        assert np.all(got[place] == calls * WIDTH * (KERNEL - 1)), (got[place][0, 0], calls)


def test_grafts_short_call_feeds_a_state_zeros_not_an_empty_cache(tmp_path: Path) -> None:
    """The short call graft compares both models on: a recurrent state [b, 2, 4, 4] fed as an empty cache [1, 2, 0, 4]
    would be refused by ONNX Runtime (mobius-onnx's Qwen3.5 was, before states were told apart).
    """  # noqa: D205
    from ropeexport.audits.graft import short_call

    path = hybrid(tmp_path / "hybrid.onnx", ["batch", WIDTH, KERNEL - 1])
    compared = short_call(path, path, SPEC)
    assert compared["tokens"] == 8 and compared["equal"] and compared["max_abs"] == 0.0
