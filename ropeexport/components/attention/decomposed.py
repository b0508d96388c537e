"""The ``decomposed`` form: opset-17 primitives, any runtime (TensorRT parses it with everything written out).

The cache concatenated, keys repeated for grouped-query heads, the mask applied with the dtype's most negative
finite value, the soft cap written out in float32, softmax in float32 for fp16/bf16 (as transformers' eager attention
does), the sinks one more column of logits in the softmax, dropped after it, and rows that see no key multiplied by 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto

# the mask rules by module: a planted bug in a test replaces one for every form (tests/block)
from ropeexport.components.attention import masks
from ropeexport.components.attention.masks import (
    scale_of,
    sees,
    sink_column,
)
from ropeexport.components.attention.spec import AttentionSpec
from ropeexport.dtypes import DTYPES
from ropeexport.numerics import round_once

if TYPE_CHECKING:
    from ropeexport.graph.onnx_io import GraphBuilder


FORM = "decomposed"
FLAT = False  # query, key and value as [b, s, heads * d] (True) or [b, heads, s, d]


def attend(g: GraphBuilder, spec: AttentionSpec, q: str, k: str, v: str, added: str | None,
           arrays: Mapping[str, np.ndarray]) -> str:  # fmt: skip
    """The ``decomposed`` lowering (``graph.Lowering``: query, key and value rotated in, [b, H, s, d] out)."""
    mask, sinks = masks.cache_mask(g, spec, added, arrays)
    return _attend_decomposed(g, spec, q, k, v, mask, added, sinks)


def _repeat_kv(g: GraphBuilder, x: str, spec: AttentionSpec, name: str) -> str:
    """[b, KV, t, d] -> [b, H, t, d]: query head h reads key/value head h // (H / KV)."""
    H, KV, d = spec.num_heads, spec.num_kv_heads, spec.head_dim
    if H == KV:
        return x
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    grouped = g.op("Unsqueeze", [x, g.const(f"{name}_group_axis", i64(2))])  # [b, KV, 1, t, d]
    shape = g.op(
        "Concat",
        [g.op("Shape", [grouped], end=2), g.const(f"{name}_group", i64(H // KV)), g.op("Shape", [grouped], start=3)],
        axis=0,
    )
    return g.op("Reshape", [g.op("Expand", [grouped, shape]), g.const(f"{name}_heads_shape", i64(0, H, -1, d))])


def _softcap(g: GraphBuilder, spec: AttentionSpec, logits: str) -> str:
    """cap * tanh(logits / cap), in float32 and rounded once back to the dtype; ``logits`` as it is without a cap.

    Computed in float32 below fp32: transformers' eager attention divides, takes tanh and multiplies in the dtype
    (three fp16 roundings of values near the cap); one rounding is what the fp16 logits carry anyway.
    """
    if not spec.logit_softcap:
        return logits
    wide = logits if spec.dtype == "fp32" else g.op("Cast", [logits], to=TensorProto.FLOAT)
    cap = g.const("softcap", np.array(spec.logit_softcap, np.float32))
    capped = g.op("Mul", [g.op("Tanh", [g.op("Div", [wide, cap])]), cap])
    return capped if spec.dtype == "fp32" else g.op("Cast", [capped], to=DTYPES[spec.dtype].onnx)


def _attend_decomposed(
    g: GraphBuilder, spec: AttentionSpec, q: str, k: str, v: str, mask: str, bias: str | None, sinks: str | None = None
) -> str:
    """softmax(q k^T * scale (soft-capped) + bias, masked (with the sinks' column)) v with the cache concatenated;
    [b, H, s, d].
    """  # noqa: D205
    keys = g.op("Concat", ["past_key", k], axis=2, name="present_key")
    values = g.op("Concat", ["past_value", v], axis=2, name="present_value")
    keys, values = _repeat_kv(g, keys, spec, "keys"), _repeat_kv(g, values, spec, "values")
    logits = g.op("MatMul", [q, g.op("Transpose", [keys], perm=[0, 1, 3, 2])])
    scale = g.const("scale", round_once(np.array(scale_of(spec)), spec.dtype))
    logits = _softcap(g, spec, g.op("Mul", [logits, scale]))  # the cap after the scale, before the bias and mask
    if bias is not None:  # after the scale, as ALiBi and transformers add it
        logits = g.op("Add", [logits, bias])
    dtype = DTYPES[spec.dtype]
    hidden_value = g.const("masked_logit", round_once(np.array(dtype.finite_min), spec.dtype))
    logits = g.op("Where", [mask, logits, hidden_value])  # finite: a row that sees nothing stays free of NaN
    # softmax in float32 below fp32, as transformers' eager attention computes it
    wide = logits if spec.dtype == "fp32" else g.op("Cast", [logits], to=TensorProto.FLOAT)
    if sinks is not None:  # the sinks join the softmax as one more column (exact in float32), dropped after it
        column = sinks if spec.dtype == "fp32" else g.op("Cast", [sinks], to=TensorProto.FLOAT)
        wide = sink_column(g, wide, column)
    weights = g.op("Softmax", [wide], axis=-1)
    if sinks is not None:
        i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
        ends = [g.const("sink_drop_start", i64(0)), g.const("sink_drop_end", i64(-1)), g.const("sink_axis", i64(-1))]
        weights = g.op("Slice", [weights, *ends])
    if spec.dtype != "fp32":
        weights = g.op("Cast", [weights], to=dtype.onnx)
    attended = g.op("MatMul", [weights, values])  # [b, H, s, d]
    return g.op("Mul", [attended, sees(g, spec, mask)])  # 0 where a query sees no key
