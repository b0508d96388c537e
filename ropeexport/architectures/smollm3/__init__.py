"""SmolLM3: Llama's body; its no-RoPE layers (``no_rope_layers``) and windows per layer type come with the layers
(``ropeexport.hf``).
"""  # noqa: D205

from __future__ import annotations

from dataclasses import replace

from ropeexport.architectures.hooks import ConfigHook
from ropeexport.architectures.llama import ARCHITECTURE as LLAMA

# SmolLM3Config ties the output head to the embeddings unless told otherwise.
ARCHITECTURE = replace(
    LLAMA,
    model_type="smollm3",
    keys=replace(LLAMA.keys, tie_default=True),
    # no RoPE on every 4th layer unless no_rope_layers says otherwise; its config class's theta 2e6
    hook=ConfigHook("smollm3", default_theta=2_000_000.0, reads_layer_types=True, reads_no_rope_layers=True,
                    no_rope_interval=4),  # fmt: skip
)
