"""ALiBi (Press et al. 2022): the float64 oracle.

Written from the definitions, apart from the reference module and the exporter (tests/layout checks that it
never imports an exporter).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ropeexport.families.alibi.spec import AlibiSpec
from ropeexport.numerics import ulp_distance


def _paper_slopes(n: int) -> list[float]:
    """The slopes as the ALiBi authors' code builds them, written apart from ``families.alibi.reference.alibi_slopes``.

    A mistake in one then shows against the other: start = ratio = 2^(-2^-(log2 n - 3)) for a power of two n;
    otherwise the closest power of two's slopes, then every other slope of twice that many heads.
    """
    if math.log2(n).is_integer():
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]
    closest = 2 ** math.floor(math.log2(n))
    return _paper_slopes(closest) + _paper_slopes(2 * closest)[0::2][: n - closest]


def alibi_oracle(spec: AlibiSpec, qpos: np.ndarray, kpos: np.ndarray) -> np.ndarray:
    """float64 -m_h (i - j) (or -m_h |i - j|)."""
    distance = (qpos[:, None, :, None] - kpos[:, None, None, :]).astype(np.float64)
    if not spec.causal:
        distance = np.abs(distance)
    return -_oracle_slopes(spec)[None, :, None, None] * distance


def _oracle_slopes(spec: AlibiSpec) -> np.ndarray:
    return np.array(_paper_slopes(spec.num_heads)) * spec.slope_scale


def check_slopes(spec: AlibiSpec, model_path: Path, prefix: str = "") -> list[dict[str, Any]]:
    """The stored slopes: float32 whatever the model dtype, within 0.5 ulp of the paper's (scaled) float64 slope.

    ``prefix``: the slopes' name prefix where the bias artifact is a piece of a bigger graph (a block's ``bias/``).
    """
    stored = {t.name: t for t in onnx.load(str(model_path)).graph.initializer}.get(f"{prefix}neg_slopes")
    expected = -_oracle_slopes(spec)
    result: dict[str, Any] = {"name": "neg_slopes", "dtype": "fp32", "expected_shape": [1, spec.num_heads, 1, 1]}
    if stored is None or stored.data_type != onnx.TensorProto.FLOAT:
        got = None if stored is None else onnx.TensorProto.DataType.Name(stored.data_type)
        return [
            result
            | {
                "shape": None,
                "max_ulp": None,
                "passed": False,
                "reason": f"slopes must be a float32 initializer 'neg_slopes', found {got}",
            }
        ]
    values = numpy_helper.to_array(stored).reshape(-1)
    if values.size != spec.num_heads:
        return [
            result
            | {
                "shape": list(values.shape),
                "max_ulp": None,
                "passed": False,
                "reason": f"expected {spec.num_heads} slopes, found {values.size}",
            }
        ]
    ulps = ulp_distance(values, expected, "fp32")
    return [
        result | {"shape": [1, spec.num_heads, 1, 1], "max_ulp": float(ulps.max()), "passed": bool(ulps.max() <= 0.5)}
    ]
