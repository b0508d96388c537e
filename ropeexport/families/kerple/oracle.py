"""KERPLE (Chi et al. 2022): the float64 oracle.

Written from the definitions, apart from the reference module and the exporter (tests/layout checks that it
never imports an exporter).
"""

from __future__ import annotations

import numpy as np

from ropeexport.families.kerple.spec import KerpleSpec, kerple_params


def kerple_oracle(spec: KerpleSpec, qpos: np.ndarray, kpos: np.ndarray) -> np.ndarray:
    """float64 bias [b, heads, q, k]: the paper's kernels of |i - j| with the dtype-rounded r1, r2."""
    r1, r2 = (p[None, :, None, None] for p in kerple_params(spec))
    distance = np.abs(qpos[:, None, :, None].astype(np.float64) - kpos[:, None, None, :])
    if spec.kernel == "log":
        return -r1 * np.log1p(r2 * distance)
    return -r1 * distance**r2
