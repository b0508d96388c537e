"""``AttentionSpec``: what one attention layer computes, typed and validated on construction (onnx- and torch-free).

The geometry (query heads, key/value heads, head_dim), the activations' dtype and graph form, the sliding window,
and the position piece or none (``kinds.PositionPiece``: RoPE's rotation or an additive bias, each a graph and its
float64 twin; ``None``: no positional encoding, as SmolLM3's and Llama 4's NoPE layers). The fields ``qk_norm``,
``logit_softcap`` and ``sinks`` are where the next attention variants go (Gemma 3's and Qwen3's q/k norms, Gemma 2's
soft-capped logits, gpt-oss's sinks): each is refused, naming the field, until its graph and twin are built.
"""

from __future__ import annotations

from dataclasses import dataclass

from ropeexport.components.norm import NormSpec
from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.kinds import PositionPiece
from ropeexport.specs import require_choice, require_int

# Each graph form's opset: Attention (with its cache inputs) since 23, TensorScatter since 24; the decomposed form
# stays on 17 (primitives only). The gqa form adds ONNX Runtime's contrib domain (``components.MICROSOFT``).
OPSETS = {"fused": 23, "decomposed": 17, "tensorrt": 23, "static-cache": 24, "gqa": 23}


@dataclass(frozen=True)
class AttentionSpec:
    """One attention layer over a KV cache (the forms and the contract in ``components.attention.graph``).

    ``position``: the piece that encodes positions (its ``rotary`` or ``bias`` graph for the graph, its ``rotate64``
    or ``bias64`` for the twin), or None for none. ``window`` > 0: key slot j visible to query slot i only if
    i - j < window. Shapes: hidden [b, s, n] -> output [b, s, n]; cache [b, num_kv_heads, t, head_dim].
    """

    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "fp32"
    graph: str = "fused"
    window: int = 0
    position: PositionPiece | None = None
    qk_norm: NormSpec | None = None  # next: an RMSNorm of each query and key head before the rotation
    logit_softcap: float = 0.0  # next: cap * tanh(logits / cap) before the mask
    sinks: bool = False  # next: one learned logit per head that takes part in the softmax and attends to nothing

    def __post_init__(self) -> None:
        require_int("num_heads", self.num_heads, 1)
        require_int("num_kv_heads", self.num_kv_heads, 1)
        require_int("head_dim", self.head_dim, 1)
        if self.num_heads % self.num_kv_heads:
            raise SpecError("num_kv_heads", f"must divide num_heads ({self.num_heads}), got {self.num_kv_heads}")
        require_choice("dtype", self.dtype, tuple(DTYPES))
        require_choice("graph", self.graph, tuple(OPSETS))
        require_int("window", self.window, 0)
        if self.position is not None and not isinstance(self.position, PositionPiece):
            raise SpecError("position", f"must be a kinds.PositionPiece or None, got {type(self.position).__name__}")
        if self.position is not None and self.position.rotary is not None and self.position.bias is not None:
            raise SpecError("position", "a piece either rotates (rotary) or adds a bias, not both")
        not_yet = (("qk_norm", self.qk_norm is not None), ("logit_softcap", self.logit_softcap != 0),
                   ("sinks", bool(self.sinks)))  # fmt: skip
        for name, asked in not_yet:
            if asked:
                raise SpecError(name, "is not built yet (its graph and float64 twin come with the model families "
                                "that need it); leave it at its default")  # fmt: skip
