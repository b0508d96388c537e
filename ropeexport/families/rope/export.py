"""RoPE as an ONNX graph, fused (opset-23 ``RotaryEmbedding``) or decomposed (opset-17 primitives).

Artifact contract: inputs ``query`` [batch, num_heads, seq, head_dim], ``key`` [batch, num_kv_heads, seq, head_dim]
(table dtype), ``position_ids`` int64 [batch, seq]; outputs ``query_out`` and ``key_out`` with the input shapes.
The fused graph also takes query and key 3-D, [batch, seq, heads * head_dim]: its RotaryEmbedding nodes carry
``num_heads``, which is what the opset-23 operator needs for that form (the ``gqa`` block calls it so).

Tables are initializers ``cos_table`` / ``sin_table`` [regimes * max_positions, rotary_dim / 2]: computed in float64
(``table_regimes``), rounded once to the table dtype, half width (never duplicated to full width). Each batch row picks
its own regime from its own length L_b = max(position_ids[b]) + 1 (``row_lengths``, [b, 1]): what that request alone
would have (a row's positions count its real tokens from its first; left padding sits at a position no larger, so it
never lengthens a row), never the longest row of the batch, so a request's output does not depend on what it is
batched with (vLLM #27414 is the whole-batch rule in a server). How a row picks its table rows:
- static schedules: row = position;
- ``switch`` (longrope): row = position + max_positions when L_b > original_max_position_embeddings (the long
  table): a [b, 1] offset broadcast over the row;
- ``continuous`` (dynamic NTK): rows of the default table while L_b <= original, otherwise cos/sin computed in the
  graph in float64 from L_b and rounded once; the computing branch sits under an ``If`` on the longest row (a batch
  whose rows are all short pays nothing) and keeps the default rows of every short row (a ``Where`` per row).
M-RoPE (``mrope_section``): ``position_ids`` is int64 [3, batch, seq]; each axis gathers its [b, s, r/2] rows from
the one table, and frequency pair j keeps the rows of its axis (``spec.pair_axes()``, a constant Where per axis):
cos/sin per token, which the fused RotaryEmbedding takes without position_ids.
Positions outside [0, max_positions) are mapped to an index past the table, so the lookup itself fails at run time:
ONNX ``Gather`` would otherwise wrap a negative index to the end of the table. Called behind a guard of the same
range (a block, a decoder), that clamp is dropped with the piece's own guard (``graph.guard``): one range test a call.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from ropeexport.dtypes import DTYPES
from ropeexport.families.rope.reference import table_regimes
from ropeexport.families.rope.schedules import get_schedule
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.forms import FORMS
from ropeexport.graph.onnx_io import GraphBuilder, artifact_metadata, make_model
from ropeexport.numerics import round_once


def rope_tables(g: GraphBuilder, spec: RopeSpec) -> tuple[str, str]:
    """Add ``cos_table`` / ``sin_table`` [regimes * P, r/2], float64 rounded once to the dtype; return their names."""
    regimes = table_regimes(spec)
    cos = np.concatenate([round_once(c, spec.dtype) for c, _ in regimes])  # [regimes * P, r/2]
    sin = np.concatenate([round_once(s, spec.dtype) for _, s in regimes])
    return g.const("cos_table", cos), g.const("sin_table", sin)


def row_lengths(g: GraphBuilder, positions: list[str], opset: int) -> str:
    """L_b = max over row b of every position input + 1, int64 [b, 1]: the length that picks row b's regime.

    ``opset``: the graph's (ReduceMax takes its axes from an input since opset 18, an attribute before).
    """
    axis = g.shared_const("row_axis", np.array([1], np.int64))
    reduce = (lambda p: g.op("ReduceMax", [p, axis], keepdims=1)) if opset >= 18 else (
        lambda p: g.op("ReduceMax", [p], axes=[1], keepdims=1))  # fmt: skip
    maxima = [reduce(p) for p in positions]  # [b, 1] each
    top = maxima[0] if len(maxima) == 1 else g.op("Max", maxima)
    return g.op("Add", [top, g.const("one_i64", np.array(1, np.int64))], name="row_length")


def _row_index(g: GraphBuilder, spec: RopeSpec, length: str | None, pos: str) -> str:
    """Table rows for ``pos`` [b, s]: a row shifted to the long table when its own L_b ([b, 1] ``length``) asks,
    past the table where a position is invalid.
    """  # noqa: D205
    P = spec.max_positions
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    below = g.op("Less", [pos, g.const(f"{pos}_zero", i64(0))])
    beyond = g.op("Not", [g.op("Less", [pos, g.const(f"{pos}_max_positions", i64(P))])])
    bad = g.op("Or", [below, beyond])
    rows = pos
    schedule = get_schedule(spec.scaling)
    if schedule.regime == "switch":
        assert length is not None, "a switched schedule needs the row lengths"
        threshold = g.const(f"{pos}_original_length", i64(schedule.threshold(spec.scaling_params)))
        use_long = g.op("Cast", [g.op("Greater", [length, threshold])], to=TensorProto.INT64)  # [b, 1]
        rows = g.op("Add", [pos, g.op("Mul", [use_long, g.const(f"{pos}_table_rows", i64(P))])])
    n_rows = P * (2 if schedule.regime == "switch" else 1)
    return g.op("Where", [bad, g.const(f"{pos}_past_table", i64(n_rows)), rows], name=f"{pos}_rows")


def _dynamic_branch(spec: RopeSpec, length: str, pos: str, default: tuple[str, str]) -> onnx.GraphProto:
    """If-branch computing cos/sin [b, s, r/2] for dynamic NTK once some row's L_b > original: each such row at its
    own L_b in float64, rounded once; every other row keeps its ``default`` table rows (a Where per row).
    """  # noqa: D205
    g = GraphBuilder(prefix=f"dyn_{pos}_")
    p = spec.scaling_params
    r, factor, original = spec.rotary_dim, p["factor"], p["original_max_position_embeddings"]
    f64 = lambda v: np.array(v, np.float64)  # noqa: E731
    last = g.const("last_axis", np.array([-1], np.int64))
    # A short row's L_b is raised to original (base = theta there) so its unused lanes stay finite.
    original_length = g.const("original", np.array(original, np.int64))
    lengths = g.op("Unsqueeze", [g.op("Max", [length, original_length]), last])  # [b, 1, 1]
    # base(L) = theta * (factor * L / original - (factor - 1)) ** (r / (r - 2)); inv_freq_i = base^(-2i/r)
    scaled = g.op(
        "Mul", [g.op("Cast", [lengths], to=TensorProto.DOUBLE), g.const("factor_per_len", f64(factor / original))]
    )
    ratio = g.op("Sub", [scaled, g.const("factor_minus_one", f64(factor - 1))])
    power = g.op("Mul", [g.const("base_power", f64(r / (r - 2))), g.op("Log", [ratio])])
    log_base = g.op("Add", [g.const("log_theta", f64(math.log(spec.theta))), power])  # [b, 1, 1]
    exponents = g.const("neg_exponents", -np.arange(0, r, 2, dtype=np.float64) / r)  # [r/2]
    inv_freq = g.op("Exp", [g.op("Mul", [exponents, log_base])])  # [b, 1, r/2]: each row its own base
    positions = g.op("Unsqueeze", [g.op("Cast", [pos], to=TensorProto.DOUBLE), last])  # [b, s, 1]
    angles = g.op("Mul", [positions, inv_freq])  # [b, s, r/2] float64
    dtype = DTYPES[spec.dtype].onnx
    past = g.op("Unsqueeze", [g.op("Greater", [length, original_length]), last])  # [b, 1, 1]: rows past original
    cos = g.op("Where", [past, g.op("Cast", [g.op("Cos", [angles])], to=dtype), default[0]], name=f"dyn_{pos}_cos")
    sin = g.op("Where", [past, g.op("Cast", [g.op("Sin", [angles])], to=dtype), default[1]], name=f"dyn_{pos}_sin")
    outs = [helper.make_tensor_value_info(n, dtype, None) for n in (cos, sin)]
    return helper.make_graph(g.nodes, f"dynamic_ntk_{pos}", [], outs, g.initializers)


def cos_sin_rows(
    g: GraphBuilder, spec: RopeSpec, tables: tuple[str, str], pos: str, length: str | None
) -> tuple[str, str, str | None]:
    """(cos, sin, rows) for one position input: tables plus rows for a fused node, or per-token [b, s, r/2].

    ``length``: ``row_lengths`` [b, 1] (None for a static schedule); each row takes its own regime.
    """
    schedule = get_schedule(spec.scaling)
    cos_table, sin_table = tables
    rows = _row_index(g, spec, length, pos)
    if schedule.regime != "continuous":
        if spec.graph == "fused":
            return cos_table, sin_table, rows
        cos = g.op("Gather", [cos_table, rows], name=f"{pos}_cos")
        return cos, g.op("Gather", [sin_table, rows], name=f"{pos}_sin"), None
    assert length is not None, "a continuous schedule needs the row lengths"
    # The gathers run before the If whichever branch it takes: they are what rejects a bad position.
    cos = g.op("Gather", [cos_table, rows], name=f"{pos}_cos_default")
    sin = g.op("Gather", [sin_table, rows], name=f"{pos}_sin_default")
    dtype = DTYPES[spec.dtype].onnx
    kept = [f"{pos}_keep_cos", f"{pos}_keep_sin"]
    keep = helper.make_graph(
        [helper.make_node("Identity", [cos], [kept[0]]), helper.make_node("Identity", [sin], [kept[1]])],
        f"default_table_{pos}",
        [],
        [helper.make_tensor_value_info(n, dtype, None) for n in kept],
    )
    threshold = g.const(f"{pos}_original", np.array(schedule.threshold(spec.scaling_params), np.int64))
    # ReduceMax without axes reduces every axis in every opset: the longest row, a scalar for the If.
    past = g.op("Greater", [g.op("ReduceMax", [length], keepdims=0), threshold])
    branch = _dynamic_branch(spec, length, pos, (cos, sin))
    cos, sin = g.op("If", [past], n_out=2, name=f"{pos}_schedule", then_branch=branch, else_branch=keep)
    return cos, sin, None


def mrope_cos_sin(
    g: GraphBuilder, spec: RopeSpec, tables: tuple[str, str], pos: str
) -> tuple[str, str, None]:
    """M-RoPE's (cos, sin) [b, s, r/2] for ``pos`` [3, b, s]: pair j from the rows of its axis (``pair_axes``).

    Where picks a stored value unchanged: the tables are rounded once, and so are these.
    """
    axes = np.array(spec.pair_axes(), np.int64)  # [r/2]
    per_axis = []
    for a in range(spec.position_axes):
        index = g.const(f"{pos}_axis{a}", np.array(a, np.int64))
        row = g.op("Gather", [pos, index], axis=0, name=f"{pos}_{a}")  # [b, s]: axis a's positions
        rows = _row_index(g, spec, None, row)
        per_axis.append([g.op("Gather", [table, rows]) for table in tables])  # cos, sin [b, s, r/2]
    picked = list(per_axis[0])
    for a in range(1, spec.position_axes):
        mask = g.const(f"{pos}_pairs_of_axis{a}", axes == a)  # bool [r/2]
        picked = [g.op("Where", [mask, mine, other]) for mine, other in zip(per_axis[a], picked, strict=True)]
    cos = g.op("Identity", [picked[0]], name=f"{pos}_cos")
    return cos, g.op("Identity", [picked[1]], name=f"{pos}_sin"), None


def _rotate(
    g: GraphBuilder, spec: RopeSpec, x: str, heads: int, cos_sin_rows: tuple[str, str, str | None], out: str
) -> None:
    """x [b, heads, s, d] rotated by ``cos_sin_rows`` of its position input, written to ``out``."""
    cos, sin, rows = cos_sin_rows
    if spec.graph == "fused":
        inputs = [x, cos, sin] + ([rows] if rows else [])
        interleaved = int(spec.layout != "half")
        g.op(
            "RotaryEmbedding",
            inputs,
            name=out,
            interleaved=interleaved,
            num_heads=heads,
            rotary_embedding_dim=spec.rotary_dim,
        )
    else:
        _rotate_decomposed(g, spec, x, cos, sin, out)


def _rotate_decomposed(g: GraphBuilder, spec: RopeSpec, x: str, cos: str, sin: str, out: str) -> None:
    """Rotate x [b, h, s, d] by cos/sin [b, s, r/2] with opset-17 primitives, written to ``out``."""
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


def _io(name: str, dtype: int, dims: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, dims)


def build_rope_graph(spec: RopeSpec) -> onnx.ModelProto:
    """The ``rope`` artifact: query and key rotated by position_ids (contract in the module docstring)."""
    g = GraphBuilder()
    tables = rope_tables(g, spec)
    regime = get_schedule(spec.scaling).regime
    length = row_lengths(g, ["position_ids"], FORMS[spec.graph].opset) if regime != "static" else None
    rows = (  # shared by query and key
        mrope_cos_sin(g, spec, tables, "position_ids")
        if spec.mrope_section
        else cos_sin_rows(g, spec, tables, "position_ids", length)
    )
    for x, heads in (("query", spec.num_heads), ("key", spec.num_kv_heads)):
        _rotate(g, spec, x, heads, rows, f"{x}_out")
    return make_model(rope_graph(spec, g), FORMS[spec.graph].opset, metadata=artifact_metadata(spec, ["position_ids"]))


def rope_graph(spec: RopeSpec, g: GraphBuilder) -> onnx.GraphProto:
    """The ``rope`` artifact's graph around ``g``'s nodes: the contract's inputs and outputs (module docstring)."""
    dtype, d = DTYPES[spec.dtype].onnx, spec.head_dim
    position_dims: list[int | str] = [*([spec.position_axes] if spec.mrope_section else []), "batch", "seq"]
    return helper.make_graph(
        g.nodes,
        spec.name,
        [
            _io("query", dtype, ["batch", spec.num_heads, "seq", d]),
            _io("key", dtype, ["batch", spec.num_kv_heads, "seq", d]),
            _io("position_ids", TensorProto.INT64, position_dims),
        ],
        [
            _io("query_out", dtype, ["batch", spec.num_heads, "seq", d]),
            _io("key_out", dtype, ["batch", spec.num_kv_heads, "seq", d]),
        ],
        g.initializers,
    )


