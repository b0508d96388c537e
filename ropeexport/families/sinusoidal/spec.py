"""Sinusoidal positions: the spec, validated on construction.

Torch-free: importing it loads neither torch nor onnx (the catalog and the CLI read every spec class).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ropeexport.errors import SpecError
from ropeexport.specs import SpecBase, require_bool, require_float, require_int

# A stored table of more elements than this would take over 2 GiB of float64 while it is built: refuse the spec.
TABLE_MAX_ELEMENTS = 2**28


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


SPEC = SinusoidalSpec  # what the catalog reads
