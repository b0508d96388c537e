"""Additive attention biases (ALiBi, T5, KERPLE, Sandwich, TUPE, Shaw): the spec, validated on construction.

Torch-free: importing it loads neither torch nor onnx (the catalog and the CLI read every spec class).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ropeexport.errors import SpecError
from ropeexport.specs import BLOCK_FORMS, GRAPHS, SpecBase, require_bool, require_int

BIAS_ARTIFACTS = ("bias", "scores", "attention", "block")
MAX_WIDTH = 2**20  # num_heads x head_dim: the widest attention any model uses is far below this


@dataclass(frozen=True)
class BiasSpec(SpecBase):
    """Fields every additive-bias method shares: heads, head size (scores/attention), and the causal mask."""

    artifacts: ClassVar[tuple[str, ...]] = BIAS_ARTIFACTS
    # tensorrt: a block whose cache is concatenated outside a 4-D Attention, with a float mask (TensorRT 10.15).
    # static-cache: a block reading and writing a preallocated cache (TensorScatter, Attention's nonpad_kv_seqlen).
    # gqa: a block on ONNX Runtime's com.microsoft.GroupQueryAttention, the bias in its attention_bias.
    graphs: ClassVar[tuple[str, ...]] = (*GRAPHS, *BLOCK_FORMS)

    num_heads: int = 8
    head_dim: int = 64
    causal: bool = True

    def _validate(self) -> None:
        if self.graph in BLOCK_FORMS and self.artifact != "block":
            raise SpecError("graph", f"{self.graph!r} is a form of the block artifact only, not of {self.artifact!r}")
        self._put("num_heads", require_int("num_heads", self.num_heads, 1, 4096))
        self._put("head_dim", require_int("head_dim", self.head_dim, 1, 65536))
        if self.num_heads * self.head_dim > MAX_WIDTH:
            raise SpecError(
                "head_dim",
                f"num_heads x head_dim = {self.num_heads * self.head_dim} is over the limit of "
                f"{MAX_WIDTH} (2^20): verification feeds would not fit in memory",
            )
        self._put("causal", require_bool("causal", self.causal))
        self._validate_method()

    def _validate_method(self) -> None:
        """Check the method's own fields (raise SpecError naming the field)."""
