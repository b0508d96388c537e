"""Qwen2-VL's text decoder: the same as Qwen2.5-VL's (``qwen2_5_vl_text``), its own model type."""

from __future__ import annotations

from dataclasses import replace

from ropeexport.architectures.hooks import mrope_text
from ropeexport.architectures.qwen2_5_vl_text import ARCHITECTURE as QWEN2_5_VL_TEXT

ARCHITECTURE = replace(QWEN2_5_VL_TEXT, model_type="qwen2_vl_text", hook=mrope_text("qwen2_vl_text"))
