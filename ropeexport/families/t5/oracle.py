"""T5 relative buckets (Raffel et al. 2020): the float64 oracle.

Written from the definitions, apart from the reference module and the exporter (tests/layout checks that it
never imports an exporter).
"""

from __future__ import annotations

import math

import numpy as np

from ropeexport.families.t5.spec import T5Spec, t5_table


def _bucket(n: int, exact: int, log_buckets: int, max_distance: int) -> int:
    """Bucket of distance n >= 0 within one direction, from the real-number definition.

    floor(N log(n / E) / log(M / E)) is estimated in float64, then moved until the exact integer inequalities
    (n / E)^N >= (M / E)^t and (n / E)^N < (M / E)^(t + 1) hold, so a value that is an exact integer lands right.
    """
    E, N, M = exact, log_buckets, max_distance
    if n < E:
        return n
    t = min(N - 1, max(0, math.floor(N * math.log(n / E) / math.log(M / E))))
    reached = lambda t: n**N * E**t >= M**t * E**N  # noqa: E731  (n / E)^N >= (M / E)^t
    while t > 0 and not reached(t):
        t -= 1
    while t < N - 1 and reached(t + 1):
        t += 1
    return E + t


def t5_oracle(spec: T5Spec, qpos: np.ndarray, kpos: np.ndarray) -> np.ndarray:
    """float64 bias [b, heads, q, k]: the bucket of each key - query written from the definition, then the table."""
    half = spec.num_buckets // 2 if spec.bidirectional else spec.num_buckets
    exact = half // 2
    relative = kpos[:, None, :].astype(np.int64) - qpos[:, :, None]  # [b, q, k]
    if spec.bidirectional:
        distance, offset = np.abs(relative), np.where(relative > 0, half, 0)
    else:
        distance, offset = np.maximum(-relative, 0), np.zeros_like(relative)
    values, inverse = np.unique(distance, return_inverse=True)
    buckets = np.array([_bucket(int(n), exact, half - exact, spec.max_distance) for n in values], np.int64)
    index = offset + buckets[inverse.reshape(distance.shape)]
    return np.moveaxis(t5_table(spec)[index], -1, 1)  # [b, q, k, h] -> [b, h, q, k]
