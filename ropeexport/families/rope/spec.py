"""RoPE: the spec, validated on construction.

Torch-free: importing it loads neither torch nor onnx (the catalog and the CLI read every spec class).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ropeexport.errors import SpecError
from ropeexport.families.rope.schedules import SCHEDULES, get_schedule
from ropeexport.positions import AXES_NAMES
from ropeexport.specs import (
    BLOCK_FORMS,
    GRAPHS,
    MAX_TABLE_ENTRIES,
    SpecBase,
    require_bool,
    require_choice,
    require_float,
    require_int,
)

LAYOUTS = ("half", "interleaved", "complex")
MROPE_AXES = AXES_NAMES[3]  # the axes of multimodal RoPE's position_ids [3, batch, seq]: time, height, width


@dataclass(frozen=True)
class RopeSpec(SpecBase):
    """Rotary position embedding (Su et al. 2021, RoFormer) applied to query and key.

    Shapes: query [batch, num_heads, seq, head_dim], key [batch, num_kv_heads, seq, head_dim], position_ids
    [batch, seq]; the first ``rotary_dim`` channels of each head rotate, the rest pass through. Artifacts: ``rope``
    (rotated query and key) and ``scores`` (the attention logits of the rotated pair).

    Multimodal RoPE (M-RoPE; Qwen2-VL, Wang et al. 2024, section 2.1): with ``mrope_section`` (frequency pairs per
    axis: time, height, width), position_ids is [3, batch, seq] and frequency pair j turns by the position of the
    axis ``pair_axes()[j]`` names: contiguous blocks (Qwen2-VL, Qwen2.5-VL), or with ``mrope_interleaved`` by
    j mod 3 over the first 3 x section pairs, time taking the rest (Qwen3-VL, Qwen3.5). Only the ``rope`` artifact,
    half layout and static schedules: what those models compute.
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
    mrope_section: tuple[int, ...] = ()  # () : one position axis; else pairs per axis (time, height, width)
    mrope_interleaved: bool = False  # M-RoPE axes by frequency index (Qwen3-VL), not contiguous blocks

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
        self._validate_mrope(rotary_dim, schedule.regime)

    def _validate_mrope(self, rotary_dim: int, regime: str) -> None:
        """``mrope_section`` / ``mrope_interleaved``: the axes' pairs cover the rotated half exactly, once."""
        put = self._put
        interleaved = require_bool("mrope_interleaved", self.mrope_interleaved)
        put("mrope_interleaved", interleaved)
        section = self.mrope_section
        if section is None or (isinstance(section, (list, tuple)) and not section):
            if interleaved:
                raise SpecError("mrope_interleaved", "needs mrope_section (the pairs of each axis) to interleave")
            put("mrope_section", ())
            return
        if not isinstance(section, (list, tuple)) or len(section) != len(MROPE_AXES):
            raise SpecError(
                "mrope_section", f"must be {len(MROPE_AXES)} counts of frequency pairs (time, height, width), got "
                f"{section!r}"
            )
        counts = tuple(require_int(f"mrope_section[{i}]", n, 1, rotary_dim // 2) for i, n in enumerate(section))
        if sum(counts) != rotary_dim // 2:
            raise SpecError(
                "mrope_section",
                f"must sum to rotary_dim / 2 = {rotary_dim // 2} (the rotated pairs), got {list(counts)} "
                f"(sum {sum(counts)})",
            )
        put("mrope_section", counts)
        if interleaved:  # transformers' Qwen3-VL: axis a > 0 takes pairs a, a + 3, ... below 3 x section[a]
            got = tuple(self.pair_axes().count(a) for a in range(len(MROPE_AXES)))
            if got != counts:
                raise SpecError(
                    "mrope_section",
                    f"interleaved over {rotary_dim // 2} pairs gives the axes {list(got)} pairs, not {list(counts)}: "
                    "height and width take every third pair below 3 x their count",
                )
        # Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5 rotate half-split pairs with default frequencies; any other
        # combination is no model's, and its table and axis order would be guesses.
        if self.layout != "half":
            raise SpecError("layout", f"M-RoPE (mrope_section) rotates half-split pairs; got {self.layout!r}")
        if regime != "static":
            raise SpecError("scaling", f"M-RoPE takes a static schedule (no length-dependent one); got "
                            f"{self.scaling!r}")
        # "block": a decoder layer's spec (its layer reads the model's [3, batch, seq] input beside its [batch, seq]
        # rows; the block artifact alone, [batch, seq] only, refuses it: block/recipe.py).
        if self.artifact not in ("rope", "block"):
            raise SpecError("artifact", f"M-RoPE builds the rope artifact ([3, batch, seq] positions) or a decoder's "
                            f"layers; {self.artifact!r} takes [batch, seq] positions")
        forms = ("fused", "decomposed") + (("gqa",) if self.artifact == "block" else ())
        if self.graph not in forms:
            raise SpecError("graph", f"M-RoPE's {self.artifact} is {' or '.join(forms)} (tensorrt: no TensorRT run "
                            f"of it verified here); got {self.graph!r}")

    @property
    def position_axes(self) -> int:
        """How many axes position_ids has: 3 with M-RoPE ([3, batch, seq]), else 1 ([batch, seq])."""
        return len(MROPE_AXES) if self.mrope_section else 1

    def pair_axes(self) -> tuple[int, ...]:
        """The position axis (0 time, 1 height, 2 width) each of the rotary_dim / 2 frequency pairs turns by.

        Contiguous blocks of ``mrope_section`` (Qwen2-VL); interleaved (Qwen3-VL): pair j goes to axis j mod 3 when
        that axis is height or width and j < 3 x its count, else to time. One axis: all zeros.
        """
        half = self.rotary_dim // 2
        if not self.mrope_section:
            return (0,) * half
        if not self.mrope_interleaved:
            return tuple(a for a, n in enumerate(self.mrope_section) for _ in range(n))
        return tuple(
            j % 3 if j % 3 and j < 3 * self.mrope_section[j % 3] else 0 for j in range(half)
        )

    def to_dict(self) -> dict[str, object]:
        """Every field (``SpecBase.to_dict``); the M-RoPE fields only when set, so one-axis specs keep their bytes."""
        out = super().to_dict()
        if not self.mrope_section:
            out.pop("mrope_section")
            out.pop("mrope_interleaved")
        else:
            out["mrope_section"] = list(self.mrope_section)
        return out

    def name_tags(self) -> list[str]:
        """Layout and schedule: ``rope-rope-half-llama3-h32kv8x128-p131072-fp16-fused``."""
        mrope = ["mrope-" + ("i" if self.mrope_interleaved else "c") + "-".join(map(str, self.mrope_section))]
        return [self.layout, self.scaling] + (mrope if self.mrope_section else [])

    def geometry(self) -> str:
        """``hHEADS[kvKV_HEADS]xHEAD_DIM[rROTARY_DIM]`` (kv and r only where they differ from heads and head_dim)."""
        kv = f"kv{self.num_kv_heads}" if self.num_kv_heads != self.num_heads else ""
        rotary = f"r{self.rotary_dim}" if self.rotary_dim != self.head_dim else ""
        return f"h{self.num_heads}{kv}x{self.head_dim}{rotary}"


SPEC = RopeSpec  # what the catalog reads
