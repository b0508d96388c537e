"""The ``query_scale`` component: the query times a factor that follows its position, its graph and float64 twin.

Both kinds a layer describes (``architectures.layers.QUERY_SCALES``) are one formula,
``1 + c * log(1 + floor((pos + offset) / divisor))``, a step function of the position:

- ``log_floor`` (Ministral 3, transformers 5.23 ``get_llama_4_attn_scale``): c = beta, offset 0, divisor
  original_max_position_embeddings, pos the query's ``position_ids`` (0-based); the rotated query times it, cast to
  the query's dtype (``query_states * scale.to(query_states.dtype)``);
- ``temperature`` (Llama 4's NoPE layers, ``architectures.llama4_text``): c = attn_scale, offset 1, divisor
  floor_scale, pos the query's ``position_ids`` as for Ministral 3 (one seam: positions follow position_ids, as the
  rotation does). transformers 5.23 reads the cache slot there (``arange(seq) + past_seen_tokens``), which is the
  position wherever a row starts at position 0 with no left padding (measured: the tiny Llama 4 decoder agrees with
  Llama4ForCausalLM to 1e-6 of the logit scale there, and differs by 1e-2 on a left-padded row, by design).

A third kind is learned, not a formula of the config: Mistral Large 4's ``learned_log`` (``LearnedScaleSpec``;
transformers 5.23 ``MistralLarge4TextSoftmaxScaling``, modular_mistral_large4.py 295-308), the query of head h at
position p times ``q_scale[h] * log(p + 1) + q_scale_bias[h]``, the two [H] vectors the checkpoint's weights; the log
gathered from a table of every position computed in float64 and rounded once to the dtype (transformers takes the
float32 log and casts it), times the scale plus the bias in the dtype, as transformers computes them
(``learned_factor``; its twin ``learned_scale64``).

The graph takes n = (pos + offset) // divisor with an integer Div (positions are >= 0, so it is the floor) and
gathers the factor from a table of every step up to ``max_positions``, computed in float64 and rounded once to the
dtype: the factor is exact to half an ulp, where transformers computes it in float32 (its float32 quotient floors to
the same n below 2^24: the distance from p / o to the next integer is at least 1 / o, more than half an ulp of it).
A position past the table is a Gather out of range (an error, never a clamp); the layer's range guard on
``position_ids`` stops it first. The twin computes the formula in float64 from the positions.

Shapes: position_ids [b, s] -> factor [b, s]; the query [b, H, s, d] (or flat [b, s, H * d]) times it. The learned
factor: scale and bias [H], position_ids [b, s] -> factor [b, H, s, 1].
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.numerics import round_once
from ropeexport.specs import require_choice, require_int

if TYPE_CHECKING:
    from ropeexport.graph.onnx_io import GraphBuilder

# kind -> (the coefficient's parameter, the divisor's parameter, the offset added to the position)
FORMULAS = {"log_floor": ("beta", "original_max_position_embeddings", 0),
            "temperature": ("attn_scale", "floor_scale", 1)}  # fmt: skip


@dataclass(frozen=True)
class QueryScaleSpec:
    """One layer's query scale: ``kind`` (``FORMULAS``), its ``coefficient`` c > 0, integer ``divisor`` >= 1 and
    ``offset``, the positions it is asked at (``max_positions``: the table's reach) and the activations' ``dtype``.
    """  # noqa: D205

    kind: str
    coefficient: float
    divisor: int
    offset: int
    max_positions: int
    dtype: str = "fp32"

    def __post_init__(self) -> None:
        require_choice("query_scale.kind", self.kind, tuple(FORMULAS))
        c = self.coefficient
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c <= 0:
            raise SpecError(f"query_scale.{FORMULAS[self.kind][0]}", f"must be a finite number > 0, got {c!r}")
        object.__setattr__(self, "coefficient", float(c))
        object.__setattr__(self, "divisor", require_int(f"query_scale.{FORMULAS[self.kind][1]}", self.divisor, 1))
        require_int("query_scale.offset", self.offset, 0, 1)
        require_int("max_positions", self.max_positions, 1)
        require_choice("dtype", self.dtype, tuple(DTYPES))

    @classmethod
    def of(cls, described: Mapping[str, object], max_positions: int, dtype: str) -> QueryScaleSpec:
        """The spec of a layer's ``query_scale`` table ({"kind": ..., its parameters}: ``LayerSpec.query_scale``)."""
        kind = str(described.get("kind"))
        require_choice("query_scale.kind", kind, tuple(FORMULAS))
        coefficient, divisor, offset = FORMULAS[kind]
        return cls(kind, described[coefficient], described[divisor], offset, max_positions, dtype)  # type: ignore[arg-type]

    def steps(self) -> list[int]:
        """The positions where the factor changes (its first step included), below ``max_positions``."""
        first = self.divisor - self.offset
        return list(range(first, self.max_positions, self.divisor))

    def table64(self) -> np.ndarray:
        """float64 [n_max + 1]: the factor of each step n = (pos + offset) // divisor up to the last position."""
        n = np.arange((self.max_positions - 1 + self.offset) // self.divisor + 1, dtype=np.float64)
        return 1.0 + self.coefficient * np.log1p(n)


def query_scale64(spec: QueryScaleSpec, position_ids: np.ndarray) -> np.ndarray:
    """float64 [b, s]: the factor of each query position (written from the formula, not from the table)."""
    n = np.floor((np.asarray(position_ids, np.float64) + spec.offset) / spec.divisor)
    return 1.0 + spec.coefficient * np.log(1.0 + n)


def scale_query(g: GraphBuilder, spec: QueryScaleSpec, q: str, flat: bool) -> str:
    """``q`` times the factor of each row's ``position_ids`` (module doc): ``flat`` [b, s, H * d], else [b, H, s, d]."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    table = g.const("query_scale_table", round_once(spec.table64(), spec.dtype))
    shifted = g.op("Add", ["position_ids", g.const("query_scale_offset", i64(spec.offset))]) if spec.offset else (
        "position_ids")  # fmt: skip
    step = g.op("Div", [shifted, g.const("query_scale_divisor", i64(spec.divisor))])  # [b, s]: the floor (pos >= 0)
    factor = g.op("Gather", [table, step], axis=0)  # [b, s] in the dtype
    axes = (2,) if flat else (1, 3)  # [b, s, 1] against [b, s, H * d]; [b, 1, s, 1] against [b, H, s, d]
    shaped = g.op("Unsqueeze", [factor, g.const(f"query_scale_axes{len(axes)}", i64(*axes))])
    return g.op("Mul", [q, shaped])


@dataclass(frozen=True)
class LearnedScaleSpec:
    """Mistral Large 4's learned per-head query scale (module doc): its log table reaching ``max_positions``, the
    activations' ``dtype``; the scale and bias are the layer's weights (``q_scale``, ``q_scale_bias`` [H]).
    """  # noqa: D205

    max_positions: int
    dtype: str = "fp32"
    kind: str = "learned_log"

    def __post_init__(self) -> None:
        require_int("max_positions", self.max_positions, 1)
        require_choice("dtype", self.dtype, tuple(DTYPES))
        require_choice("query_scale.kind", self.kind, ("learned_log",))


def learned_scale64(scale: np.ndarray, bias: np.ndarray, position_ids: np.ndarray) -> np.ndarray:
    """float64 [b, H, s, 1]: ``scale[h] * log(p + 1) + bias[h]`` of each head and query position (module doc)."""
    log = np.log(np.asarray(position_ids, np.float64) + 1.0)[:, None, :, None]  # [b, 1, s, 1]
    return np.asarray(scale, np.float64)[None, :, None, None] * log + np.asarray(bias, np.float64)[None, :, None, None]


def learned_factor(g: GraphBuilder, spec: LearnedScaleSpec, scale: str, bias: str) -> str:
    """The learned factor [b, H, s, 1] of each head and position (module doc) from the stored ``scale`` and ``bias``
    [H]. A position past the table is a Gather out of range (an error, never a clamp).
    """  # noqa: D205
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    table = g.const("log_table", round_once(np.log1p(np.arange(spec.max_positions, dtype=np.float64)), spec.dtype))
    log = g.op("Unsqueeze", [g.op("Gather", [table, "position_ids"], axis=0), g.const("log_axes", i64(1, 3))])
    heads = g.const("head_axes", i64(0, 2, 3))  # [H] -> [1, H, 1, 1] against log [b, 1, s, 1]
    scaled, shifted = (g.op("Unsqueeze", [v, heads]) for v in (scale, bias))
    return g.op("Add", [g.op("Mul", [scaled, log]), shifted])
