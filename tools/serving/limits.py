"""The decode limit: a decode step cannot beat reading the weights and the cache once.

Bytes read by one decode step at past p (fp32): every parameter except the embedding table, of which one row is
read (an untied model; a tied one reads the whole table as its head), plus the cache, 2 x layers x kv_heads x p x
head_dim x 4. Timed in the same rounds as the entries:

- ``copy``: ``np.copyto`` of a buffer that size into another (reads and writes the bytes once; the faster of one
  thread and the bytes split over ``threads`` threads), the limit the ratio is taken against;
- ``read``: an ONNX Runtime MatMul x [1, K] @ W [K, 1024] over the same bytes, W bound as an input (IO binding, no
  prepacking), ``threads`` intra-op threads: a pure read at decode's arithmetic, the operation decode really does.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

COLUMNS = 1024  # the read figure's W is [K, COLUMNS]


def decode_bytes(made: dict[str, Any], past: int) -> dict[str, int]:
    """Weight and cache bytes one decode step at ``past`` must read (module doc)."""
    cfg = made["config"]
    tied = bool(cfg.get("tie_word_embeddings"))
    params = made["parameters"] - (0 if tied else made["embedding_parameters"] - cfg["hidden_size"])
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    cache = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * past * head_dim * 4
    return {"weights": 4 * params, "cache": cache, "total": 4 * params + cache}


class Limit:
    """The copy and the read of ``nbytes`` (module doc); ``copy()`` and ``read()`` each do one pass."""

    def __init__(self, nbytes: int, threads: int, pool: ThreadPoolExecutor | None) -> None:
        import onnxruntime as ort
        from onnx import TensorProto, helper

        n = nbytes // 4
        rng = np.random.default_rng(0)
        self.src = rng.standard_normal(n, dtype=np.float32)
        self.dst = np.empty_like(self.src)
        self.pool, self.threads = pool, threads
        bounds = np.linspace(0, n, threads + 1).astype(int)
        self.parts = [(self.src[a:b], self.dst[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        rows = n // COLUMNS
        self.w = self.src[: rows * COLUMNS].reshape(rows, COLUMNS)
        self.x = rng.standard_normal((1, rows), dtype=np.float32)
        self.y = np.empty((1, COLUMNS), np.float32)
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])],
            "read",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows]),
             helper.make_tensor_value_info("w", TensorProto.FLOAT, [rows, COLUMNS])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, COLUMNS])],
        )  # fmt: skip
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1  # spinning, as the entries run
        self.session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        self.binding = self.session.io_binding()
        for name, a in (("x", self.x), ("w", self.w)):
            self.binding.bind_input(name, "cpu", 0, np.float32, list(a.shape), a.ctypes.data)
        self.binding.bind_output("y", "cpu", 0, np.float32, list(self.y.shape), self.y.ctypes.data)
        self.nbytes = 4 * n

    def copy_1t(self) -> None:
        """One thread: np.copyto of the whole buffer."""
        np.copyto(self.dst, self.src)

    def copy_mt(self) -> None:
        """``threads`` threads, each copying a contiguous part (numpy releases the GIL while copying)."""
        if self.pool is None:
            return self.copy_1t()
        list(self.pool.map(lambda p: np.copyto(p[1], p[0]), self.parts))

    def read(self) -> None:
        """The MatMul over the same bytes through ONNX Runtime."""
        self.session.run_with_iobinding(self.binding)
