"""The ``ropeexport::RotaryEmbedding`` op: its domain and name, and its semantics for ``onnx.reference``.

One contract for the three places that meet it: the rope family's ``plugin`` graph (``families/rope/plugin.py``)
emits the node, the TensorRT plugin (``trt/plugin.py``, the Triton kernel) implements it on GPU hosts, and
``PluginReference`` evaluates it here so plugin graphs verify on machines without TensorRT.
"""

from __future__ import annotations

import numpy as np

DOMAIN = "ropeexport"
DOMAIN_VERSION = 1
OP_TYPE = "RotaryEmbedding"


class PluginReference:
    """``ropeexport::RotaryEmbedding`` for ``onnx.reference``: float64 rotation rounded once to x's dtype.

    Lets the spec's own evaluator verify plugin graphs on machines without TensorRT. Rows past the table raise
    (``np.take`` with mode="raise"), as a plugin graph's guards expect.
    """

    @staticmethod
    def op() -> type:
        """The OpRun subclass (built lazily: onnx.reference is only imported when a runner needs it)."""
        from onnx.reference.op_run import OpRun

        from ropeexport.numerics import round_once

        class RotaryEmbedding(OpRun):
            op_domain = DOMAIN

            def _run(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rows: np.ndarray, interleaved: int = 0,
                     rotary_dim: int = 0, plugin_namespace: str = "", **_: object) -> tuple[np.ndarray]:  # fmt: skip
                c = np.take(cos.astype(np.float64), rows, axis=0, mode="raise")[:, None]  # [b, 1, s, r/2]
                s = np.take(sin.astype(np.float64), rows, axis=0, mode="raise")[:, None]
                x64 = x.astype(np.float64)
                r = rotary_dim
                ia, ib = (
                    (np.arange(0, r, 2), np.arange(1, r, 2))
                    if interleaved
                    else (np.arange(r // 2), np.arange(r // 2, r))
                )
                out = x64.copy()
                out[..., ia] = x64[..., ia] * c - x64[..., ib] * s
                out[..., ib] = x64[..., ib] * c + x64[..., ia] * s
                return (round_once(out, {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}[x.dtype.name]),)

        return RotaryEmbedding
