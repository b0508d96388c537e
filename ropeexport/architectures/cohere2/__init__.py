"""Cohere 2 (Command R7B, Command A): one LayerNorm (no bias, in float32) read by attention and MLP alike (the shared
residual: h + attention(x) + mlp(x)), a gated SiLU MLP, interleaved RoPE pairs on the sliding layers only (its
attention rotates only where it has a window: the global layers have no positional encoding), every 4th layer global
(``sliding_window_pattern``), the output logits times ``logit_scale``, the head tied to the embeddings by default.

Read from transformers 5.23's ``modeling_cohere2.py`` and ``configuration_cohere2.py``: ``Cohere2LayerNorm`` (mean
subtracted, weight only), ``rotate_half`` taking x[..., ::2], x[..., 1::2], ``if self.sliding_window is not None:``
before the rotation, ``logits * self.logit_scale``; ``Cohere2Config.__post_init__`` sets head_dim to hidden_size /
heads whatever the config says and derives layer_types from ``sliding_window_pattern`` (default 4).
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropeexport.architectures.base import Architecture, Keys, read_layout
from ropeexport.architectures.hooks import ConfigHook
from ropeexport.architectures.llama import NAMES as LLAMA_NAMES
from ropeexport.errors import SpecError

LOGIT_SCALE = 0.0625  # Cohere2Config's default logit_scale

# llama's checkpoint names but one LayerNorm a layer (no norm2) and an MLP without biases
DROPPED = ("layers.{i}.norm2.weight", "layers.{i}.gate_bias", "layers.{i}.up_bias", "layers.{i}.down_bias")
NAMES = {k: v for k, v in LLAMA_NAMES.items() if k not in DROPPED}


def read(arch: Architecture, config: Mapping[str, Any], where: str) -> tuple[dict[str, Any], dict[str, str]]:
    """``read_layout`` and ``logit_scale`` (Cohere2Config's 0.0625 when absent)."""
    fields, sources = read_layout(arch, config, where)
    scale = config.get("logit_scale")
    if scale is None:
        fields["logit_scale"], sources["logit_scale"] = LOGIT_SCALE, f"default ({LOGIT_SCALE}, Cohere2Config's)"
        return fields, sources
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < float("inf"):
        raise SpecError(f"{where}: logit_scale", f"must be a positive finite number, got {scale!r}")
    fields["logit_scale"], sources["logit_scale"] = float(scale), "logit_scale"
    return fields, sources


ARCHITECTURE = Architecture(
    "cohere2",
    base="model.",
    names=NAMES,
    keys=Keys(
        eps=("layer_norm_eps",), qkv_bias=("attention_bias", False), o_bias=("attention_bias", False), tie_default=True
    ),  # fmt: skip
    norm="layer",
    residual="shared",
    read=read,
    hook=ConfigHook(
        "cohere2",
        pairing="interleaved",
        pairing_why="interleaved pairs (2i, 2i+1) (its rotate_half takes x[..., ::2], x[..., 1::2])",
        reads_layer_types=True,
        pattern="every-nth",
        pattern_key="sliding_window_pattern",
        pattern_every=4,
        rope_on="sliding",
        head_dim_derived=True,
    ),  # fmt: skip
)
