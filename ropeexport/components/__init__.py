"""Components: the pieces an architecture row names, each a graph builder and its float64 twin in one home.

A model-level graph (a decoder, the ``block`` artifact) is a composition of these; its float64 truth is the same
composition of their twins. Each twin is written from the definition and never calls its graph builder.

- ``linear``: the weight format (how a projection's weight is stored in the graph and how the float64 twin reads
  the stored values back; today fp32 / fp16 rounded once, MatMul [+ bias]); the one place that decides it.
- ``norm``: RMSNorm / LayerNorm, and a residual add fused with the norm after it (the gqa form).
- ``mlp``: gated / plain, and the activations written out from their formulas.
- ``moe``: a top-k mixture of experts (gpt-oss's clamped SwiGLU, Qwen3-MoE's gated SiLU; their routers), in ONNX
  ops or ONNX Runtime's MoE kernel.
- ``query_scale``: the query times a factor that follows its position (Ministral 3), from a table rounded once.
- ``attention``: one attention layer over a KV cache (projections, the family's position piece or none, the mask
  rule, attention in the fused / decomposed / tensorrt / static-cache / gqa forms), from a typed ``AttentionSpec``.

Below the catalog: nothing here looks a family up; a position piece (``kinds.PositionPiece``) is handed in.
"""

from __future__ import annotations

MICROSOFT = "com.microsoft"  # ONNX Runtime's contrib domain (GroupQueryAttention, SkipSimplifiedLayerNormalization)
