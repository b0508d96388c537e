"""ALiBi's bias subgraph: -m_h * (i - j) (or -m_h * |i - j|) from H float32 slopes and the position ids."""

from __future__ import annotations

import numpy as np

from ropeexport.dtypes import DTYPES
from ropeexport.families.alibi.reference import spec_slopes
from ropeexport.families.alibi.spec import AlibiSpec
from ropeexport.families.bias.export import causal_future, position_grid
from ropeexport.graph.onnx_io import GraphBuilder


def alibi_bias_nodes(g: GraphBuilder, spec: AlibiSpec, qpos: str, kpos: str) -> str:
    """float32 bias [b, heads, q, k] before the mask; the artifact stores only the heads' slopes."""
    q, k = position_grid(g)
    distance = g.op("Sub", [q, k])  # i - j, [b, 1, q, k]
    if not spec.causal:
        distance = g.op("Abs", [distance])
    slopes = g.const("neg_slopes", -spec_slopes(spec).astype(np.float32).reshape(1, -1, 1, 1))
    return g.op("Mul", [slopes, distance])


def alibi_single_pass(g: GraphBuilder, spec: AlibiSpec, qpos: str, kpos: str) -> str | None:
    """The bias [b, heads, q, k] in one float32 pass (plus the rounding Cast below fp32), or None where it cannot be.

    Bit-identical to the general path; None when the clamp to the dtype's finite range could act (checked on the
    float32 product the graph forms), when a slope rounds to 0 in float32, or for fp16/bf16 scores and attention.

    -m_h * d with d = i - j (or |i - j|), and d = +inf where the causal mask hides key j: every slope is positive,
    so -m_h * inf = -inf, the mask's value. The general path clamps to the dtype's finite range, rounds once, expands
    and masks, four passes over [b, heads, q, k]. When max(m) * (max_positions - 1) is within the dtype's finite range
    the clamp cannot act (positions past the table are refused before the graph runs), the Expand changes no value,
    and the mask can go on the [b, 1, q, k] distance instead of the [b, heads, q, k] bias.
    """
    slopes32 = spec_slopes(spec).astype(np.float32)
    with np.errstate(over="ignore"):  # the product the graph forms, in float32: it may round up past the range
        largest = np.float32(slopes32.max()) * np.float32(spec.max_positions - 1)
    if not slopes32.min() > 0 or not np.isfinite(largest) or float(largest) > -DTYPES[spec.dtype].finite_min:
        return None  # a zero slope would give 0 x inf = NaN where the mask wants -inf; the clamp could act
    if spec.dtype != "fp32" and spec.artifact != "bias":
        # ORT's CPU provider adds fp16 through float32 and then drops our Cast -> Cast pair: the bias would reach
        # the logits unrounded, a different (if closer) answer than the contract's "rounded once, then added".
        return None
    q, k = position_grid(g)
    distance = g.op("Sub", [q, k])  # [b, 1, q, k]
    if spec.causal:
        plus_inf = g.const("plus_inf", np.array(np.inf, np.float32))
        distance = g.op("Where", [causal_future(g), plus_inf, distance])
    else:
        distance = g.op("Abs", [distance])
    slopes = g.const("neg_slopes", -slopes32.reshape(1, -1, 1, 1))
    bias = g.op("Mul", [slopes, distance])  # [b, heads, q, k]: the one full-size float32 pass
    return bias if spec.dtype == "fp32" else g.op("Cast", [bias], to=DTYPES[spec.dtype].onnx)  # rounds once
