"""RoPE's planted bugs: rotations, positions, tables, scaling schedules and the scores graph, each exported wrong.

Every bug here claims a RoPE spec (``rope()``: small, GQA, partial rotation) and starts from its correct export
(``core`` module doc). The length-dependent schedules switch at ``ORIGINAL``; a tracing exporter saw ``TRACE``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ropeexport.families.rope.reference import table_regimes
from ropeexport.families.rope.schedules import get_schedule
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.numerics import round_once
from ropeexport.planted.core import (
    PlantedBug,
    checks,
    export,
    insert_before,
    nodes_of,
    producer,
    prune,
    rewire,
    set_initializer,
)

P = 512  # max_positions of the RoPE artifacts
ORIGINAL = 128  # original_max_position_embeddings of the length-dependent schedules
TRACE = 256  # the length a tracing exporter saw: constants frozen at it, tables cut to it
SCALING: dict[str, dict[str, Any]] = {
    "default": {},
    "linear": {"factor": 4.0},
    "yarn": {"factor": 4.0, "original_max_position_embeddings": ORIGINAL},
    "dynamic": {"factor": 4.0, "original_max_position_embeddings": ORIGINAL},
    "longrope": {
        "original_max_position_embeddings": ORIGINAL,
        "short_factor": [1.0 + 0.02 * i for i in range(12)],
        "long_factor": [1.0 + 1.5 * i for i in range(12)],
    },
    "proportional": {"partial_rotary_factor": 0.25, "factor": 1.0},  # Gemma 4's global layers' share
}


def rope(**fields: Any) -> RopeSpec:
    """A small GQA RoPE spec with partial rotation (24 of 32 channels); ``fields`` override."""
    base: dict[str, Any] = {"head_dim": 32, "rotary_dim": 24, "num_heads": 4, "num_kv_heads": 2, "max_positions": P}
    base |= fields
    base.setdefault("scaling_params", SCALING[base.get("scaling", "default")])
    spec = RopeSpec(**base)
    if spec.max_positions != P and "name" not in fields:  # the default name does not say how long the table is
        spec = spec.replace(name=f"{spec.name}-p{spec.max_positions}")
    return spec


def _claiming(spec: Any, model: onnx.ModelProto) -> onnx.ModelProto:
    """A model exported from another spec, labelled as ``spec``'s artifact (its metadata names the claimed spec)."""
    del model.metadata_props[:]
    model.metadata_props.extend(export(spec).metadata_props)
    return model


def _with_tables(spec: RopeSpec, cos: np.ndarray, sin: np.ndarray) -> onnx.ModelProto:
    """The correct graph with other float64 tables, rounded once to the spec dtype as the exporter does."""
    model = export(spec)
    set_initializer(model, "cos_table", round_once(cos, spec.dtype))
    set_initializer(model, "sin_table", round_once(sin, spec.dtype))
    return model


# --- the bugs: each takes the claimed spec and returns the wrong model ----------------------------------------------


def interleaved_rotation(spec: RopeSpec) -> onnx.ModelProto:
    """GPT-NeoX (half) weights exported with the GPT-J / Meta rotation: ``interleaved=1`` on RotaryEmbedding."""
    model = export(spec)
    for node in nodes_of(model, "RotaryEmbedding"):
        for attr in node.attribute:
            if attr.name == "interleaved":
                attr.i = 1
    return model


def positions_plus_one(spec: RopeSpec) -> onnx.ModelProto:
    """1-based positions: ``attention_mask.cumsum(-1)`` without the ``- 1``, added in front of everything."""
    model = export(spec)
    set_initializer(model, "one_based", np.array(1, np.int64))
    rewire(model.graph, "position_ids", "position_ids_1based")
    model.graph.node.insert(0, helper.make_node("Add", ["position_ids", "one_based"], ["position_ids_1based"]))
    return model


def table_rows_shifted(spec: RopeSpec) -> onnx.ModelProto:
    """Tables built for positions 1..P (``arange(1, P + 1)``): row p holds the angles of position p + 1."""
    longer = table_regimes(spec.replace(max_positions=spec.max_positions + 1))
    (cos, sin), *_ = longer
    return _with_tables(spec, cos[1:], sin[1:])


def scaling_ignored(spec: RopeSpec) -> onnx.ModelProto:
    """The scaling block of the config never read: the artifact carries default (unscaled) frequencies."""
    return _claiming(spec, export(spec.replace(scaling="default", scaling_params={})))


