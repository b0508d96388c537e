"""RoPE as an ONNX graph, fused (opset-23 ``RotaryEmbedding``) or decomposed (opset-17 primitives).

Artifact contract: inputs ``query`` [batch, num_heads, seq, head_dim], ``key`` [batch, num_kv_heads, seq, head_dim]
(table dtype), ``position_ids`` int64 [batch, seq]; outputs ``query_out`` and ``key_out`` with the input shapes.

Tables are initializers ``cos_table`` / ``sin_table`` [regimes * max_positions, rotary_dim / 2]: computed in float64
(``table_regimes``), rounded once to the table dtype, half width (never duplicated to full width). How a call picks
its rows, with L = max(position_ids) + 1:
- static schedules: row = position;
- ``switch`` (longrope): row = position + max_positions when L > original_max_position_embeddings (the long table);
- ``continuous`` (dynamic NTK): rows of the default table while L <= original, otherwise cos/sin computed in the graph
  in float64 from L and rounded once (an ``If``, so the short case pays nothing).
Positions outside [0, max_positions) are mapped to an index past the table, so the lookup itself fails at run time:
ONNX ``Gather`` would otherwise wrap a negative index to the end of the table.
"""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from ropeexport.encodings.rope import table_regimes
from ropeexport.encodings.schedules import get_schedule
from ropeexport.export.onnx_io import ONNX_DTYPES, GraphBuilder, make_model
from ropeexport.numerics import round_once
from ropeexport.spec import RopeSpec

OPSETS = {"fused": 23, "decomposed": 17}


def _tables(g: GraphBuilder, spec: RopeSpec) -> tuple[str, str]:
    regimes = table_regimes(spec)
    cos = np.concatenate([round_once(c, spec.dtype) for c, _ in regimes])  # [regimes * P, r/2]
    sin = np.concatenate([round_once(s, spec.dtype) for _, s in regimes])
    return g.const("cos_table", cos), g.const("sin_table", sin)


def _row_index(g: GraphBuilder, spec: RopeSpec, length: str | None) -> str:
    """Table rows for position_ids [b, s]: shifted to the long table when asked, out of range when invalid."""
    P = spec.max_positions
    pos = "position_ids"
    bad = g.op(
        "Or",
        [
            g.op("Less", [pos, g.const("zero_i64", np.array(0, np.int64))]),
            g.op("Not", [g.op("Less", [pos, g.const("max_positions", np.array(P, np.int64))])]),
        ],
    )
    rows = pos
    schedule = get_schedule(spec.scaling)
    if schedule.regime == "switch":
        assert length is not None, "a switched schedule needs the call length"
        threshold = g.const("original_length", np.array(schedule.threshold(spec.scaling_params), np.int64))
        use_long = g.op("Cast", [g.op("Greater", [length, threshold])], to=TensorProto.INT64)
        rows = g.op("Add", [pos, g.op("Mul", [use_long, g.const("table_rows", np.array(P, np.int64))])])
    n_rows = P * (2 if schedule.regime == "switch" else 1)
    return g.op("Where", [bad, g.const("past_table", np.array(n_rows, np.int64)), rows], name="row_index")


def _length(g: GraphBuilder) -> str:
    """L = max(position_ids) + 1, a scalar int64."""
    return g.op(
        "Add",
        [g.op("ReduceMax", ["position_ids"], keepdims=0), g.const("one_i64", np.array(1, np.int64))],
        name="call_length",
    )


def _dynamic_branch(spec: RopeSpec, length: str) -> onnx.GraphProto:
    """If-branch computing cos/sin [b, s, r/2] for dynamic NTK once L > original, in float64, rounded once."""
    g = GraphBuilder(prefix="dyn_")
    p = spec.scaling_params
    r, factor, original = spec.rotary_dim, p["factor"], p["original_max_position_embeddings"]
    f64 = np.float64
    # base(L) = theta * (factor * L / original - (factor - 1)) ** (r / (r - 2)); inv_freq_i = base^(-2i/r)
    ratio = g.op(
        "Sub",
        [
            g.op(
                "Mul",
                [
                    g.op("Cast", [length], to=TensorProto.DOUBLE),
                    g.const("factor_per_len", np.array(factor / original, f64)),
                ],
            ),
            g.const("factor_minus_one", np.array(factor - 1, f64)),
        ],
    )
    log_base = g.op(
        "Add",
        [
            g.const("log_theta", np.array(math.log(spec.theta), f64)),
            g.op("Mul", [g.const("base_power", np.array(r / (r - 2), f64)), g.op("Log", [ratio])]),
        ],
    )
    exponents = g.const("neg_exponents", -np.arange(0, r, 2, dtype=f64) / r)  # [r/2]
    inv_freq = g.op("Exp", [g.op("Mul", [exponents, log_base])])
    positions = g.op(
        "Unsqueeze",
        [g.op("Cast", ["position_ids"], to=TensorProto.DOUBLE), g.const("last_axis", np.array([-1], np.int64))],
    )
    angles = g.op("Mul", [positions, inv_freq])  # [b, s, r/2] float64
    dtype = ONNX_DTYPES[spec.dtype]
    cos = g.op("Cast", [g.op("Cos", [angles])], to=dtype, name="dyn_cos")
    sin = g.op("Cast", [g.op("Sin", [angles])], to=dtype, name="dyn_sin")
    outs = [helper.make_tensor_value_info(n, dtype, None) for n in (cos, sin)]
    return helper.make_graph(g.nodes, "dynamic_ntk", [], outs, g.initializers)


