"""ropeexport: positional encodings out of PyTorch, into ONNX Runtime and TensorRT, verified position by position."""

from __future__ import annotations

import os

__version__ = "0.1.0"

# ONNX Runtime 1.31 on Linux keeps a telemetry database and device id under ~/.cache/Microsoft/DeveloperTools and a
# session file in TMPDIR unless this is set before its first session; ropeexport writes only into its output folder.
# setdefault: a user who wants ORT's telemetry sets ORT_DISABLE_TELEMETRY=0 themselves.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
