"""Planted bugs: deliberately wrong artifacts that verification must fail, each with the checks that must catch it.

Every bug starts from the correct export of the spec the artifact claims to be and changes it the way a real exporter
goes wrong (a flipped attribute, a constant folded at trace time, a table built from the wrong formula), then runs the
ordinary verification (``verify_artifact``) against that claimed spec. The correct export of the same spec, verified
the same way, must pass: the planted edit is then the only difference between a pass and a fail.

A check is named ``REFERENCE:OUTPUT`` for a comparison (``float64:query_out``), ``table:NAME`` for a stored table
(``table:cos_table``), ``guard:CASE`` for an out-of-range call the graph must reject (``guard:position -1``) and
``property:NAME`` for a measured property. ``PlantedBug.expected`` lists the comparisons, tables and guards that must
fail, exactly; properties are reported but not required (they are a second line of defence).

Used by ``tests/verify/test_planted_bugs.py`` and ``tools/planted_bugs.py`` (the README's detection table).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ropeexport.encodings.alibi import AlibiSpec, alibi_slopes
from ropeexport.encodings.rope import table_regimes
from ropeexport.encodings.schedules import get_schedule
from ropeexport.export.onnx_io import save_model
from ropeexport.numerics import round_once
from ropeexport.registry import kind_for
from ropeexport.spec import RopeSpec
from ropeexport.verify.core import Verification, verify_artifact

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


def alibi(**fields: Any) -> AlibiSpec:
    """A causal ALiBi spec with 12 heads (not a power of two: the slope recipe's second branch)."""
    return AlibiSpec(**({"num_heads": 12, "head_dim": 64, "max_positions": 1024} | fields))


# --- graph editing -------------------------------------------------------------------------------------------------


def export(spec: Any) -> onnx.ModelProto:
    """The correct artifact of a spec (what ``build`` writes)."""
    return kind_for(spec).export(spec)


def _nodes(model: onnx.ModelProto, op_type: str) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == op_type]


def _producer(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if name in n.output)


def _set(model: onnx.ModelProto, name: str, array: np.ndarray) -> None:
    """Replace an initializer's value, or add it."""
    tensor = numpy_helper.from_array(np.asarray(array), name)
    for t in model.graph.initializer:
        if t.name == name:
            t.CopyFrom(tensor)
            return
    model.graph.initializer.append(tensor)


def _insert_before(model: onnx.ModelProto, anchor: onnx.NodeProto, nodes: list[onnx.NodeProto]) -> None:
    index = list(model.graph.node).index(anchor)
    for offset, node in enumerate(nodes):
        model.graph.node.insert(index + offset, node)


