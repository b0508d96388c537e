"""What every scenario shares: the dtypes and shapes timed, the scenario names, and the run's ``Context``.

Llama geometry (``FULL``): 32 query heads, 8 key heads, head_dim 128, max_positions 4096. ``TINY`` keeps every code
path but runs in milliseconds (``--tiny``, what the test runs).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch

from .peers import HFRotary, export_peer
from .sessions import initializer_bytes

NP_DTYPES = {"fp32": np.float32, "fp16": np.float16}
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16}  # the dtypes this benchmark times

# Shapes. Tiny ones keep every code path but run in milliseconds (the test).
FULL = {
    "max_positions": 4096,
    "theta": 10000.0,
    "rope": {"heads": 32, "kv_heads": 8, "head_dim": 128},
    "prefill": {"batch": 1, "seq": 2048, "first": 0},
    "decode": {"batch": 16, "seq": 1, "first": 3990},  # row b sits at position 3990 + b: near 4000, inside 4096
    "alibi": {"batch": 1, "heads": 32, "q": 512, "k": 512, "head_dim": 128},
    "sinusoidal": {"batch": 1, "seq": 2048, "d_model": 4096},
}
TINY = {
    "max_positions": 64,
    "theta": 10000.0,
    "rope": {"heads": 4, "kv_heads": 2, "head_dim": 16},
    "prefill": {"batch": 1, "seq": 16, "first": 0},
    "decode": {"batch": 2, "seq": 1, "first": 50},
    "alibi": {"batch": 1, "heads": 4, "q": 16, "k": 16, "head_dim": 16},
    "sinusoidal": {"batch": 1, "seq": 16, "d_model": 32},
}
SCENARIOS = (
    "rope-prefill-fp32",
    "rope-prefill-fp16",
    "rope-decode-fp32",
    "rope-decode-fp16",
    "alibi-bias-fp32",
    "alibi-bias-fp16",
    "alibi-scores-fp32",
    "sinusoidal-apply-fp32",
    "sinusoidal-apply-fp16",
    "rope-prefill-fp32-experiments",
    "rope-decode-fp32-experiments",
    "rope-prefill-fp16-experiments",
    "alibi-bias-fp32-experiments",
    "alibi-bias-fp16-experiments",
)


class Context:
    """What scenarios share: parsed args, shapes, the thread pool, and exported peer models (one per dtype)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cfg = TINY if args.tiny else FULL
        self.peer_models: dict[str, bytes | BaseException] = {}
        self.notes: dict[str, Any] = {}

    def peer_model(self, dtype: str, feeds: dict[str, np.ndarray]) -> bytes:
        """``torch.onnx.export`` of HFRotary in this dtype, dynamic batch and sequence (exported once per dtype)."""
        if dtype not in self.peer_models:
            cfg = self.cfg
            module = HFRotary(cfg["rope"]["head_dim"], cfg["max_positions"], cfg["theta"]).eval()
            start = time.perf_counter()
            try:
                model = export_peer(module, feeds)
                self.peer_models[dtype] = model.SerializeToString()
                self.notes[f"peer_export_{dtype}"] = {
                    "exporter": "torch.onnx.export(dynamo=True) (the default exporter of torch 2.9+)",
                    "opset": next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                    "nodes": [n.op_type for n in model.graph.node],
                    "initializer_bytes": initializer_bytes(model),
                    "export_s": round(time.perf_counter() - start, 2),
                }
            except Exception as exc:
                self.peer_models[dtype] = exc
        found = self.peer_models[dtype]
        if isinstance(found, BaseException):
            raise found
        return found
