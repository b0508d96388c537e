"""KERPLE: a bias from a conditionally positive definite kernel of the distance, two learned scalars per head.

Chi et al. 2022, "KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation" (NeurIPS): the kernel,
shifted to be <= 0, is added to the attention logits.

With distance n = |i - j| (the paper's causal form: i - j for keys j <= i, the rest masked), head h:
- logarithmic kernel: B[h, i, j] = -r1_h * log(1 + r2_h * n)
- power kernel:       B[h, i, j] = -r1_h * n^r2_h,  0 < r2_h <= 2
r1 and r2 must be > 0 (the authors' code clamps both to >= 0.01 during training). They come from a safetensors file
(``r1`` and ``r2``, each [num_heads]) or a seeded positive draw (|N(0, s)| + s: r1 around 1, r2 around 0.5, the
ranges of the authors' uniform(0, 2) and uniform(0, 1) initialisation), rounded once to the artifact dtype.

The bias is computed in float32 from the position ids and the 2H scalars: nothing grows with the maximum length.
log(1 + x) uses log1p in eager and Kahan's log1p identity in the graph (ONNX has no Log1p), so a small r2 * n keeps
its relative precision instead of losing it in 1 + x.

Notation: b batch, h heads, q query length, k key length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from ropeexport.encodings.attention import BiasSpec, finish_bias
from ropeexport.encodings.weights import Tensor, load_weights, rounded
from ropeexport.errors import SpecError
from ropeexport.spec import register_spec, require_choice, require_int

KERNELS = ("log", "power")
R1_STD, R2_STD = 0.5, 0.25  # seeded draws |N(0, s)| + s: r1 mostly in [0.5, 2], r2 in [0.25, 1]
MAX_POWER = 2.0  # beyond 2 the power kernel is no longer conditionally positive definite


@register_spec
@dataclass(frozen=True)
class KerpleSpec(BiasSpec):
    """KERPLE with the ``log`` or ``power`` kernel; causal by default, as in the paper's language models.

    ``weights`` names a safetensors file holding ``r1`` and ``r2`` [num_heads] (both > 0, r2 <= 2 for ``power``);
    without one they are drawn from ``seed``.
    """

    encoding: ClassVar[str] = "kerple"

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


def kerple_bias(spec: KerpleSpec, query_position_ids: torch.Tensor, key_position_ids: torch.Tensor) -> torch.Tensor:
    """Eager bias [b, num_heads, q_len, k_len] in the spec dtype (float32 arithmetic, rounded once)."""
    r1, r2 = (torch.from_numpy(p.astype(np.float32))[None, :, None, None] for p in kerple_params(spec))  # [1, h, 1, 1]
    distance = (query_position_ids[:, None, :, None] - key_position_ids[:, None, None, :]).abs().to(torch.float32)
    if spec.kernel == "log":
        raw = -r1 * torch.log1p(r2 * distance)
    else:
        raw = -r1 * torch.pow(distance, r2)
    return finish_bias(spec, raw, query_position_ids, key_position_ids)
