"""Tolerances: how far an artifact's output may be from its reference, per dtype, each with why it has its size.

The one home of ``Tolerance`` and ``TOLERANCES`` (shared machinery: a family's kind names its own tolerance through
``kinds.Recipe.tolerance``, verification judges by it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    """atol and rtol for one dtype, with the reason for their size."""

    atol: float
    rtol: float
    reason: str


# Why each dtype's tolerance has its size, in terms every family shares (RoPE outputs stay below ~6 for its
# standard-normal inputs; a bias, such as ALiBi's -m (i - j), can reach thousands and is judged by rtol there).
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(
        1e-5,
        1e-5,
        "fused kernels may use FMA and another order of operations (<= 2 ulp seen); against float64 add the 0.5-ulp "
        "rounding of stored tables, slopes and weights and a few fp32 roundings. The planted bugs (a position off by "
        "one, ignored scaling, float32 angles at long positions, wrong slopes) err by 1e-4 or more.",
    ),
    "fp16": Tolerance(
        8e-3,
        4e-3,
        "each fp16 multiply and add rounds (eps 9.8e-4) and stored values carry 0.5 ulp: about 2 ulp of outputs near "
        "4 (8e-3 absolute) where outputs are small; large outputs (a bias near -2000, whose fp16 spacing is 1 to 2) "
        "are judged by rtol 4e-3, about 4 ulp of their own size.",
    ),
    "bf16": Tolerance(
        6e-2,
        3e-2,
        "bf16 keeps 8 significant bits (eps 7.8e-3): about 2 ulp of outputs near 4; larger outputs are judged by rtol "
        "3e-2, about 4 ulp of their own size.",
    ),
}
