"""Sandwich: the spec, validated on construction.

Torch-free: importing it loads neither torch nor onnx (the catalog and the CLI read every spec class).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ropeexport.errors import SpecError
from ropeexport.families.bias.spec import BiasSpec
from ropeexport.specs import require_float, require_int

MAX_TABLE_ENTRIES = 2**27  # heads * max_positions: a 512 MiB float32 table at most


@dataclass(frozen=True)
class SandwichSpec(BiasSpec):
    """Sandwich: ``embedding_dim`` is d' (0 means head_dim), ``theta`` the sinusoid base (Vaswani's 10000)."""

    encoding: ClassVar[str] = "sandwich"

    embedding_dim: int = 0  # 0 (or null): head_dim
    theta: float = 10000.0

    def _validate_method(self) -> None:
        dim = require_int("embedding_dim", 0 if self.embedding_dim is None else self.embedding_dim, 0, 65536)
        if dim % 2 or dim == 1:
            raise SpecError("embedding_dim", f"must be even and at least 2 (sin/cos pairs), got {dim}")
        if dim == 0 and self.head_dim % 2:
            raise SpecError("embedding_dim", f"defaults to head_dim ({self.head_dim}), which is odd: give an even one")
        dim = dim or self.head_dim
        self._put("embedding_dim", dim)
        self._put("theta", require_float("theta", self.theta, 1.0, strict=True))
        entries = self.num_heads * self.max_positions
        if entries > MAX_TABLE_ENTRIES:
            raise SpecError(
                "max_positions",
                f"the table holds num_heads * max_positions = {entries} values; at most {MAX_TABLE_ENTRIES} allowed",
            )


SPEC = SandwichSpec  # what the catalog reads
