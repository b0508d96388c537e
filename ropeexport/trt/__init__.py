"""TensorRT compatibility, checked without TensorRT: the parser's support table and the checker that reads it."""

from __future__ import annotations

from ropeexport.trt.compat import CompatResult, check_trt, trt_compat
from ropeexport.trt.support import HEADLINE_VERSIONS, VERSIONS, resolve_version

__all__ = ["HEADLINE_VERSIONS", "VERSIONS", "CompatResult", "check_trt", "resolve_version", "trt_compat"]
