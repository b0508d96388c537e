"""KERPLE: the spec, validated on construction.

Torch-free: importing it loads neither torch nor onnx (the catalog and the CLI read every spec class).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ropeexport.errors import SpecError
from ropeexport.families.bias.spec import BiasSpec
from ropeexport.learned import Tensor, load_weights, rounded
from ropeexport.specs import require_choice, require_int

KERNELS = ("log", "power")
R1_STD, R2_STD = 0.5, 0.25  # seeded draws |N(0, s)| + s: r1 mostly in [0.5, 2], r2 in [0.25, 1]
MAX_POWER = 2.0  # beyond 2 the power kernel is no longer conditionally positive definite


@dataclass(frozen=True)
class KerpleSpec(BiasSpec):
    """KERPLE with the ``log`` or ``power`` kernel; causal by default, as in the paper's language models.

    ``weights`` names a safetensors file holding ``r1`` and ``r2`` [num_heads] (both > 0, r2 <= 2 for ``power``);
    without one they are drawn from ``seed``.
    """

    encoding: ClassVar[str] = "kerple"
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"kernel": KERNELS}

    kernel: str = "log"
    weights: str = ""
    seed: int = 0

    def _validate_method(self) -> None:
        self._put("kernel", require_choice("kernel", self.kernel, KERNELS))
        if not isinstance(self.weights, str):
            raise SpecError("weights", f"must be a path to a safetensors file (or empty), got {self.weights!r}")
        self._put("seed", require_int("seed", self.seed, 0, 2**63 - 1))
        r1, r2 = kerple_params(self)  # a weights file that does not fit is a SpecError now, not at export
        source = "weights" if self.weights else "seed"
        for name, values in (("r1", r1), ("r2", r2)):
            if (values <= 0).any():
                raise SpecError(source, f"{name} rounds to 0 in {self.dtype} (head {int(np.argmin(values))})")
        if self.kernel == "power" and (r2 > MAX_POWER).any():
            head = int(np.argmax(r2))
            raise SpecError(source, f"r2 must be <= 2 for the power kernel; head {head} has {r2[head]:g}")


def kerple_params(spec: KerpleSpec) -> tuple[np.ndarray, np.ndarray]:
    """(r1, r2), each [num_heads] float64, rounded once to the spec dtype."""
    heads = spec.num_heads
    tensors = (Tensor("r1", (heads,), R1_STD, positive=True), Tensor("r2", (heads,), R2_STD, positive=True))
    values = rounded(load_weights(tensors, spec.weights, spec.seed), spec.dtype)
    return values["r1"], values["r2"]


SPEC = KerpleSpec  # what the catalog reads
