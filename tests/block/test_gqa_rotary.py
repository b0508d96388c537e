"""Why the ``gqa`` form lets GroupQueryAttention rotate (do_rotary) only once the cache holds tokens.

ONNX Runtime 1.31's CPU GroupQueryAttention, fed exact cos/sin caches and position_ids, honours position_ids row by
row once a cache exists (``attention.graph._gqa``'s then-branch relies on it), but rotates a first prompt at
position_ids[0, 0] + i in every row: a left-padded prompt ([0, 0, 0, 1, 2, 3]), or a batch whose rows start at
different positions, is rotated at the wrong positions, so a first prompt runs the rope piece's RotaryEmbedding
nodes instead. If a later release changes this, this test says so (and the form can use it).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytestmark = pytest.mark.fast  # one GroupQueryAttention node on hand-made positions

ort = pytest.importorskip("onnxruntime")
D, P = 16, 64  # do_rotary needs head_size % 16 == 0 on the CPU kernel


def _session() -> object:
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("q", "k", "v", "pk", "pv")]
    inputs += [
        helper.make_tensor_value_info("seqlens", TensorProto.INT32, None),
        helper.make_tensor_value_info("total", TensorProto.INT32, []),
        helper.make_tensor_value_info("pos", TensorProto.INT64, None),
    ]
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "pk", "pv", "seqlens", "total", "cos", "sin", "pos"],
                            ["o", "present_key", "present_value"], domain="com.microsoft", num_heads=1,
                            kv_num_heads=1, do_rotary=1)  # fmt: skip
    angles = np.arange(P)[:, None] / 10000 ** (np.arange(0, D, 2) / D)
    tables = [
        onnx.numpy_helper.from_array(f(angles).astype(np.float32), n) for f, n in ((np.cos, "cos"), (np.sin, "sin"))
    ]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("o", "present_key", "present_value")]
    graph = helper.make_graph([node], "gqa", inputs, outputs, tables)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 10
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _rotated(x: np.ndarray, positions: list[int]) -> np.ndarray:
    angles = np.array(positions)[:, None] / 10000 ** (np.arange(0, D, 2) / D)
    a, b = x[:, : D // 2], x[:, D // 2 :]
    return np.concatenate([a * np.cos(angles) - b * np.sin(angles), a * np.sin(angles) + b * np.cos(angles)], -1)


# (cached tokens, position_ids per row, honoured in every row)
CASES = [
    (0, [[0, 0, 0, 1, 2, 3]], False),
    (0, [[5, 9, 20]], False),
    (0, [[5, 6, 7]], True),
    (0, [[3, 4, 5], [0, 1, 2]], False),  # a batch's rows starting apart: every row rotated as row 0
    (2, [[7, 8]], True),
    (2, [[30]], True),
    (2, [[30], [3]], True),  # a decode step of a batch: each row at its own position
]


@pytest.mark.parametrize(("past", "positions", "honoured"), CASES)
def test_group_query_attention_rotary_positions(past: int, positions: list[list[int]], honoured: bool) -> None:
    rng = np.random.default_rng(0)
    b, s = len(positions), len(positions[0])
    q, k = (rng.standard_normal((b, s, D)).astype(np.float32) for _ in range(2))
    cache = np.zeros((b, 1, past, D), np.float32)
    feeds = {"q": q, "k": k, "v": k, "pk": cache, "pv": cache, "seqlens": np.full(b, past + s - 1, np.int32),
             "total": np.array(past + s, np.int32), "pos": np.array(positions, np.int64)}  # fmt: skip
    stored = _session().run(["present_key"], feeds)[0][:, 0, past:]
    error = max(np.abs(stored[i] - _rotated(k[i], row)).max() for i, row in enumerate(positions))
    assert (error < 1e-5) == honoured, error
    if past == 0 and not honoured:  # what it does instead: row 0's first position, then one per token, in every row
        first = [positions[0][0] + i for i in range(s)]
        assert max(np.abs(stored[i] - _rotated(k[i], first)).max() for i in range(b)) < 1e-5
