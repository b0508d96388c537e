"""KERPLE: ``bias``, ``scores`` and ``attention`` artifacts, and the float64 oracle."""

from __future__ import annotations

import numpy as np

from ropeexport.encodings.kerple import KerpleSpec, kerple_bias, kerple_params
from ropeexport.export.kerple import kerple_bias_nodes
from ropeexport.families.bias import register_bias_family


def kerple_oracle(spec: KerpleSpec, qpos: np.ndarray, kpos: np.ndarray) -> np.ndarray:
    """float64 bias [b, heads, q, k]: the paper's kernels of |i - j| with the dtype-rounded r1, r2."""
    r1, r2 = (p[None, :, None, None] for p in kerple_params(spec))
    distance = np.abs(qpos[:, None, :, None].astype(np.float64) - kpos[:, None, None, :])
    if spec.kernel == "log":
        return -r1 * np.log1p(r2 * distance)
    return -r1 * distance**r2


register_bias_family("kerple", kerple_bias_nodes, kerple_bias, kerple_oracle)
