"""Qwen2.5-VL's text decoder: Qwen2's body (q/k/v biases) with multimodal RoPE (contiguous ``mrope_section``
blocks over position_ids [3, batch, seq]: time, height, width); the text model of a ``qwen2_5_vl`` checkpoint, its
vision tower (``visual.``) passed over (``decoder.checkpoint.OTHER_TOWERS``).

transformers 5.23: ``Qwen2_5_VLTextModel`` (Qwen2's decoder layers, ``Qwen2_5_VLRotaryEmbedding``'s recomposition
of the three axes); its hook says how its config reads (``hooks.QWEN2_VL_TEXT``).
"""  # noqa: D205

from __future__ import annotations

from dataclasses import replace

from ropeexport.architectures.hooks import mrope_text
from ropeexport.architectures.qwen2 import ARCHITECTURE as QWEN2

ARCHITECTURE = replace(QWEN2, model_type="qwen2_5_vl_text", keys=replace(QWEN2.keys, reads=("mrope_section",)),
                       hook=mrope_text("qwen2_5_vl_text"))  # fmt: skip