def build_rope_scores_graph(spec: RopeSpec) -> onnx.ModelProto:
    """The ``scores`` artifact: (R_i q_i) . (R_j k_j) / sqrt(head_dim) for every query i and key j.

    Inputs query [b, num_heads, q_len, d], key [b, num_kv_heads, k_len, d], query_position_ids [b, q_len],
    key_position_ids [b, k_len]; output scores [b, num_heads, q_len, k_len]. With grouped-query attention, query
    head h meets key head h // (num_heads / num_kv_heads). Row b's L_b for the schedule is max over both position
    inputs' row b + 1.
    """
    g = GraphBuilder()
    tables = rope_tables(g, spec)
    positions = ["query_position_ids", "key_position_ids"]
    regime = get_schedule(spec.scaling).regime
    length = row_lengths(g, positions, FORMS[spec.graph].opset) if regime != "static" else None
    _rotate(g, spec, "query", spec.num_heads, cos_sin_rows(g, spec, tables, positions[0], length), "query_rotated")
    _rotate(g, spec, "key", spec.num_kv_heads, cos_sin_rows(g, spec, tables, positions[1], length), "key_rotated")
    key = "key_rotated"
    H, KV, d = spec.num_heads, spec.num_kv_heads, spec.head_dim
    if KV != H:
        i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
        grouped = g.op("Unsqueeze", ["key_rotated", g.const("group_axis", i64(2))])  # [b, KV, 1, k, d]
        shape = g.op(
            "Concat",
            [g.op("Shape", [grouped], end=2), g.const("group", i64(H // KV)), g.op("Shape", [grouped], start=3)],
            axis=0,
        )
        key = g.op("Reshape", [g.op("Expand", [grouped, shape]), g.const("heads_shape", i64(0, H, -1, d))])
    logits = g.op("MatMul", ["query_rotated", g.op("Transpose", [key], perm=[0, 1, 3, 2])])
    dtype = DTYPES[spec.dtype].onnx
    scale = g.const("scale", round_once(np.array(1.0 / math.sqrt(d)), spec.dtype))
    g.op("Mul", [logits, scale], name="scores")
    graph = helper.make_graph(
        g.nodes,
        spec.name,
        [
            _io("query", dtype, ["batch", H, "q_len", d]),
            _io("key", dtype, ["batch", KV, "k_len", d]),
            _io(positions[0], TensorProto.INT64, ["batch", "q_len"]),
            _io(positions[1], TensorProto.INT64, ["batch", "k_len"]),
        ],
        [_io("scores", dtype, ["batch", H, "q_len", "k_len"])],
        g.initializers,
    )
    return make_model(graph, FORMS[spec.graph].opset, metadata=artifact_metadata(spec, positions))
