"""Hugging Face ``config.json`` import: the positional-encoding spec a transformers model implies, with provenance.

Reads a config from disk only (no hub access, never remote code) and maps it to spec fields:
- RoPE models: head_dim (or hidden_size / num_attention_heads), num_key_value_heads, rope_theta, the rotated width
  (partial_rotary_factor, rotary_pct or rotary_dim), max_position_embeddings, and the scaling from ``rope_scaling``
  (transformers 4.x, key ``type`` or ``rope_type``) or ``rope_parameters`` (5.x). Every key of the scaling dict must
  be understood: an unknown scaling type or parameter is an error, never dropped, because a dropped scaling is what
  turns long-context output into gibberish.
- ALiBi models: bloom, mpt (``attn_config.alibi``) and falcon (``alibi``).
- T5 relative buckets: t5 and mt5.

The package: ``reader`` (the file and its keys), ``encoding`` (one encoding's fields), ``layers`` (per layer). What
each model type reads is its hook, in its own home (``ropeexport.architectures``): this package holds no table of
model types.

``import_config`` returns the raw fields (validated later by the spec class) and, for every field, where its value
came from: the manifest records that, and ``ropeexport build --hf-config`` prints it.
"""

from __future__ import annotations

from ropeexport.architectures import TEXT_CONFIGS
from ropeexport.hf.encoding import ALIASES, NOT_SUPPORTED, ROPE_TYPES, UNSUPPORTED_KEYS, describe
from ropeexport.hf.layers import (
           LAYER_TYPES,
           OTHER_LAYER_TYPES,
           Layers,
           import_config,
           import_layers,
           spans,
           text_config,
)
from ropeexport.hf.reader import Imported, model_name, read_config

__all__ = ["ALIASES", "LAYER_TYPES", "NOT_SUPPORTED", "OTHER_LAYER_TYPES", "ROPE_TYPES", "TEXT_CONFIGS",
           "UNSUPPORTED_KEYS", "Imported", "Layers", "describe", "import_config", "import_layers", "model_name",
           "read_config", "spans", "text_config"]  # fmt: skip
