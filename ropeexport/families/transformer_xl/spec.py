"""Transformer-XL relative positions: the spec, validated on construction.

Torch-free: importing it loads neither torch nor onnx (the catalog and the CLI read every spec class).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ropeexport.errors import SpecError
from ropeexport.learned import Tensor, load_weights
from ropeexport.specs import SpecBase, require_bool, require_int

# A table of more elements than this would take over 2 GiB of float64 while it is built: refuse the spec.
TABLE_MAX_ELEMENTS = 2**28


@dataclass(frozen=True)
class TransformerXLSpec(SpecBase):
    """Transformer-XL relative positions (Dai et al. 2019): the four-term logit with W_R R_(i-j), u and v.

    Fields: ``num_heads``, ``head_dim``; ``d_model`` is the width of R (0: num_heads * head_dim, as in the paper's
    models); ``causal`` masks keys after the query; ``weights`` is a safetensors file with ``r_w_bias`` (u)
    [num_heads, head_dim], ``r_r_bias`` (v) [num_heads, head_dim] and ``r_net`` (W_R) [num_heads * head_dim,
    d_model]; without it they are drawn from normal(0, 0.02) with ``seed`` (the original's init_std). The resolved
    arrays are cached by ``learned_weights``, keyed by the spec; a bad file is a SpecError here, at construction.
    """

    encoding: ClassVar[str] = "transformer-xl"
    artifacts: ClassVar[tuple[str, ...]] = ("scores",)

    num_heads: int = 8
    head_dim: int = 64
    d_model: int = 0  # 0 (or null): num_heads * head_dim
    causal: bool = True
    weights: str = ""  # a .safetensors path; empty: seeded
    seed: int = 0

    def _validate(self) -> None:
        num_heads = require_int("num_heads", self.num_heads, 1, 4096)
        head_dim = require_int("head_dim", self.head_dim, 1, 65536)
        self._put("num_heads", num_heads)
        self._put("head_dim", head_dim)
        d_model = num_heads * head_dim if self.d_model in (None, 0) else require_int("d_model", self.d_model, 2, 65536)
        if d_model % 2:
            raise SpecError("d_model", f"must be even (R is a sin half and a cos half), got {d_model}")
        self._put("d_model", d_model)
        self._put("causal", require_bool("causal", self.causal))
        weights = "" if self.weights is None else self.weights
        if not isinstance(weights, str):
            raise SpecError("weights", f"must be a path to a .safetensors file, got {weights!r}")
        self._put("weights", weights)
        self._put("seed", require_int("seed", self.seed, 0, 2**63 - 1))
        elements = self.table_rows * num_heads * head_dim
        if elements > TABLE_MAX_ELEMENTS:
            raise SpecError(
                "max_positions",
                f"the stored W_R R table would hold {self.table_rows} x {num_heads * head_dim} = {elements} elements, "
                f"more than {TABLE_MAX_ELEMENTS}; lower max_positions or the head count",
            )
        learned_weights(self)  # resolves (and caches) now: a missing or mis-shaped tensor is a SpecError here

    @property
    def table_rows(self) -> int:
        """Distances the table holds: 0 .. P-1 (causal) or -(P-1) .. P-1."""
        return self.max_positions if self.causal else 2 * self.max_positions - 1

    @property
    def distance_offset(self) -> int:
        """Row of distance 0: row r of the table holds distance r - offset."""
        return 0 if self.causal else self.max_positions - 1

    def name_tags(self) -> list[str]:
        """``bidirectional`` for the non-causal extension."""
        return [] if self.causal else ["bidirectional"]


def weight_tensors(num_heads: int, head_dim: int, d_model: int) -> list[Tensor]:
    """The learned tensors, in the order their seeded values are drawn (module docstring)."""
    return [
        Tensor("r_w_bias", (num_heads, head_dim)),
        Tensor("r_r_bias", (num_heads, head_dim)),
        Tensor("r_net", (num_heads * head_dim, d_model)),
    ]


def learned_weights(spec: TransformerXLSpec) -> dict[str, np.ndarray]:
    """float64 u, v, W_R by name as resolved (not yet rounded to the dtype); read-only, cached."""
    tensors = tuple(weight_tensors(spec.num_heads, spec.head_dim, spec.d_model))
    return load_weights(tensors, spec.weights, spec.seed)


SPEC = TransformerXLSpec  # what the catalog reads
