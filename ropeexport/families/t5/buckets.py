"""T5's relative position buckets (Raffel et al. 2020, section 2.1), exactly: one function for T5 and TUPE.

For a relative position r = j - i (key minus query): bidirectional buckets give half the buckets to keys after the
query (offset B = num_buckets / 2) and measure n = |r|; unidirectional ones use all B = num_buckets for
n = max(-r, 0). With E = B // 2 (``max_exact``) and N = B - E, a distance n < E has bucket n; a larger one has bucket
E + t for the largest t <= N - 1 with N log(n / E) >= t log(M / E) (M = max_distance). The boundaries are settled in
integers (n^N E^t >= M^t E^N), where the float formula can land on either side of an exact whole number (E = 8,
M = 128, N = 8 puts n = 16, 32 and 64 on one). Numpy only: T5's spec validates with it, T5's and TUPE's graphs store
its values, T5's eager reference calls it. (TUPE's eager reference keeps the float32 logarithm of the original
PyTorch code on purpose, and each oracle has its own from the definition.)
"""

from __future__ import annotations

import functools
import math

import numpy as np


def direction_buckets(num_buckets: int, bidirectional: bool) -> int:
    """B, the buckets of one direction: half of them when bidirectional."""
    return num_buckets // 2 if bidirectional else num_buckets


def max_exact(num_buckets: int, bidirectional: bool) -> int:
    """E: how many buckets per direction hold one distance each."""
    return direction_buckets(num_buckets, bidirectional) // 2


def bucket_boundaries(num_buckets: int, bidirectional: bool, max_distance: int) -> np.ndarray:
    """int64 [N - 1]: boundary_t (t = 1..N-1) is the first distance n in bucket E + t (module docstring)."""
    return np.array(_boundaries(num_buckets, bidirectional, max_distance), dtype=np.int64)


@functools.lru_cache(maxsize=64)
def _boundaries(num_buckets: int, bidirectional: bool, max_distance: int) -> tuple[int, ...]:
    """The boundaries as Python ints.

    n is in bucket >= E + t iff N log(n / E) >= t log(M / E), i.e. n^N * E^t >= M^t * E^N in integers; the float64
    estimate E (M / E)^(t / N) is within a step of the answer, and the integer test settles it exactly (float64
    alone can miss where the boundary is an exact integer, such as M / E a perfect power).
    """
    half = direction_buckets(num_buckets, bidirectional)
    E, M = half // 2, max_distance
    N = half - E
    out = []
    for t in range(1, N):
        inside = lambda n, t=t: n**N * E**t >= M**t * E**N  # noqa: E731
        n = max(E + 1, math.ceil(E * (M / E) ** (t / N)))
        while n > E + 1 and inside(n - 1):
            n -= 1
        while not inside(n):
            n += 1
        out.append(n)
    return tuple(out)


def relative_buckets(
    relative_position: np.ndarray, num_buckets: int, max_distance: int, bidirectional: bool
) -> np.ndarray:
    """The bucket of each relative position j - i: int64 in, int64 of the same shape out."""
    rel = np.asarray(relative_position, np.int64)
    B = direction_buckets(num_buckets, bidirectional)
    if bidirectional:
        offset, n = np.where(rel > 0, B, 0), np.abs(rel)
    else:
        offset, n = np.zeros_like(rel), np.maximum(-rel, 0)
    E = B // 2
    far = E + np.searchsorted(bucket_boundaries(num_buckets, bidirectional, max_distance), n, side="right")
    return offset + np.where(n < E, n, far)
