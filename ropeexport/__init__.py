"""ropeexport: positional encodings out of PyTorch, into ONNX Runtime and TensorRT, verified position by position.

The Python API (``import ropeexport as rx``; see ``ropeexport.api`` and README "Python API"):
``rx.spec``, ``rx.from_preset``, ``rx.from_hf_config``, ``rx.load_specs`` -> specs; ``rx.export(spec)`` -> an
``onnx.ModelProto``; ``rx.build``, ``rx.build_all``, ``rx.verify``, ``rx.diff``, ``rx.check_trt``;
``rx.build_decoder`` builds a whole decoder from a transformers config and verifies it by generation;
``rx.generate`` / ``rx.open_decoder`` serve one (greedy generation in ONNX Runtime).
"""

from __future__ import annotations

import os
from typing import Any

from ropeexport.version import __version__

# ONNX Runtime 1.31 on Linux keeps a telemetry database and device id under ~/.cache/Microsoft/DeveloperTools and a
# session file in TMPDIR unless this is set before its first session; ropeexport writes only into its output folder.
# setdefault: a user who wants ORT's telemetry sets ORT_DISABLE_TELEMETRY=0 themselves.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

__all__ = [
    "__version__",
    "audit",
    "build",
    "build_all",
    "build_decoder",
    "build_layer_block",
    "check_trt",
    "diff",
    "export",
    "from_hf_config",
    "from_preset",
    "generate",
    "graft",
    "load_specs",
    "open_decoder",
    "resolve_decoder",
    "spec",
    "verify",
]


def __getattr__(name: str) -> Any:
    # The API loads torch and onnx: only when a function is first used, so `ropeexport --version` stays instant.
    if name in __all__:
        from ropeexport import api

        return getattr(api, name)
    raise AttributeError(f"module 'ropeexport' has no attribute {name!r}")
