"""Sinusoidal position encoding (Vaswani et al. 2017, "Attention Is All You Need", section 3.5).

    PE(pos, 2i)     = sin(pos / base^(2i / d))
    PE(pos, 2i + 1) = cos(pos / base^(2i / d))        (base = 10000 in the paper; i = 0 .. d/2 - 1)

Artifacts:
- ``apply``: y = x * sqrt(d_model) + PE[position_ids] with ``scale_input`` (the paper multiplies its embedding
  weights by sqrt(d_model), section 3.4), else y = x + PE[position_ids]; PE is d_model wide.
- ``scores``: the paper adds PE to the token embeddings before the query/key projections, so it has no per-head
  logit of its own. The shared ``scores`` contract takes projected query and key, so this artifact adds a table of
  width head_dim to every head of both, then takes the scaled dot product:
      scores[b, h, i, j] = (q_i + PE(p_i)) . (k_j + PE(p_j)) / sqrt(head_dim)
  Expanded, that is q.k + q.PE_j + PE_i.k + PE_i.PE_j, and the last term is sum_i cos((p_i - p_j) w_i), a function
  of the distance alone (the bias Sandwich builds on). ``scale_input`` applies to ``apply`` only: the paper's scaling
  is of embeddings, and the spec rejects it for ``scores`` rather than invent a per-head variant.

Precision: the table is computed in float64 (angles included) and rounded once to the artifact dtype. A float32
angle pos / base^(2i/d) at pos = 131072 is off by up to half the float32 spacing there (2^-7 = 0.008 rad), which is
what this avoids; the table is stored whole, [max_positions, width], so nothing trigonometric runs in the graph.

Notation: b batch, s sequence, h heads, d d_model (``apply``) or head_dim (``scores``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from ropeexport.encodings.rope import check_positions, to_torch
from ropeexport.errors import RuntimeInputError, SpecError
from ropeexport.numerics import round_once
from ropeexport.spec import SpecBase, register_spec, require_bool, require_float, require_int

# A stored table of more elements than this would take over 2 GiB of float64 while it is built: refuse the spec.
TABLE_MAX_ELEMENTS = 2**28


@register_spec
@dataclass(frozen=True)
class SinusoidalSpec(SpecBase):
    """Sinusoidal position encoding (Vaswani et al. 2017) added to the input, or to query and key per head.

    Fields: ``d_model`` (even) is the width of ``apply``'s x; ``base`` the wavelength base (10000 in the paper);
    ``scale_input`` multiplies x by sqrt(d_model) before the add (``apply`` only); ``num_heads`` and ``head_dim``
    (even) shape the ``scores`` artifact.
    """

    encoding: ClassVar[str] = "sinusoidal"
    artifacts: ClassVar[tuple[str, ...]] = ("apply", "scores")

    d_model: int = 512
    base: float = 10000.0
    scale_input: bool = False
    num_heads: int = 8
    head_dim: int = 64

    def _validate(self) -> None:
        d_model = require_int("d_model", self.d_model, 2, 65536)
        if d_model % 2:
            raise SpecError("d_model", f"must be even (sin and cos fill channel pairs), got {d_model}")
        self._put("d_model", d_model)
        base = require_float("base", self.base, 1.0, strict=True)  # <= 1: frequencies that grow, or overflow
        if base == 1.0:
            raise SpecError("base", "must not be 1 (every channel pair would share one frequency)")
        self._put("base", base)
        self._put("scale_input", require_bool("scale_input", self.scale_input))
        self._put("num_heads", require_int("num_heads", self.num_heads, 1, 4096))
        head_dim = require_int("head_dim", self.head_dim, 2, 65536)
        if self.artifact == "scores":
            if head_dim % 2:
                raise SpecError("head_dim", f"must be even (the scores table is head_dim wide), got {head_dim}")
            if self.scale_input:
                raise SpecError(
                    "scale_input",
                    "applies to the apply artifact only (x * sqrt(d_model) before the add); scores takes query and "
                    "key as given",
                )
        self._put("head_dim", head_dim)
        elements = self.max_positions * self.width
        if elements > TABLE_MAX_ELEMENTS:
            raise SpecError(
                "max_positions",
                f"the stored table would hold {self.max_positions} x {self.width} = {elements} elements, more than "
                f"{TABLE_MAX_ELEMENTS}; lower max_positions or the width",
            )

    @property
    def width(self) -> int:
        """Channels of the stored table: d_model for ``apply``, head_dim for ``scores``."""
        return self.d_model if self.artifact == "apply" else self.head_dim

    def name_tags(self) -> list[str]:
        """``scaled`` when the input is multiplied by sqrt(d_model)."""
        return ["scaled"] if self.scale_input else []

    def geometry(self) -> str:
        """``dD_MODEL`` for ``apply``; heads x head_dim for ``scores``."""
        return f"d{self.d_model}" if self.artifact == "apply" else super().geometry()


def sinusoid_table(positions: int, width: int, base: float) -> np.ndarray:
    """float64 PE [positions, width] (module docstring): sin in even channels, cos in odd ones."""
    inv_freq = base ** (-np.arange(0, width, 2, dtype=np.float64) / width)  # [width / 2], 1 / base^(2i/d)
    angles = np.arange(positions, dtype=np.float64)[:, None] * inv_freq  # [positions, width / 2], float64
    table = np.empty((positions, width), dtype=np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles)
    return table


def stored_table(spec: SinusoidalSpec) -> np.ndarray:
    """The table as the artifact stores it: [max_positions, width] in the spec dtype, rounded once from float64."""
    return round_once(sinusoid_table(spec.max_positions, spec.width, spec.base), spec.dtype)


def input_scale(spec: SinusoidalSpec) -> np.ndarray:
    """sqrt(d_model) rounded once to the spec dtype (a 0-d array): the factor of ``scale_input``."""
    return round_once(np.array(math.sqrt(spec.d_model)), spec.dtype)


class SinusoidalEmbedding(nn.Module):
    """Eager sinusoidal encoding: ``forward(x, *, position_ids) -> y`` (the ``apply`` artifact).

    x [b, s, d_model] in the spec dtype, position_ids int64 [b, s]; y [b, s, d_model]. Arithmetic runs in the spec
    dtype, as the graph's does: x * sqrt(d_model) rounds once (with ``scale_input``), the add rounds once.
    """

    table: torch.Tensor  # [max_positions, width], buffer
    scale: torch.Tensor  # 0-d sqrt(d_model), buffer

    def __init__(self, spec: SinusoidalSpec) -> None:
        super().__init__()
        self.spec = spec
        self.register_buffer("table", to_torch(stored_table(spec)), persistent=False)  # [P, width]
        self.register_buffer("scale", to_torch(input_scale(spec)), persistent=False)  # 0-d

    def lookup(self, position_ids: torch.Tensor, name: str = "position_ids") -> torch.Tensor:
        """Rows of the table [*, width] for position_ids [*]; positions outside the table raise."""
        check_positions(position_ids, self.spec.max_positions, name)
        return self.table[position_ids]

    def forward(self, x: torch.Tensor, *, position_ids: torch.Tensor) -> torch.Tensor:
        """x + PE[position_ids] (x scaled first with ``scale_input``), shapes in the class docstring."""
        d = self.spec.d_model
        if x.dim() != 3 or x.shape[2] != d or list(position_ids.shape) != list(x.shape[:2]):
            raise RuntimeInputError(
                f"x: expected [batch, seq, {d}] with position_ids [batch, seq], got {list(x.shape)} and "
                f"{list(position_ids.shape)}"
            )
        if self.spec.scale_input:
            x = x * self.scale
        return x + self.lookup(position_ids)


def sinusoidal_scores(
    module: SinusoidalEmbedding,
    query: torch.Tensor,
    key: torch.Tensor,
    query_position_ids: torch.Tensor,
    key_position_ids: torch.Tensor,
) -> torch.Tensor:
    """(q_i + PE_i) . (k_j + PE_j) / sqrt(head_dim) in the spec dtype: [b, num_heads, q_len, k_len].

    query [b, num_heads, q_len, head_dim], key [b, num_heads, k_len, head_dim]; the module's table is head_dim wide.
    """
    q = query + module.lookup(query_position_ids, "query_position_ids")[:, None]  # [b, h, q, d]
    k = key + module.lookup(key_position_ids, "key_position_ids")[:, None]  # [b, h, k, d]
    scale = to_torch(round_once(np.array(1.0 / math.sqrt(module.spec.head_dim)), module.spec.dtype))
    return (q @ k.transpose(-1, -2)) * scale
