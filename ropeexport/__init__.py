"""ropeexport: positional encodings out of PyTorch, into ONNX Runtime and TensorRT, verified position by position."""

from __future__ import annotations

__version__ = "0.1.0"
