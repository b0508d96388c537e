"""T5's bias subgraph: relative positions bucketed with integer comparisons, then a gather of the learned table.

In int64 throughout: r = key - query [b, q, k]; n = |r| (bidirectional, plus B/2 for r > 0) or max(-r, 0);
bucket = offset + min(n, E) + sum_t [n >= boundary_t], one GreaterOrEqual per log-spaced bucket against the exact
boundaries of ``families.t5.buckets.bucket_boundaries`` (a chain of adds rather than one broadcast compare, so the peak
intermediate stays [b, q, k] however many buckets there are). The table ``relative_attention_bias``
[num_buckets, heads] is stored rounded once to the artifact dtype and widened to float32 (exactly) before the gather.
Bucket indices are in range for any positions, so the graph needs no guard; the runner still rejects positions
outside [0, max_positions).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ropeexport.families.bias.export import unsqueeze
from ropeexport.families.t5.buckets import bucket_boundaries, max_exact
from ropeexport.families.t5.spec import T5Spec, t5_table
from ropeexport.graph.onnx_io import GraphBuilder
from ropeexport.numerics import round_once


def t5_bias_nodes(g: GraphBuilder, spec: T5Spec, qpos: str, kpos: str) -> str:
    """float32 bias [b, heads, q, k] before the mask."""
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    q = unsqueeze(g, qpos, [2], "t5_q_axes")  # [b, q, 1]
    k = unsqueeze(g, kpos, [1], "t5_k_axes")  # [b, 1, k]
    relative = g.op("Sub", [k, q])  # r = j - i, [b, q, k]
    zero = g.const("t5_zero", i64(0))
    if spec.bidirectional:
        after = g.op("Cast", [g.op("Greater", [relative, zero])], to=TensorProto.INT64)
        offset = g.op("Mul", [after, g.const("t5_half_buckets", i64(spec.num_buckets // 2))])
        n = g.op("Abs", [relative])
    else:
        offset = None
        n = g.op("Max", [g.op("Neg", [relative]), zero])
    bucket = g.op("Min", [n, g.const("t5_max_exact", i64(max_exact(spec.num_buckets, spec.bidirectional)))])
    if offset is not None:
        bucket = g.op("Add", [bucket, offset])
    for t, boundary in enumerate(bucket_boundaries(spec.num_buckets, spec.bidirectional, spec.max_distance), 1):
        passed = g.op("GreaterOrEqual", [n, g.const(f"t5_boundary_{t}", i64(boundary))])
        bucket = g.op("Add", [bucket, g.op("Cast", [passed], to=TensorProto.INT64)])
    table = g.const("relative_attention_bias", round_once(t5_table(spec), spec.dtype))  # [buckets, heads]
    table32 = g.op("Cast", [table], to=TensorProto.FLOAT)
    rows = g.op("Gather", [table32, bucket], axis=0)  # [b, q, k, heads]
    return g.op("Transpose", [rows], perm=[0, 3, 1, 2])  # [b, heads, q, k]
