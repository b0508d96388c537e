"""The ``latent`` component: multi-head latent attention (MLA, DeepSeek-V2 / V3, Kimi K2) and its float64 twin.

A sibling of ``components.attention``, not a flag inside it: its keys and values are rebuilt from a low-rank latent,
its positions rotate only a slice of each head, and its cache can hold the latent instead of keys and values.
``spec`` (``LatentSpec``, the softmax scale as transformers applies YaRN's mscale), ``float64`` (the twin, either
cache), ``graph`` (the ONNX graph, either cache).
"""

from __future__ import annotations

from ropeexport.components.latent.spec import CACHES, LatentSpec, softmax_scale

__all__ = ["CACHES", "LatentSpec", "softmax_scale"]
