"""Mistral: Llama's body with a sliding window on every layer (its config's ``sliding_window``)."""

from __future__ import annotations

from dataclasses import replace

from ropeexport.architectures.llama import BODY, KEYS

ARCHITECTURE = replace(BODY, model_type="mistral", keys=replace(KEYS, windowed=True))
