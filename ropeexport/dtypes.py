"""The one table of artifact dtypes: each name's numpy type, ONNX element type, torch dtype, format bits and range.

Every stage reads its dtype facts here (``DTYPES["fp16"].onnx``, ``.np_dtype``, ``.torch``, ``.ulp(x)``,
``.finite_min``). Importing it loads neither torch nor onnx, so specs can use it: ONNX element types are the
``TensorProto.DataType`` numbers, fixed by onnx.proto, and the torch dtype is looked up when first asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    """A binary floating-point table dtype: its names in each library and the bits that define its ulp."""

    name: str
    np_dtype: type
    onnx: int  # TensorProto.DataType: FLOAT = 1, FLOAT16 = 10, BFLOAT16 = 16
    torch_name: str  # the attribute of the torch module
    mantissa_bits: int
    min_exponent: int  # exponent of the smallest normal number

    @property
    def torch(self) -> Any:
        """The torch dtype (imports torch)."""
        import torch

        return getattr(torch, self.torch_name)

    @property
    def finite_min(self) -> float:
        """The most negative finite value: biases are clamped here so that only a mask is -inf."""
        return float(ml_dtypes.finfo(self.np_dtype).min)

    def ulp(self, x: np.ndarray) -> np.ndarray:
        """Spacing of this format at |x| (float64 in, float64 out; subnormal spacing below the normal range)."""
        ax = np.abs(np.asarray(x, dtype=np.float64))
        with np.errstate(divide="ignore"):
            exponent = np.floor(np.log2(np.where(ax > 0, ax, 1.0)))
        # Zero and subnormals share the subnormal spacing 2^(min_exponent - mantissa_bits).
        exponent = np.where(ax > 0, np.maximum(exponent, self.min_exponent), self.min_exponent)
        return np.ldexp(1.0, (exponent - self.mantissa_bits).astype(np.int64))


DTYPES: dict[str, DType] = {
    "fp32": DType("fp32", np.float32, 1, "float32", 23, -126),
    "fp16": DType("fp16", np.float16, 10, "float16", 10, -14),
    "bf16": DType("bf16", ml_dtypes.bfloat16, 16, "bfloat16", 7, -126),
}
