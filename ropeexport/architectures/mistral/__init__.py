"""Mistral: Llama's body with a sliding window on every layer (its config's ``sliding_window``)."""

from __future__ import annotations

from dataclasses import replace

from ropeexport.architectures.llama import BODY, KEYS

# Mistral Small 3.1 ships as mistral3, its text model's config (text_config) of type mistral: the wrapper's default
ARCHITECTURE = replace(BODY, model_type="mistral", keys=replace(KEYS, windowed=True), wrappers=("mistral3",))