def _rewire(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Every node (subgraphs included) that reads ``old`` reads ``new`` instead."""
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _rewire(attr.g, old, new)


def _reads(graph: onnx.GraphProto) -> set[str]:
    names = {o.name for o in graph.output}
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                names |= _reads(attr.g)
    return names


def _prune(model: onnx.ModelProto) -> onnx.ModelProto:
    """Drop the nodes and initializers an edit left unread."""
    graph = model.graph
    while True:
        used = _reads(graph)
        dead = [n for n in graph.node if not set(n.output) & used]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    for tensor in [t for t in graph.initializer if t.name not in used]:
        graph.initializer.remove(tensor)
    return model


def _claiming(spec: Any, model: onnx.ModelProto) -> onnx.ModelProto:
    """A model exported from another spec, labelled as ``spec``'s artifact (its metadata names the claimed spec)."""
    del model.metadata_props[:]
    model.metadata_props.extend(export(spec).metadata_props)
    return model


def _with_tables(spec: RopeSpec, cos: np.ndarray, sin: np.ndarray) -> onnx.ModelProto:
    """The correct graph with other float64 tables, rounded once to the spec dtype as the exporter does."""
    model = export(spec)
    _set(model, "cos_table", round_once(cos, spec.dtype))
    _set(model, "sin_table", round_once(sin, spec.dtype))
    return model


# --- the bugs: each takes the claimed spec and returns the wrong model ----------------------------------------------


def interleaved_rotation(spec: RopeSpec) -> onnx.ModelProto:
    """GPT-NeoX (half) weights exported with the GPT-J / Meta rotation: ``interleaved=1`` on RotaryEmbedding."""
    model = export(spec)
    for node in _nodes(model, "RotaryEmbedding"):
        for attr in node.attribute:
            if attr.name == "interleaved":
                attr.i = 1
    return model


def positions_plus_one(spec: RopeSpec) -> onnx.ModelProto:
    """1-based positions: ``attention_mask.cumsum(-1)`` without the ``- 1``, added in front of everything."""
    model = export(spec)
    _set(model, "one_based", np.array(1, np.int64))
    _rewire(model.graph, "position_ids", "position_ids_1based")
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
    _set(model, "traced_condition", np.array(False))
    for node in _nodes(model, "If"):
        node.input[0] = "traced_condition"
    return _prune(model)


def dynamic_base_frozen(spec: RopeSpec) -> onnx.ModelProto:
    """Dynamic NTK's base computed for the trace length (L = TRACE baked in), not for the call's L."""
    model = export(spec)
    _set(model, "trace_length", np.array(TRACE, np.int64))
    for node in _nodes(model, "If"):
        branch = next(a.g for a in node.attribute if a.name == "then_branch")
        _rewire(branch, "call_length", "trace_length")
    return model


def _longrope_switch(model: onnx.ModelProto) -> onnx.NodeProto:
    return next(n for n in _nodes(model, "Greater") if "call_length" in n.input)


def longrope_frozen(trace: int) -> Callable[[RopeSpec], onnx.ModelProto]:
    """LongRoPE's switch evaluated in Python at trace time: the table of a call of length ``trace``, always."""

    def plant(spec: RopeSpec) -> onnx.ModelProto:
        model = export(spec)
        _set(model, "trace_length", np.array(trace, np.int64))
        _longrope_switch(model).input[0] = "trace_length"
        return _prune(model)

    plant.__doc__ = longrope_frozen.__doc__
    return plant


def longrope_length_from_seq(spec: RopeSpec) -> onnx.ModelProto:
    """L taken as the call's sequence length (``x.shape[-2]``), not max(position_ids) + 1: decode calls use short."""
    model = export(spec)
    add = _producer(model, "call_length")
    add.output[0] = "call_length_unused"
    _insert_before(model, add, [helper.make_node("Shape", ["position_ids"], ["call_length"], start=1, end=2)])
    return _prune(model)


def longrope_switch_inclusive(spec: RopeSpec) -> onnx.ModelProto:
    """LongRoPE switching at L >= original instead of L > original (the long factors one length too early)."""
    model = export(spec)
    _longrope_switch(model).op_type = "GreaterOrEqual"
    return model


def _truncated(spec: RopeSpec, rows: int) -> onnx.ModelProto:
    model = export(spec)
    for name in ("cos_table", "sin_table"):
        table = next(t for t in model.graph.initializer if t.name == name)
        _set(model, name, numpy_helper.to_array(table)[:rows])
    return model


def table_cut_guard_moved(spec: RopeSpec) -> onnx.ModelProto:
    """Tables for the trace length (TRACE rows) under a max_positions claim of P; the in-graph guard moved to TRACE."""
    model = _truncated(spec, TRACE)
    _set(model, "position_ids_max_positions", np.array(TRACE, np.int64))
    _set(model, "position_ids_past_table", np.array(TRACE, np.int64))
    return model


def table_cut_clamped(spec: RopeSpec) -> onnx.ModelProto:
    """Tables for the trace length, positions clamped to their last row (a "safe" gather): runs, wrong past it."""
    model = _truncated(spec, TRACE)
    _set(model, "last_row", np.array(TRACE - 1, np.int64))
    where = _producer(model, "position_ids_rows")
    clamp = helper.make_node("Min", [where.input[2], "last_row"], ["position_ids_clamped"])
    where.input[2] = "position_ids_clamped"
    _insert_before(model, where, [clamp])
    return model


def positions_from_arange(spec: RopeSpec) -> onnx.ModelProto:
    """position_ids ignored, ``arange(seq)`` used instead: wrong with left padding, KV-cache offsets and decode."""
    model = export(spec)
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    for name, value in (("arange_zero", i64(0)), ("arange_one", i64(1)), ("seq_axis", i64(1)), ("row_axis", i64([0]))):
        _set(model, name, value)
    _rewire(model.graph, "position_ids", "arange_ids")
    arange = [
        helper.make_node("Shape", ["position_ids"], ["ids_shape"]),
        helper.make_node("Gather", ["ids_shape", "seq_axis"], ["seq_len"], axis=0),
        helper.make_node("Range", ["arange_zero", "seq_len", "arange_one"], ["arange"]),
        helper.make_node("Unsqueeze", ["arange", "row_axis"], ["arange_row"]),
        helper.make_node("Expand", ["arange_row", "ids_shape"], ["arange_ids"]),
    ]
    _insert_before(model, model.graph.node[0], arange)
    return model


def cos_sin_swapped(spec: RopeSpec) -> onnx.ModelProto:
    """The caches passed in the wrong order (sin, cos), as when porting from a contrib op with another signature."""
    model = export(spec)
    for node in _nodes(model, "RotaryEmbedding"):
        node.input[1], node.input[2] = node.input[2], node.input[1]
    return model


def rotation_transposed(spec: RopeSpec) -> onnx.ModelProto:
    """Rotation by -m theta (R transposed): ``rotate_half`` as cat(x2, -x1) instead of cat(-x2, x1)."""
    model = export(spec)
    products = {o for n in _nodes(model, "Mul") for o in n.output}
    for node in model.graph.node:
        if node.op_type in ("Sub", "Add") and set(node.input) <= products:
            node.op_type = "Add" if node.op_type == "Sub" else "Sub"
    return model


def key_heads_tiled(spec: RopeSpec) -> onnx.ModelProto:
    """GQA key heads expanded with ``repeat`` (tiles 0,1,0,1,...) instead of ``repeat_interleave`` (0,0,...,1,1,...)."""
    model = export(spec)
    logits = next(n for n in _nodes(model, "MatMul") if n.input[0] == "query_rotated")
    transpose = _producer(model, logits.input[1])  # Transpose(grouped key)
    _set(model, "tile_heads", np.array([1, spec.num_heads // spec.num_kv_heads, 1, 1], np.int64))
    _insert_before(model, transpose, [helper.make_node("Tile", ["key_rotated", "tile_heads"], ["key_tiled"])])
    transpose.input[0] = "key_tiled"
    return _prune(model)


def scores_length_from_queries(spec: RopeSpec) -> onnx.ModelProto:
    """The scores graph's L from the query positions alone (the decode step's), ignoring the keys' positions."""
    model = export(spec)
    both = _producer(model, _producer(model, "call_length").input[0])  # Max(ReduceMax(query), ReduceMax(key))
    del both.input[1:]
    return _prune(model)


def alibi_slopes_as(slopes: Callable[[int], np.ndarray]) -> Callable[[AlibiSpec], onnx.ModelProto]:
    """The bias subgraph with other slopes (``slopes(num_heads)``) stored in ``neg_slopes``."""

    def plant(spec: AlibiSpec) -> onnx.ModelProto:
        model = export(spec)
        _set(model, "neg_slopes", -slopes(spec.num_heads).astype(np.float32).reshape(1, -1, 1, 1))
        return model

    return plant


def geometric_slopes(n: int) -> np.ndarray:
    """2^(-8h/n) for h = 1..n, the power-of-two formula applied to any n."""
    return 2.0 ** (-8.0 * np.arange(1, n + 1) / n)


def repeated_slopes(n: int) -> np.ndarray:
    """The closest power of two's slopes, repeated until there are n."""
    closest = 2 ** math.floor(math.log2(n))
    return np.resize(alibi_slopes(closest), n)


def bias_before_scale(spec: AlibiSpec) -> onnx.ModelProto:
    """scores = (q . k + bias) / sqrt(d) instead of q . k / sqrt(d) + bias."""
    model = export(spec)
    add = _producer(model, "scores")
    scale = _producer(model, add.input[0])  # Mul(MatMul, scale)
    add.input[0], add.output[0] = scale.input[0], "biased_logits"
    scale.input[0], scale.output[0] = "biased_logits", "scores"
    model.graph.node.remove(scale)
    model.graph.node.append(scale)
    return model


def mask_hides_diagonal(spec: AlibiSpec) -> onnx.ModelProto:
    """The causal mask built with ``triu(diagonal=0)``: each query is hidden from its own key (j >= i masked)."""
    model = export(spec)
    # The mask's Where: on the bias (-inf) in the general path, on the distance (+inf) in ALiBi's single pass.
    where = next(n for n in _nodes(model, "Where") if n.input[1] in ("minus_inf", "plus_inf"))
    _producer(model, where.input[0]).op_type = "GreaterOrEqual"
    return model


# --- the table -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlantedBug:
    """A wrong artifact: the spec it claims to be, how it is made, and the checks that must fail (module doc)."""

    name: str
    summary: str
    spec: Any
    plant: Callable[[Any], onnx.ModelProto]
    expected: frozenset[str]
    where: Mapping[str, Any] = field(default_factory=dict)  # the worst element's location (``located``)


def _checks(*outputs: str, tables: bool = False, guards: tuple[str, ...] = ()) -> frozenset[str]:
    names = {f"{ref}:{o}" for ref in ("eager", "float64") for o in outputs}
    names |= {"table:cos_table", "table:sin_table"} if tables else set()
    return frozenset(names | {f"guard:{g}" for g in guards})


ROPE_OUT = ("query_out", "key_out")
BUGS: list[PlantedBug] = [
    PlantedBug(
        "half-interleaved-swapped",
        "half spec exported with the interleaved rotation",
        rope(),
        interleaved_rotation,
        _checks(*ROPE_OUT),
    ),
    PlantedBug(
        "positions-plus-one-in-graph",
        "position_ids + 1 in the graph (1-based positions)",
        rope(),
        positions_plus_one,
        _checks(*ROPE_OUT, guards=("position -1",)),
    ),
    PlantedBug(
        "table-rows-off-by-one",
        "tables built for positions 1..P",
        rope(),
        table_rows_shifted,
        _checks(*ROPE_OUT, tables=True),
    ),
    PlantedBug(
        "linear-scaling-ignored",
        "linear (factor 4) spec exported with default frequencies",
        rope(scaling="linear"),
        scaling_ignored,
        _checks(*ROPE_OUT, tables=True),
    ),
    PlantedBug(
        "yarn-scaling-ignored",
        "YaRN (factor 4) spec exported with default frequencies",
        rope(scaling="yarn"),
        scaling_ignored,
        _checks(*ROPE_OUT, tables=True),
    ),
    PlantedBug(
        "yarn-attention-factor-dropped",
        "YaRN frequencies, mscale not applied to cos/sin",
        rope(scaling="yarn"),
        attention_factor_dropped,
        _checks(*ROPE_OUT, tables=True),
    ),
    PlantedBug(
        "longrope-attention-factor-dropped",
        "LongRoPE factors, attention factor not applied to cos/sin",
        rope(scaling="longrope"),
        attention_factor_dropped,
        _checks(*ROPE_OUT, tables=True),
    ),
    PlantedBug(
        "fp16-angles",
        "fp16 artifact, angles position * inv_freq rounded to fp16 before cos/sin (P = 2048)",
        rope(dtype="fp16", max_positions=2048),
        fp16_angles,
        _checks(*ROPE_OUT, tables=True),
        {"position": range(1024, 2048)},  # the angle error grows with the position
    ),
    PlantedBug(
        "fp32-angles",
        "fp32 artifact, angles rounded to fp32 before cos/sin (P = 4096)",
        rope(max_positions=4096),
        fp32_angles,
        _checks(*ROPE_OUT, tables=True),
        {"position": range(2048, 4096)},
    ),
    PlantedBug(
        "dynamic-ntk-if-folded",
        "dynamic NTK If condition folded to False at trace time",
        rope(scaling="dynamic"),
        dynamic_branch_folded,
        _checks(*ROPE_OUT),
    ),
    PlantedBug(
        "dynamic-ntk-base-at-trace-length",
        f"dynamic NTK base computed for L = {TRACE} (the trace length), not the call's L",
        rope(scaling="dynamic"),
        dynamic_base_frozen,
        _checks(*ROPE_OUT),
    ),
    PlantedBug(
        "longrope-frozen-short",
        "LongRoPE switch constant from an 8-token trace: always the short factors",
        rope(scaling="longrope"),
        longrope_frozen(8),
        _checks(*ROPE_OUT),
    ),
    PlantedBug(
        "longrope-frozen-long",
        f"LongRoPE switch constant from a {P}-token trace: always the long factors",
        rope(scaling="longrope"),
        longrope_frozen(P),
        _checks(*ROPE_OUT),
    ),
    PlantedBug(
        "longrope-length-from-seq-len",
        "LongRoPE L = the call's sequence length, not max(position_ids) + 1",
        rope(scaling="longrope"),
        longrope_length_from_seq,
        _checks(*ROPE_OUT),
        {
            "probe": frozenset(
                {"end", "row-offsets", "decode", "unordered", "above-original", "long-regime-low-positions"}
            )
        },
    ),
    PlantedBug(
        "longrope-switch-inclusive",
        "LongRoPE switch at L >= original instead of L > original",
        rope(scaling="longrope"),
        longrope_switch_inclusive,
        _checks(*ROPE_OUT),
        {"probe": "below-original"},  # the one call with L == original
    ),
    PlantedBug(
        "table-short-guard-moved",
        f"tables of {TRACE} rows for max_positions {P}, graph guard moved to {TRACE}",
        rope(),
        table_cut_guard_moved,
        _checks(*ROPE_OUT, tables=True),
    ),
    PlantedBug(
        "table-short-clamped",
        f"tables of {TRACE} rows for max_positions {P}, positions clamped to row {TRACE - 1} (decomposed Gather)",
        rope(graph="decomposed"),
        table_cut_clamped,
        _checks(*ROPE_OUT, tables=True),
        {"position": range(TRACE, P)},
    ),
    PlantedBug(
        "positions-from-arange",
        "position_ids ignored, arange(seq) used",
        rope(),
        positions_from_arange,
        _checks(*ROPE_OUT, guards=("position -1", f"position {P}")),
    ),
    PlantedBug(
        "cos-sin-swapped",
        "cos and sin caches passed in swapped order",
        rope(),
        cos_sin_swapped,
        _checks(*ROPE_OUT),
    ),
    PlantedBug(
        "rotation-transposed",
        "rotation by -m theta (rotate_half sign flipped), decomposed graph",
        rope(graph="decomposed"),
        rotation_transposed,
        _checks(*ROPE_OUT),
    ),
    PlantedBug(
        "gqa-key-heads-tiled",
        "scores, 8 query / 2 key heads: key heads tiled 0,1,0,1 instead of 0,0,0,0,1,...",
        rope(artifact="scores", num_heads=8, num_kv_heads=2),
        key_heads_tiled,
        _checks("scores"),
        {"head": frozenset({1, 3, 4, 6})},  # the query heads whose key head changed (h % 2 != h // 4)
    ),
    PlantedBug(
        "scores-length-from-queries",
        "LongRoPE scores: L from the query positions only, not max over queries and keys",
        rope(artifact="scores", scaling="longrope"),
        scores_length_from_queries,
        _checks("scores"),
    ),
    PlantedBug(
        "alibi-slopes-geometric-12",
        "12 heads: slopes 2^(-8h/12) (the power-of-two formula applied to 12)",
        alibi(artifact="bias"),
        alibi_slopes_as(geometric_slopes),
        _checks("attention_bias") | {"table:neg_slopes"},
        {"head": range(8, 12)},  # the largest errors sit in the non-power-of-two tail
    ),
    PlantedBug(
        "alibi-slopes-repeated-12",
        "12 heads: the 8-head slopes repeated (2^-1..2^-8, 2^-1..2^-4)",
        alibi(artifact="bias"),
        alibi_slopes_as(repeated_slopes),
        _checks("attention_bias") | {"table:neg_slopes"},
        {"head": range(8, 12)},  # heads 0..7 are right
    ),
    PlantedBug(
        "alibi-bias-before-scale",
        "scores = (q.k + bias) / sqrt(d) instead of q.k / sqrt(d) + bias",
        alibi(artifact="scores"),
        bias_before_scale,
        _checks("scores"),
    ),
    PlantedBug(
        "causal-mask-hides-diagonal",
        "causal mask j >= i (triu diagonal 0): each query hidden from itself",
        alibi(artifact="bias"),
        mask_hides_diagonal,
        _checks("attention_bias"),
        {"query_position": 0, "key_position": 0, "actual": "-inf"},
    ),
    PlantedBug(
        "causal-mask-hides-diagonal-general-path",
        "the same mask bug in the general bias path (fp16 scores: clamp, Cast, Expand, then the mask)",
        alibi(artifact="scores", dtype="fp16"),
        mask_hides_diagonal,
        _checks("scores"),
        {"query_position": 0, "key_position": 0, "actual": "-inf"},
    ),
]


def correct_specs() -> list[Any]:
    """Every spec the table's bugs claim to be, once each (their correct builds must pass)."""
    seen: dict[str, Any] = {}
    for bug in BUGS:
        key = repr(sorted(bug.spec.to_dict().items()))
        seen.setdefault(key, bug.spec)
    return list(seen.values())


# --- running -------------------------------------------------------------------------------------------------------


def failed_checks(verification: Verification) -> list[str]:
    """The names of every failing check (module doc), in report order, each once."""
    names = [f"{c.reference}:{c.output}" for c in verification.comparisons if not c.passed]
    names += [f"table:{t['name']}" for t in verification.tables if not t["passed"]]
    names += [f"guard:{g['case']}" for g in verification.guards if not g["passed"]]
    names += [f"property:{p['name']}" for p in getattr(verification, "properties", []) if p.get("passed") is False]
    return list(dict.fromkeys(names))


def located(worst: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    """Whether the worst element sits where expected: each key equal, or in the range / set given for it."""
    return all(
        worst.get(k) in v if isinstance(v, (range, frozenset, set, tuple)) else worst.get(k) == v
        for k, v in where.items()
    )


def worst_error(verification: Verification) -> dict[str, Any]:
    """The failing comparison with the largest max_abs (float64 first on ties), else the worst failing table.

    A comparison whose runtime raised has max_abs "inf" and, in place of a location, the error of the last probe
    that raised.
    """
    failing = [c for c in verification.comparisons if not c.passed]
    if failing:
        c = max(failing, key=lambda c: (c.max_abs, c.reference == "float64"))
        max_abs = c.max_abs if np.isfinite(c.max_abs) else str(c.max_abs)
        return {"check": f"{c.reference}:{c.output}", "max_abs": max_abs, **c.worst}
    tables = [t for t in verification.tables if not t["passed"]]
    if tables:
        t = max(tables, key=lambda t: t.get("max_ulp") or 0.0)
        return {"check": f"table:{t['name']}", **{k: v for k, v in t.items() if k != "name"}}
    return {}


@dataclass(frozen=True)
class Detection:
    """What verification said about one artifact: a planted bug, or a correct build (``expected`` empty).

    ``passed`` is None when verification raised instead of returning a verdict (``error`` says what): neither a
    pass nor a fail, and a bug in verification. ``located`` tells whether the worst element sits where the bug's
    ``where`` says it must.
    """

    name: str
    summary: str
    artifact: str
    passed: bool | None
    failed: tuple[str, ...]
    expected: tuple[str, ...]
    worst: dict[str, Any]
    located: bool = True
    error: str | None = None

    @property
    def as_expected(self) -> bool:
        """Exactly the expected comparisons, tables and guards failed (properties aside), and nothing raised."""
        return self.error is None and set(self.expected) == {f for f in self.failed if not f.startswith("property:")}

    def verdict(self, control: Detection | None = None) -> str:
        """One word for a planted bug, given the correct build of the same spec (``control``).

        ``caught`` (exactly the expected checks, worst element where expected), ``caught-by-other-checks``,
        ``caught-elsewhere``, ``false-alarm-only`` (every failing check fails the correct build too: nothing was
        learnt about the bug), ``missed`` (verification passed) or ``raised`` (verification crashed).
        """
        if self.error is not None:
            return "raised"
        if self.passed:
            return "missed"
        if control is not None and not set(self.failed) - set(control.failed):
            return "false-alarm-only"
        if not self.as_expected:
            return "caught-by-other-checks"
        return "caught" if self.located else "caught-elsewhere"

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly."""
        return {
            "name": self.name,
            "summary": self.summary,
            "artifact": self.artifact,
            "passed": self.passed,
            "failed": list(self.failed),
            "expected": list(self.expected),
            "as_expected": self.as_expected,
            "located": self.located,
            "worst": self.worst,
            "error": self.error,
        }


def _verify(spec: Any, model: onnx.ModelProto, directory: Path) -> tuple[Verification | None, str | None]:
    save_model(model, Path(directory))  # checked by onnx: a planted bug is still a valid model
    try:
        return verify_artifact(spec, Path(directory) / "model.onnx", ["ort"]), None
    except Exception as exc:  # verification must return a verdict; record what escaped instead of crashing the suite
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def detect(bug: PlantedBug, directory: Path) -> Detection:
    """Plant the bug and verify the wrong artifact as the spec it claims to be (files go to ``directory``)."""
    v, error = _verify(bug.spec, bug.plant(bug.spec), directory)
    expected = tuple(sorted(bug.expected))
    if v is None:
        return Detection(bug.name, bug.summary, bug.spec.name, None, (), expected, {}, False, error)
    worst = worst_error(v)
    return Detection(
        bug.name,
        bug.summary,
        bug.spec.name,
        v.passed,
        tuple(failed_checks(v)),
        expected,
        worst,
        located(worst, bug.where),
    )


def verify_correct(spec: Any, directory: Path) -> Detection:
    """Verify the correct export of a spec the same way: it must pass, nothing failing."""
    v, error = _verify(spec, export(spec), directory)
    summary = "the exporter's own graph, unmodified"
    if v is None:
        return Detection("correct build", summary, spec.name, None, (), (), {}, True, error)
    return Detection("correct build", summary, spec.name, v.passed, tuple(failed_checks(v)), (), worst_error(v))
