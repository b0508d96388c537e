"""The ``attention`` component: one attention layer over a KV cache, from a typed ``AttentionSpec``.

``spec`` (the typed spec, onnx-free), ``graph`` (the layer's graph in five forms around the position piece; how a
bigger graph calls it), ``float64`` (its twin, from the definition). The ``block`` artifact is this component as an
artifact of its own; a decoder calls it once per layer.
"""

from __future__ import annotations

from ropeexport.components.attention.spec import OPSETS, AttentionSpec

__all__ = ["OPSETS", "AttentionSpec"]
