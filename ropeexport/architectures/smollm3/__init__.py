"""SmolLM3: Llama's body; its no-RoPE layers (``no_rope_layers``) and windows per layer type come with the layers
(``ropeexport.hf``).
"""  # noqa: D205

from __future__ import annotations

from dataclasses import replace

from ropeexport.architectures.llama import ARCHITECTURE as LLAMA

# SmolLM3Config ties the output head to the embeddings unless told otherwise.
ARCHITECTURE = replace(LLAMA, model_type="smollm3", keys=replace(LLAMA.keys, tie_default=True))
