"""Rounding float64 values once into a table dtype, and ulp distances in that dtype.

Every table ropeexport stores is computed in float64 and rounded here exactly once, to the nearest representable value
with ties to even. numpy rounds float64 -> float32 and float64 -> float16 correctly, but ml_dtypes rounds
float64 -> bfloat16 through float32: that is two roundings, and a value a hair above a bfloat16 midpoint can land on
the wrong side (1 + 2**-8 + 2**-40 becomes 1.0 instead of 1.0078125). So bfloat16 gets its own rounding on the
float64 bits.

The float64 truth's products run on one BLAS thread (``one_blas_thread``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import ml_dtypes
import numpy as np
from threadpoolctl import threadpool_limits

from ropeexport.dtypes import DTYPES

F = TypeVar("F", bound=Callable[..., object])


def one_blas_thread(function: F) -> F:
    """``function`` run with numpy's BLAS on one thread, its own count restored after. A float64 product's last bits
    follow the thread count (the reduction splits with it: 206 of 602 of a mixture's products differed, by up to 8e-16
    relative), so a truth computed here and in a Ray worker with another thread count is the same bits; and on a
    loaded 2-core machine two threads wait on each other at every small product (a decoder's float64 pass measured
    3-25x slower with numpy's default two, docs/status/speed.md).
    """  # noqa: D205
    wrapped: F = threadpool_limits.wrap(limits=1, user_api="blas")(function)
    return wrapped


def _bf16_from_float64(x: np.ndarray) -> np.ndarray:
    """Round float64 to bfloat16 once, to nearest with ties to even, on the float64 bit pattern."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    bits = x.view(np.uint64).copy()  # worked on in place: tables reach 2^27 entries, temporaries cost page faults
    drop = np.uint64(52 - 7)  # float64 keeps 52 mantissa bits, bfloat16 keeps 7
    lsb = bits >> drop
    lsb &= np.uint64(1)
    bits += (np.uint64(1) << (drop - np.uint64(1))) - np.uint64(1)
    bits += lsb  # ties go to the even neighbour
    del lsb
    bits >>= drop
    bits <<= drop
    # A 7-bit mantissa in float32's exponent range is exact in float32, so this cast rounds nothing.
    with np.errstate(over="ignore"):  # past float32's range: inf, as bfloat16 would round it
        as32 = bits.view(np.float64).astype(np.float32)
    del bits
    upper = as32.view(np.uint32)
    upper >>= np.uint32(16)
    out = upper.astype(np.uint16).view(ml_dtypes.bfloat16)
    # Below bfloat16's normal range the spacing is fixed at 2^-133: round x / 2^-133 to an integer (power-of-two
    # scaling is exact, np.rint ties to even), scale back; the result is exact in float32, so the cast rounds nothing.
    x = np.asarray(x, dtype=np.float64)
    tiny = np.abs(x) < 2.0**-126
    special = ~np.isfinite(x)  # inf and NaN keep their meaning (a low NaN payload must not round up to inf)
    if tiny.any() or special.any():
        out = out.copy()
        exact = np.ldexp(np.rint(np.ldexp(x[tiny], 133)), -133).astype(np.float32)
        out[tiny] = (exact.view(np.uint32) >> np.uint32(16)).astype(np.uint16).view(ml_dtypes.bfloat16)
        out[special] = x[special].astype(np.float32).astype(ml_dtypes.bfloat16)
    return out


def round_once(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round a float64 array to ``dtype`` ("fp32" | "fp16" | "bf16") once, to nearest, ties to even.

    A float32 array (a checkpoint's weights) goes to fp32 / fp16 directly: every float32 is a float64, so the one
    rounding is the same, without a float64 copy of a tensor that may be a gigabyte; to fp32 it comes back as itself
    (nothing to round; treat the result as read-only, as every caller does).
    """
    if isinstance(x, np.ndarray) and x.dtype == np.float32 and dtype in ("fp32", "fp16"):
        return x.astype(DTYPES[dtype].np_dtype, copy=False)
    x = np.asarray(x, dtype=np.float64)
    if dtype == "bf16":
        return _bf16_from_float64(x.reshape(-1)).reshape(x.shape)  # the bit tricks work on 1-d views
    return x.astype(DTYPES[dtype].np_dtype)


def ulp_distance(value: np.ndarray, reference: np.ndarray, dtype: str, floor: float = 0.0) -> np.ndarray:
    """|value - reference| in units of the ``dtype`` spacing at max(|reference|, floor) (float64 result).

    ``floor=0`` is the exact ulp (tables). Outputs of a rotation cancel toward zero where the spacing is tiny and the
    count means nothing, so output comparisons measure at max(|reference|, 1) for unit-scale inputs.
    """
    ref = np.asarray(reference, dtype=np.float64)
    scale = np.maximum(np.abs(ref), floor) if floor else ref
    return np.abs(np.asarray(value, dtype=np.float64) - ref) / DTYPES[dtype].ulp(scale)
