"""Qwen3-VL's text decoder: Qwen3's body (q/k norms) with multimodal RoPE interleaved by frequency index over
position_ids [3, batch, seq]; the text model of a ``qwen3_vl`` checkpoint (``model.language_model.``), its vision
tower passed over. Text only: the vision tower's deepstack features, added to the first layers' hidden states where
image tokens sit, are not an input of this decoder.
"""  # noqa: D205

from __future__ import annotations

from dataclasses import replace

from ropeexport.architectures.hooks import mrope_text
from ropeexport.architectures.qwen3 import ARCHITECTURE as QWEN3

ARCHITECTURE = replace(QWEN3, model_type="qwen3_vl_text", keys=replace(QWEN3.keys, reads=("mrope_section",)),
                       hook=mrope_text("qwen3_vl_text"))  # fmt: skip
