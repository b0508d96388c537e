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

import numpy as np
import torch

from ropeexport.families.bias.reference import finish_bias
from ropeexport.families.kerple.spec import KerpleSpec, kerple_params


def kerple_bias(spec: KerpleSpec, query_position_ids: torch.Tensor, key_position_ids: torch.Tensor) -> torch.Tensor:
    """Eager bias [b, num_heads, q_len, k_len] in the spec dtype (float32 arithmetic, rounded once)."""
    r1, r2 = (torch.from_numpy(p.astype(np.float32))[None, :, None, None] for p in kerple_params(spec))  # [1, h, 1, 1]
    distance = (query_position_ids[:, None, :, None] - key_position_ids[:, None, None, :]).abs().to(torch.float32)
    if spec.kernel == "log":
        raw = -r1 * torch.log1p(r2 * distance)
    else:
        raw = -r1 * torch.pow(distance, r2)
    return finish_bias(spec, raw, query_position_ids, key_position_ids)
