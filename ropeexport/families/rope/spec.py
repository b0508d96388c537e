"""RoPE: the spec, validated on construction.

Torch-free: importing it loads neither torch nor onnx (the catalog and the CLI read every spec class).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ropeexport.errors import SpecError
from ropeexport.families.rope.schedules import SCHEDULES, get_schedule
from ropeexport.specs import (
    BLOCK_FORMS,
    GRAPHS,
    MAX_TABLE_ENTRIES,
    SpecBase,
    require_choice,
    require_float,
    require_int,
)

LAYOUTS = ("half", "interleaved", "complex")


@dataclass(frozen=True)
class RopeSpec(SpecBase):
    """Rotary position embedding (Su et al. 2021, RoFormer) applied to query and key.

    Shapes: query [batch, num_heads, seq, head_dim], key [batch, num_kv_heads, seq, head_dim], position_ids
    [batch, seq]; the first ``rotary_dim`` channels of each head rotate, the rest pass through. Artifacts: ``rope``
    (rotated query and key) and ``scores`` (the attention logits of the rotated pair).
    """

    encoding: ClassVar[str] = "rope"
    artifacts: ClassVar[tuple[str, ...]] = ("rope", "scores", "block")
    # plugin: one ropeexport::RotaryEmbedding node per tensor, for TensorRT versions without the native layer.
    # tensorrt: a block whose cache is concatenated outside a 4-D Attention, with a float mask (TensorRT 10.15 parses
    # it; its Attention takes no KV cache, and its is_causal is top-left aligned).
    # static-cache: a block reading and writing a preallocated cache (TensorScatter, Attention's nonpad_kv_seqlen).
    # gqa: a block on ONNX Runtime's com.microsoft.GroupQueryAttention (query and key rotated by the rope piece).
    graphs: ClassVar[tuple[str, ...]] = (*GRAPHS, "plugin", *BLOCK_FORMS)
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"layout": LAYOUTS, "scaling": tuple(SCHEDULES)}

    layout: str = "half"
    head_dim: int = 128
    rotary_dim: int = 0  # 0 (or null): head_dim, as ONNX's rotary_embedding_dim
    num_heads: int = 32
    num_kv_heads: int = 0  # 0 (or null): num_heads
    theta: float = 10000.0
    scaling: str = "default"
    scaling_params: Mapping[str, Any] = field(default_factory=dict)

    def _validate(self) -> None:
        put = self._put
        if self.graph == "plugin" and self.artifact != "rope":
            raise SpecError("graph", f"'plugin' builds the rope artifact only, not {self.artifact!r}")
        if self.graph in BLOCK_FORMS and self.artifact != "block":
            raise SpecError("graph", f"{self.graph!r} is a form of the block artifact only, not of {self.artifact!r}")
        put("layout", require_choice("layout", self.layout, LAYOUTS))
        head_dim = require_int("head_dim", self.head_dim, 2, 65536)
        if head_dim % 2:
            raise SpecError("head_dim", f"must be even (channels rotate in pairs), got {head_dim}")
        put("head_dim", head_dim)
        rotary_dim = head_dim if self.rotary_dim in (None, 0) else require_int("rotary_dim", self.rotary_dim, 2)
        if rotary_dim % 2:
            raise SpecError("rotary_dim", f"must be even (channels rotate in pairs), got {rotary_dim}")
        if rotary_dim > head_dim:
            raise SpecError("rotary_dim", f"must be at most head_dim ({head_dim}), got {rotary_dim}")
        put("rotary_dim", rotary_dim)
        num_heads = require_int("num_heads", self.num_heads, 1, 4096)
        put("num_heads", num_heads)
        kv = num_heads if self.num_kv_heads in (None, 0) else require_int("num_kv_heads", self.num_kv_heads, 1, 4096)
        if num_heads % kv:
            raise SpecError("num_kv_heads", f"must divide num_heads ({num_heads}), got {kv}")
        put("num_kv_heads", kv)
        if (num_heads + kv) * head_dim > 2**21:
            raise SpecError(
                "num_heads",
                f"(num_heads + num_kv_heads) x head_dim = {(num_heads + kv) * head_dim} is over the limit of 2^21: "
                "verification feeds would not fit in memory",
            )
        # theta <= 1 makes inv_freq = theta^(-2i/d) grow with i (and overflow for tiny theta): no model uses it.
        theta = require_float("theta", self.theta, 1.0, strict=True)
        if theta == 1.0:
            raise SpecError("theta", "must not be 1 (every frequency would be 1)")
        put("theta", theta)
        if not isinstance(self.scaling, str):
            raise SpecError("scaling", f"must be a schedule name, got {self.scaling!r}")
        if not isinstance(self.scaling_params, Mapping):
            raise SpecError("scaling_params", "must be a table of KEY = VALUE")
        schedule = get_schedule(self.scaling)
        put("scaling_params", schedule.resolve(self.scaling_params, rotary_dim, self.max_positions))
        entries = self.max_positions * rotary_dim // 2 * (2 if schedule.regime == "switch" else 1)
        if entries > MAX_TABLE_ENTRIES:
            raise SpecError(
                "max_positions",
                f"the tables would hold {entries} entries (max_positions x rotary_dim/2 x regimes), over the limit of "
                f"{MAX_TABLE_ENTRIES} (2^27): building them takes ~32 bytes per entry of memory in float64",
            )

    def name_tags(self) -> list[str]:
        """Layout and schedule: ``rope-rope-half-llama3-h32kv8x128-p131072-fp16-fused``."""
        return [self.layout, self.scaling]

    def geometry(self) -> str:
        """``hHEADS[kvKV_HEADS]xHEAD_DIM[rROTARY_DIM]`` (kv and r only where they differ from heads and head_dim)."""
        kv = f"kv{self.num_kv_heads}" if self.num_kv_heads != self.num_heads else ""
        rotary = f"r{self.rotary_dim}" if self.rotary_dim != self.head_dim else ""
        return f"h{self.num_heads}{kv}x{self.head_dim}{rotary}"


SPEC = RopeSpec  # what the catalog reads