def proportional_without_zero_tail(spec: RopeSpec) -> onnx.ModelProto:
    """Gemma 4's proportional share read as a partial rotary width (Megatron-Bridge #4195): p x d channels rotate in
    pairs (i, i + p*d/2) at theta^(-2i/(p*d)), not every channel in pairs (i, i + d/2) with a zero-frequency tail.
    """  # noqa: D205
    params = spec.scaling_params
    partial = spec.replace(scaling="linear", scaling_params={"factor": max(1.0, params["factor"])},
                           rotary_dim=int(spec.rotary_dim * params["partial_rotary_factor"]))  # fmt: skip
    return _claiming(spec, export(partial))


def proportional_one_head_dim(spec: RopeSpec) -> onnx.ModelProto:
    """The proportional table made at half the head_dim (Gemma 4's sliding 256 for its global 512, optimum #2436)."""
    narrow = get_schedule(spec.scaling).frequencies(spec.rotary_dim // 2, spec.theta, spec.scaling_params, 1)
    inv = np.zeros(spec.rotary_dim // 2)
    inv[: narrow.inv_freq.size] = narrow.inv_freq
    angles = np.arange(spec.max_positions, dtype=np.float64)[:, None] * inv[None, :]  # [P, r/2]
    return _with_tables(spec, np.cos(angles), np.sin(angles))


def attention_factor_dropped(spec: RopeSpec) -> onnx.ModelProto:
    """Scaled frequencies, but cos/sin without the schedule's attention factor (mscale) multiplied in."""
    regimes = table_regimes(spec)
    cos = np.concatenate([c / np.hypot(c, s) for c, s in regimes])  # each (cos, sin) pair back to unit length
    sin = np.concatenate([s / np.hypot(c, s) for c, s in regimes])
    return _with_tables(spec, cos, sin)


def _angles_in(spec: RopeSpec, dtype: type) -> onnx.ModelProto:
    freqs = get_schedule(spec.scaling).frequencies(spec.rotary_dim, spec.theta, spec.scaling_params, spec.max_positions)
    positions: np.ndarray = np.arange(spec.max_positions).astype(dtype)[:, None]
    angles = (positions * freqs.inv_freq.astype(dtype)).astype(np.float64)  # the product rounds in ``dtype``
    return _with_tables(spec, np.cos(angles), np.sin(angles))


def fp16_angles(spec: RopeSpec) -> onnx.ModelProto:
    """An fp16 model computing ``position.half() * inv_freq.half()``: angles rounded to fp16 before cos/sin."""
    return _angles_in(spec, np.float16)


def fp32_angles(spec: RopeSpec) -> onnx.ModelProto:
    """Angles as Hugging Face computes them, ``float32(position) * float32(inv_freq)``, then cos/sin."""
    return _angles_in(spec, np.float32)


def dynamic_branch_folded(spec: RopeSpec) -> onnx.ModelProto:
    """Dynamic NTK's ``L > original`` folded to False at a short trace: the default table at every length."""
    model = export(spec)
    set_initializer(model, "traced_condition", np.array(False))
    for node in nodes_of(model, "If"):
        node.input[0] = "traced_condition"
    return prune(model)


def dynamic_base_frozen(spec: RopeSpec) -> onnx.ModelProto:
    """Dynamic NTK's base computed for the trace length (L = TRACE baked in), not for the call's L."""
    model = export(spec)
    set_initializer(model, "trace_length", np.array(TRACE, np.int64))
    for node in nodes_of(model, "If"):
        branch = next(a.g for a in node.attribute if a.name == "then_branch")
        rewire(branch, "row_length", "trace_length")
    return model


def _longrope_switch(model: onnx.ModelProto) -> onnx.NodeProto:
    return next(n for n in nodes_of(model, "Greater") if "row_length" in n.input)


def longrope_frozen(trace: int) -> Callable[[RopeSpec], onnx.ModelProto]:
    """LongRoPE's switch evaluated in Python at trace time: the table of a call of length ``trace``, always."""

    def plant(spec: RopeSpec) -> onnx.ModelProto:
        model = export(spec)
        set_initializer(model, "trace_length", np.array(trace, np.int64))
        _longrope_switch(model).input[0] = "trace_length"
        return prune(model)

    plant.__doc__ = longrope_frozen.__doc__
    return plant


def longrope_length_from_seq(spec: RopeSpec) -> onnx.ModelProto:
    """L taken as the call's sequence length (``x.shape[-2]``), not max(position_ids) + 1: decode calls use short."""
    model = export(spec)
    add = producer(model, "row_length")
    add.output[0] = "row_length_unused"
    insert_before(model, add, [helper.make_node("Shape", ["position_ids"], ["row_length"], start=1, end=2)])
    return prune(model)


def length_over_batch(spec: RopeSpec) -> onnx.ModelProto:
    """One L for the whole batch, max over every row + 1 (vLLM #27414): each row's ReduceMax made to reduce all."""
    model = export(spec)
    reduce = producer(model, producer(model, "row_length").input[0])  # ReduceMax(position_ids) over the row axis
    del reduce.input[1:]  # opset 18+: the axes input
    kept = [a for a in reduce.attribute if a.name != "axes"]  # opset 17: the axes attribute
    del reduce.attribute[:]
    reduce.attribute.extend(kept)
    return prune(model)


def longrope_switch_inclusive(spec: RopeSpec) -> onnx.ModelProto:
    """LongRoPE switching at L >= original instead of L > original (the long factors one length too early)."""
    model = export(spec)
    _longrope_switch(model).op_type = "GreaterOrEqual"
    return model


def _truncated(spec: RopeSpec, rows: int) -> onnx.ModelProto:
    model = export(spec)
    for name in ("cos_table", "sin_table"):
        table = next(t for t in model.graph.initializer if t.name == name)
        set_initializer(model, name, numpy_helper.to_array(table)[:rows])
    return model


def table_cut_guard_moved(spec: RopeSpec) -> onnx.ModelProto:
    """Tables for the trace length (TRACE rows) under a max_positions claim of P; the in-graph guard moved to TRACE."""
    model = _truncated(spec, TRACE)
    set_initializer(model, "position_ids_max_positions", np.array(TRACE, np.int64))
    set_initializer(model, "position_ids_past_table", np.array(TRACE, np.int64))
    return model


def table_cut_clamped(spec: RopeSpec) -> onnx.ModelProto:
    """Tables for the trace length, positions clamped to their last row (a "safe" gather): runs, wrong past it."""
    model = _truncated(spec, TRACE)
    set_initializer(model, "last_row", np.array(TRACE - 1, np.int64))
    where = producer(model, "position_ids_rows")
    clamp = helper.make_node("Min", [where.input[2], "last_row"], ["position_ids_clamped"])
    where.input[2] = "position_ids_clamped"
    insert_before(model, where, [clamp])
    return model


def positions_from_arange(spec: RopeSpec) -> onnx.ModelProto:
    """position_ids ignored, ``arange(seq)`` used instead: wrong with left padding, KV-cache offsets and decode."""
    model = export(spec)
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    for name, value in (("arange_zero", i64(0)), ("arange_one", i64(1)), ("seq_axis", i64(1)), ("row_axis", i64([0]))):
        set_initializer(model, name, value)
    rewire(model.graph, "position_ids", "arange_ids")
    arange = [
        helper.make_node("Shape", ["position_ids"], ["ids_shape"]),
        helper.make_node("Gather", ["ids_shape", "seq_axis"], ["seq_len"], axis=0),
        helper.make_node("Range", ["arange_zero", "seq_len", "arange_one"], ["arange"]),
        helper.make_node("Unsqueeze", ["arange", "row_axis"], ["arange_row"]),
        helper.make_node("Expand", ["arange_row", "ids_shape"], ["arange_ids"]),
    ]
    insert_before(model, model.graph.node[0], arange)
    return model


def cos_sin_swapped(spec: RopeSpec) -> onnx.ModelProto:
    """The caches passed in the wrong order (sin, cos), as when porting from a contrib op with another signature."""
    model = export(spec)
    for node in nodes_of(model, "RotaryEmbedding"):
        node.input[1], node.input[2] = node.input[2], node.input[1]
    return model


def rotation_transposed(spec: RopeSpec) -> onnx.ModelProto:
    """Rotation by -m theta (R transposed): ``rotate_half`` as cat(x2, -x1) instead of cat(-x2, x1)."""
    model = export(spec)
    products = {o for n in nodes_of(model, "Mul") for o in n.output}
    for node in model.graph.node:
        if node.op_type in ("Sub", "Add") and set(node.input) <= products:
            node.op_type = "Add" if node.op_type == "Sub" else "Sub"
    return model


def key_heads_tiled(spec: RopeSpec) -> onnx.ModelProto:
    """GQA key heads expanded with ``repeat`` (tiles 0,1,0,1,...) instead of ``repeat_interleave`` (0,0,...,1,1,...)."""
    model = export(spec)
    logits = next(n for n in nodes_of(model, "MatMul") if n.input[0] == "query_rotated")
    transpose = producer(model, logits.input[1])  # Transpose(grouped key)
    set_initializer(model, "tile_heads", np.array([1, spec.num_heads // spec.num_kv_heads, 1, 1], np.int64))
    insert_before(model, transpose, [helper.make_node("Tile", ["key_rotated", "tile_heads"], ["key_tiled"])])
    transpose.input[0] = "key_tiled"
    return prune(model)


def scores_length_from_queries(spec: RopeSpec) -> onnx.ModelProto:
    """The scores graph's L from the query positions alone (the decode step's), ignoring the keys' positions."""
    model = export(spec)
    both = producer(model, producer(model, "row_length").input[0])  # Max(ReduceMax(query), ReduceMax(key))
    del both.input[1:]
    return prune(model)


# --- the list ------------------------------------------------------------------------------------------------------


ROPE_OUT = ("query_out", "key_out")
BUGS: list[PlantedBug] = [
    PlantedBug(
        "half-interleaved-swapped",
        "half spec exported with the interleaved rotation",
        rope(),
        interleaved_rotation,
        checks(*ROPE_OUT),
    ),
    PlantedBug(
        "positions-plus-one-in-graph",
        "position_ids + 1 in the graph (1-based positions)",
        rope(),
        positions_plus_one,
        checks(*ROPE_OUT, guards=("position -1",)),
    ),
    PlantedBug(
        "table-rows-off-by-one",
        "tables built for positions 1..P",
        rope(),
        table_rows_shifted,
        checks(*ROPE_OUT, tables=True),
    ),
    PlantedBug(
        "linear-scaling-ignored",
        "linear (factor 4) spec exported with default frequencies",
        rope(scaling="linear"),
        scaling_ignored,
        checks(*ROPE_OUT, tables=True),
    ),
    PlantedBug(
        "yarn-scaling-ignored",
        "YaRN (factor 4) spec exported with default frequencies",
        rope(scaling="yarn"),
        scaling_ignored,
        checks(*ROPE_OUT, tables=True),
    ),
    PlantedBug(
        "proportional-pairs-without-zero-tail",
        "Gemma 4's proportional RoPE (a quarter of the pairs real) exported as a partial rotary factor",
        rope(rotary_dim=32, scaling="proportional"),
        proportional_without_zero_tail,
        checks(*ROPE_OUT, tables=True),
    ),
    PlantedBug(
        "proportional-one-head-dim",
        "the proportional table built at half the head_dim (the sliding layers' width for the global ones)",
        rope(rotary_dim=32, scaling="proportional"),
        proportional_one_head_dim,
        checks(*ROPE_OUT, tables=True),
    ),
    PlantedBug(
        "yarn-attention-factor-dropped",
        "YaRN frequencies, mscale not applied to cos/sin",
        rope(scaling="yarn"),
        attention_factor_dropped,
        checks(*ROPE_OUT, tables=True),
    ),
    PlantedBug(
        "longrope-attention-factor-dropped",
        "LongRoPE factors, attention factor not applied to cos/sin",
        rope(scaling="longrope"),
        attention_factor_dropped,
        checks(*ROPE_OUT, tables=True),
    ),
    PlantedBug(
        "fp16-angles",
        "fp16 artifact, angles position * inv_freq rounded to fp16 before cos/sin (P = 2048)",
        rope(dtype="fp16", max_positions=2048),
        fp16_angles,
        checks(*ROPE_OUT, tables=True),
        {"position": range(1024, 2048)},  # the angle error grows with the position
    ),
    PlantedBug(
        "fp32-angles",
        "fp32 artifact, angles rounded to fp32 before cos/sin (P = 4096)",
        rope(max_positions=4096),
        fp32_angles,
        checks(*ROPE_OUT, tables=True),
        {"position": range(2048, 4096)},
    ),
    PlantedBug(
        "dynamic-ntk-if-folded",
        "dynamic NTK If condition folded to False at trace time",
        rope(scaling="dynamic"),
        dynamic_branch_folded,
        checks(*ROPE_OUT),
    ),
    PlantedBug(
        "dynamic-ntk-base-at-trace-length",
        f"dynamic NTK base computed for L = {TRACE} (the trace length), not the call's L",
        rope(scaling="dynamic"),
        dynamic_base_frozen,
        checks(*ROPE_OUT),
    ),
    PlantedBug(
        "longrope-frozen-short",
        "LongRoPE switch constant from an 8-token trace: always the short factors",
        rope(scaling="longrope"),
        longrope_frozen(8),
        checks(*ROPE_OUT),
    ),
    PlantedBug(
        "longrope-frozen-long",
        f"LongRoPE switch constant from a {P}-token trace: always the long factors",
        rope(scaling="longrope"),
        longrope_frozen(P),
        checks(*ROPE_OUT),
    ),
    PlantedBug(
        "longrope-length-from-seq-len",
        "LongRoPE L = the call's sequence length, not max(position_ids) + 1",
        rope(scaling="longrope"),
        longrope_length_from_seq,
        checks(*ROPE_OUT),
        {
            "probe": frozenset(
                {"end", "row-offsets", "decode", "unordered", "above-original", "long-regime-low-positions"}
            )
        },
    ),
    PlantedBug(
        "longrope-length-over-batch",
        "LongRoPE L = max over the whole batch + 1, not each row's own (a short row batched with a long one)",
        rope(scaling="longrope"),
        length_over_batch,
        checks(*ROPE_OUT),
        {"probe": frozenset({"row-offsets", "decode", "unordered"})},  # the probes whose rows differ in L
    ),
    PlantedBug(
        "dynamic-ntk-length-over-batch",
        "dynamic NTK base from the whole batch's L, not each row's own",
        rope(scaling="dynamic", graph="decomposed"),
        length_over_batch,
        checks(*ROPE_OUT),
        {"probe": frozenset({"row-offsets", "decode", "unordered"})},  # the probes whose rows differ in L
    ),
    PlantedBug(
        "longrope-switch-inclusive",
        "LongRoPE switch at L >= original instead of L > original",
        rope(scaling="longrope"),
        longrope_switch_inclusive,
        checks(*ROPE_OUT),
        {"probe": "below-original"},  # the one call with L == original
    ),
    PlantedBug(
        "table-short-guard-moved",
        f"tables of {TRACE} rows for max_positions {P}, graph guard moved to {TRACE}",
        rope(),
        table_cut_guard_moved,
        checks(*ROPE_OUT, tables=True),
    ),
    PlantedBug(
        "table-short-clamped",
        f"tables of {TRACE} rows for max_positions {P}, positions clamped to row {TRACE - 1} (decomposed Gather)",
        rope(graph="decomposed"),
        table_cut_clamped,
        checks(*ROPE_OUT, tables=True),
        {"position": range(TRACE, P)},
    ),
    PlantedBug(
        "positions-from-arange",
        "position_ids ignored, arange(seq) used",
        rope(),
        positions_from_arange,
        checks(*ROPE_OUT, guards=("position -1", f"position {P}")),
    ),
    PlantedBug(
        "cos-sin-swapped",
        "cos and sin caches passed in swapped order",
        rope(),
        cos_sin_swapped,
        checks(*ROPE_OUT),
    ),
    PlantedBug(
        "rotation-transposed",
        "rotation by -m theta (rotate_half sign flipped), decomposed graph",
        rope(graph="decomposed"),
        rotation_transposed,
        checks(*ROPE_OUT),
    ),
    PlantedBug(
        "gqa-key-heads-tiled",
        "scores, 8 query / 2 key heads: key heads tiled 0,1,0,1 instead of 0,0,0,0,1,...",
        rope(artifact="scores", num_heads=8, num_kv_heads=2),
        key_heads_tiled,
        checks("scores"),
        {"head": frozenset({1, 3, 4, 6})},  # the query heads whose key head changed (h % 2 != h // 4)
    ),
    PlantedBug(
        "scores-length-from-queries",
        "LongRoPE scores: L from the query positions only, not max over queries and keys",
        rope(artifact="scores", scaling="longrope"),
        scores_length_from_queries,
        checks("scores"),
    ),
]