def _cos_sin_rows(g: GraphBuilder, spec: RopeSpec) -> tuple[str, str, str | None]:
    """(cos, sin, rows): table names plus row index for a fused node, or per-token [b, s, r/2] with rows None."""
    schedule = get_schedule(spec.scaling)
    cos_table, sin_table = _tables(g, spec)
    length = _length(g) if schedule.regime != "static" else None
    rows = _row_index(g, spec, length)
    if schedule.regime != "continuous":
        if spec.graph == "fused":
            return cos_table, sin_table, rows
        return g.op("Gather", [cos_table, rows], name="cos"), g.op("Gather", [sin_table, rows], name="sin"), None
    # The gathers run before the If whichever branch it takes: they are what rejects a bad position.
    cos = g.op("Gather", [cos_table, rows], name="cos_default")
    sin = g.op("Gather", [sin_table, rows], name="sin_default")
    dtype = ONNX_DTYPES[spec.dtype]
    assert length is not None, "a continuous schedule needs the call length"
    keep = helper.make_graph(
        [helper.make_node("Identity", [cos], ["keep_cos"]), helper.make_node("Identity", [sin], ["keep_sin"])],
        "default_table",
        [],
        [helper.make_tensor_value_info(n, dtype, None) for n in ("keep_cos", "keep_sin")],
    )
    past = g.op(
        "Greater", [length, g.const("original_length", np.array(schedule.threshold(spec.scaling_params), np.int64))]
    )
    branch = _dynamic_branch(spec, length)
    cos, sin = g.op("If", [past], n_out=2, name="schedule", then_branch=branch, else_branch=keep)
    return cos, sin, None


def _rotate_decomposed(g: GraphBuilder, spec: RopeSpec, x: str, cos: str, sin: str, out: str) -> None:
    """X [b, h, s, d] rotated by cos/sin [b, s, r/2] with opset-17 primitives, written to ``out``."""
    r, d = spec.rotary_dim, spec.head_dim
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    cos4 = g.op("Unsqueeze", [cos, g.const(f"{x}_head_axis", i64(1))])  # [b, 1, s, r/2]
    sin4 = g.op("Unsqueeze", [sin, g.const(f"{x}_head_axis2", i64(1))])
    rot, tail = (x, None) if r == d else g.op("Split", [x, g.const(f"{x}_split_tail", i64(r, d - r))], n_out=2, axis=-1)
    if spec.layout == "half":
        xa, xb = g.op("Split", [rot, g.const(f"{x}_split_half", i64(r // 2, r // 2))], n_out=2, axis=-1)
        axis = -1
    else:
        pairs = g.op("Reshape", [rot, g.const(f"{x}_pairs", i64(0, 0, 0, r // 2, 2))])  # [b, h, s, r/2, 2]
        xa, xb = g.op("Split", [pairs, g.const(f"{x}_split_pair", i64(1, 1))], n_out=2, axis=-1)
        cos4 = g.op("Unsqueeze", [cos4, g.const(f"{x}_pair_axis", i64(-1))])  # [b, 1, s, r/2, 1]
        sin4 = g.op("Unsqueeze", [sin4, g.const(f"{x}_pair_axis2", i64(-1))])
        axis = -1
    ya = g.op("Sub", [g.op("Mul", [xa, cos4]), g.op("Mul", [xb, sin4])])
    yb = g.op("Add", [g.op("Mul", [xb, cos4]), g.op("Mul", [xa, sin4])])
    parts = [ya, yb]
    if spec.layout == "half":
        rotated = g.op("Concat", parts, axis=axis, name=None if tail else out)
    else:
        merged = g.op("Concat", parts, axis=-1)
        rotated = g.op("Reshape", [merged, g.const(f"{x}_merge", i64(0, 0, 0, r))], name=None if tail else out)
    if tail:
        g.op("Concat", [rotated, tail], axis=-1, name=out)


def build_rope_graph(spec: RopeSpec) -> onnx.ModelProto:
    """The ONNX model for a RoPE spec (contract in the module docstring)."""
    g = GraphBuilder()
    cos, sin, rows = _cos_sin_rows(g, spec)
    dtype = ONNX_DTYPES[spec.dtype]
    interleaved = int(spec.layout != "half")
    for x, heads in (("query", spec.num_heads), ("key", spec.num_kv_heads)):
        if spec.graph == "fused":
            inputs = [x, cos, sin] + ([rows] if rows else [])
            g.op(
                "RotaryEmbedding",
                inputs,
                name=f"{x}_out",
                interleaved=interleaved,
                num_heads=heads,
                rotary_embedding_dim=spec.rotary_dim,
            )
        else:
            _rotate_decomposed(g, spec, x, cos, sin, f"{x}_out")
    io = lambda name, heads: helper.make_tensor_value_info(name, dtype, ["batch", heads, "seq", spec.head_dim])  # noqa: E731
    graph = helper.make_graph(
        g.nodes,
        spec.name,
        [
            io("query", spec.num_heads),
            io("key", spec.num_kv_heads),
            helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"]),
        ],
        [io("query_out", spec.num_heads), io("key_out", spec.num_kv_heads)],
        g.initializers,
    )
    metadata = {
        "ropeexport.encoding": spec.encoding,
        "ropeexport.spec": json.dumps(spec.to_dict(), sort_keys=True),
        # Runners read these two to reject positions outside the table before running anything.
        "ropeexport.max_positions": str(spec.max_positions),
        "ropeexport.position_inputs": "position_ids",
    }
    return make_model(graph, OPSETS[spec.graph], metadata=metadata)
