"""Phi-3: Llama's body with fused q/k/v ([q; k; v] rows) and gate/up projections, a sliding window on every layer."""

from __future__ import annotations

from dataclasses import replace

from ropeexport.architectures.llama import BODY, KEYS, NAMES

ARCHITECTURE = replace(
    BODY,
    model_type="phi3",
    names={
        **{k: v for k, v in NAMES.items() if k.rpartition(".")[2] in ("embed", "o_proj", "down_proj", "weight",
                                                                      "lm_head")},  # fmt: skip
        "layers.{i}.qkv_proj": "model.layers.{i}.self_attn.qkv_proj.weight",
        "layers.{i}.gate_up_proj": "model.layers.{i}.mlp.gate_up_proj.weight",
    },
    keys=replace(KEYS, eps_default=1e-5, windowed=True),
    fused_qkv="contiguous",
)
