"""KERPLE's bias subgraph: -r1 log(1 + r2 |i - j|) or -r1 |i - j|^r2 from 2H float32 scalars and the position ids.

log(1 + x) is Kahan's identity log(u) * x / (u - 1) with u = fl(1 + x) (and x itself where u == 1): u - 1 is exact
for u in [1, 2^24], and the quotient cancels the rounding of 1 + x, so small x keeps full relative precision where
a plain Log(1 + x) would keep only the bits of x that survive the add.
"""

from __future__ import annotations

import numpy as np

from ropeexport.families.bias.export import position_grid
from ropeexport.families.kerple.spec import KerpleSpec, kerple_params
from ropeexport.graph.onnx_io import GraphBuilder


def kerple_bias_nodes(g: GraphBuilder, spec: KerpleSpec, qpos: str, kpos: str) -> str:
    """float32 bias [b, heads, q, k] before the mask; the artifact stores only r1 and r2."""
    r1, r2 = (p.astype(np.float32).reshape(1, -1, 1, 1) for p in kerple_params(spec))  # exact: dtype-rounded values
    q, k = position_grid(g)
    distance = g.op("Abs", [g.op("Sub", [q, k])])  # |i - j|, [b, 1, q, k], exact below 2^24
    r2_name = g.const("kerple_r2", r2)
    if spec.kernel == "log":
        x = g.op("Mul", [r2_name, distance])  # [b, h, q, k]
        one = g.const("kerple_one", np.array(1.0, np.float32))
        u = g.op("Add", [one, x])
        kahan = g.op("Div", [g.op("Mul", [g.op("Log", [u]), x]), g.op("Sub", [u, one])])
        kernel = g.op("Where", [g.op("Equal", [u, one]), x, kahan])
    else:
        kernel = g.op("Pow", [distance, r2_name])  # [b, h, q, k]
    return g.op("Mul", [g.const("kerple_neg_r1", -r1), kernel])
