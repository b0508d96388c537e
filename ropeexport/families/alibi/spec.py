"""ALiBi: the spec, validated on construction.

Torch-free: importing it loads neither torch nor onnx (the catalog and the CLI read every spec class).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ropeexport.families.bias.spec import BiasSpec
from ropeexport.specs import require_float


@dataclass(frozen=True)
class AlibiSpec(BiasSpec):
    """ALiBi linear attention biases (Press et al. 2022); BLOOM, MPT, Falcon-RW.

    ``slope_scale`` multiplies every slope: 1 for the paper, BLOOM and MPT; Falcon-RW adds the bias before its
    1/sqrt(head_dim) logit scale, so its effective slopes are m_h / sqrt(head_dim).
    """

    encoding: ClassVar[str] = "alibi"

    slope_scale: float = 1.0

    def _validate_method(self) -> None:
        self._put("slope_scale", require_float("slope_scale", self.slope_scale, 0.0, strict=True))


SPEC = AlibiSpec  # what the catalog reads
