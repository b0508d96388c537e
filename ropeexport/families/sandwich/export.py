"""Sandwich's bias subgraph: the float32 table [max_positions, heads] gathered by |i - j|.

Distances are int64. A position outside [0, max_positions) is mapped to row max_positions, past the table, so the
Gather itself fails (as RoPE's ``_row_index`` does): |i - j| of a bad pair can otherwise land inside the table, and
ONNX Gather wraps a negative index.
"""

from __future__ import annotations

import numpy as np

from ropeexport.families.bias.export import unsqueeze
from ropeexport.families.sandwich.reference import sandwich_table
from ropeexport.families.sandwich.spec import SandwichSpec
from ropeexport.graph.onnx_io import GraphBuilder


def _outside(g: GraphBuilder, spec: SandwichSpec, pos: str) -> str:
    """bool, same shape as ``pos``: the position is negative or past the table."""
    below = g.op("Less", [pos, g.const(f"sandwich_{pos}_zero", np.array(0, np.int64))])
    within = g.op("Less", [pos, g.const(f"sandwich_{pos}_max_positions", np.array(spec.max_positions, np.int64))])
    return g.op("Or", [below, g.op("Not", [within])])


def sandwich_bias_nodes(g: GraphBuilder, spec: SandwichSpec, qpos: str, kpos: str) -> str:
    """float32 bias [b, heads, q, k] before the mask."""
    q = unsqueeze(g, qpos, [2], "sandwich_q_axes")  # [b, q, 1]
    k = unsqueeze(g, kpos, [1], "sandwich_k_axes")  # [b, 1, k]
    distance = g.op("Abs", [g.op("Sub", [q, k])])  # [b, q, k]
    bad = g.op(
        "Or",
        [
            unsqueeze(g, _outside(g, spec, qpos), [2], "sandwich_bad_q_axes"),
            unsqueeze(g, _outside(g, spec, kpos), [1], "sandwich_bad_k_axes"),
        ],
    )
    past = g.const("sandwich_past_table", np.array(spec.max_positions, np.int64))
    rows = g.op("Where", [bad, past, distance], name="sandwich_rows")
    table = g.const("sandwich_table", sandwich_table(spec))  # [P, heads] float32
    gathered = g.op("Gather", [table, rows], axis=0)  # [b, q, k, heads]
    return g.op("Transpose", [gathered], perm=[0, 3, 1, 2])  # [b, heads, q, k]
