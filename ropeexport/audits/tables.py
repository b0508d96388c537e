"""Constant rotary tables replaced in place by exact ones (what ``graft`` does to a table site).

A table is an initializer (of the main graph or of any subgraph), a Constant node's output, or the Constant branches
of an ``If`` (the builder's LongRoPE: each branch gets the exact table of the regime its values are nearest to, with
its own row count). Each table is the config's schedule in float64 (``families.rope.regimes``), rounded once to the
stored dtype, at least max_positions rows where the model's was shorter. Where the config's LongRoPE switches and the
model has one table, the switch is added beside every reader, in the reader's own graph (``add_switch``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from ropeexport.audits.causes import estimate_frequencies
from ropeexport.audits.patterns.base import name_of
from ropeexport.errors import SpecError
from ropeexport.families.rope.regimes import check_lengths, exact_tables, frequencies, table_switch
from ropeexport.numerics import round_once

DTYPE_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def replace_tables(
    site: dict[str, Any], cos: ir.Value, sin: ir.Value, spec: Any, switched: set[int]
) -> list[dict[str, Any]]:
    """Every table of a table site (its ``cos`` / ``sin`` values) replaced by the exact ones: what was replaced.

    ``switched``: ids of tables an earlier site's switch already took, with every reader (skipped; this one's added).
    """
    pairs = [tables_of(cos), tables_of(sin)]
    if not pairs[0] or len(pairs[0]) != len(pairs[1]):
        raise SpecError("model", f"the {site['kind']} site reading {site['cos']!r} reads tables ropeexport "
                        "cannot replace (neither constants nor an If between constants)")  # fmt: skip
    if id(cos) in switched:
        return []
    if needs_switch(spec, pairs[0]):
        switched.add(id(cos))
        return [add_switch(cos, sin, pairs, spec)]
    replaced = []
    for (old_cos, set_cos), (old_sin, set_sin) in zip(*pairs, strict=True):
        cos_array, sin_array = old_cos.numpy(), old_sin.numpy()
        rows = max(cos_array.shape[0], spec.max_positions) if len(pairs[0]) == 1 else cos_array.shape[0]
        length: int | str  # the regime's call length, or "stacked"
        if table_switch(spec) is not None and len(pairs[0]) == 1:  # stacked (needs_switch said no)
            length, (new_cos, new_sin) = "stacked", stacked(spec, rows, str(cos_array.dtype))
        else:
            length = regime_length(spec, cos_array, sin_array)
            new_cos, new_sin = exact_rounded(spec, length, rows, str(cos_array.dtype))
        set_cos(ir.tensor(new_cos.astype(cos_array.dtype), name=old_cos.name))
        set_sin(ir.tensor(new_sin.astype(sin_array.dtype), name=old_sin.name))
        replaced.append({"cos": site["cos"], "sin": site["sin"], "rows": int(rows), "regime_length": length,
                         "dtype": str(cos_array.dtype)})  # fmt: skip
    return replaced


def exact_rounded(spec: Any, length: int, rows: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin [rows, r/2] of the regime of call L, float64 rounded once to ``dtype``."""
    short = DTYPE_NAMES.get(dtype, "fp32")
    cos, sin = exact_tables(spec, length, rows)
    return round_once(cos, short), round_once(sin, short)


def regime_length(spec: Any, table: np.ndarray, sin: np.ndarray) -> int:
    """The call length whose regime ``table`` is nearest to (its frequencies read from its values)."""
    lengths = check_lengths(spec)[:2]
    if len(lengths) == 1:
        return spec.max_positions
    seen = estimate_frequencies(table.astype(np.float64), sin.astype(np.float64))
    gaps = [float(np.max(np.abs(seen - frequencies(spec, n)[0]) / frequencies(spec, n)[0])) for n in lengths]
    return lengths[int(np.argmin(gaps))]


def tables_of(value: ir.Value) -> list[tuple[Any, Any]]:
    """(tensor, setter) for each constant table ``value`` can be: an initializer (of any graph), a Constant node's
    output, or an If's Constant branches.
    """  # noqa: D205
    if value.const_value is not None:
        return [(value.const_value, lambda t, v=value: setattr(v, "const_value", t))]
    node = value.producer()
    if node is not None and node.op_type == "Constant" and "value" in node.attributes:
        return [(node.attributes["value"].value,
                 lambda t, s=node: s.attributes.__setitem__("value", ir.AttrTensor("value", t)))]  # fmt: skip
    if node is None or node.op_type != "If":
        return []
    index = next(i for i, o in enumerate(node.outputs) if o is value)
    found = []
    for name in ("then_branch", "else_branch"):
        branch = node.attributes[name].value
        source = branch.outputs[index].producer()
        if source is None or source.op_type != "Constant" or "value" not in source.attributes:
            return []
        found.append((source.attributes["value"].value,
                      lambda t, s=source: s.attributes.__setitem__("value", ir.AttrTensor("value", t))))  # fmt: skip
    return found


def needs_switch(spec: Any, pairs: list[tuple[Any, Any]]) -> bool:
    """One constant table where the config's schedule switches (LongRoPE) and the graph has no switch: not the short
    and long tables stacked ([2 x max_positions, w], rows shifted by the graph as ropeexport's own form does).
    """  # noqa: D205
    if table_switch(spec) is None or len(pairs) != 1:
        return False
    return pairs[0][0].numpy().shape[0] != 2 * spec.max_positions


def stacked(spec: Any, rows: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """The short and the long exact tables stacked: [2 x max_positions, w] (a table the graph already switches in)."""
    limit, half = table_switch(spec), rows // 2
    assert limit is not None, "stacked tables are those of a switched schedule"
    short, long = exact_rounded(spec, limit, half, dtype), exact_rounded(spec, limit + 1, half, dtype)
    return np.concatenate([short[0], long[0]]), np.concatenate([short[1], long[1]])


def add_switch(cos: ir.Value, sin: ir.Value, pairs: list[list[tuple[Any, Any]]], spec: Any) -> dict[str, Any]:
    """The config's LongRoPE switch put in where the model has one table (``pairs``: ``tables_of`` cos and sin).

    The nodes it takes are inserted beside each reader, in the reader's own graph.

    Readers that take table rows by position (RotaryEmbedding, Gather) get the short and long tables stacked
    ([2P, w]) and each row's positions shifted by P when its own L_b = max(positions[b]) + 1 > original (the rope
    family's own rule, ``families.rope.regimes``); GroupQueryAttention, which counts positions itself, gets an ``If``
    on its total_sequence_length picking the short or the long table (as onnxruntime-genai's builder writes
    LongRoPE). Its one cos/sin cache serves every row of a call, so a batch whose rows sit on both sides of the
    switch (seqlens_k + 1 on both sides of original) cannot be served there: such a call fails at run time (a
    Gather named ``..__graft_mixed_regimes_refused`` past its one-row table), never computing one row in the other's
    regime. Anything else reading the table is refused.
    """
    limit = table_switch(spec)
    assert limit is not None, "needs_switch said the schedule switches"
    old = pairs[0][0][0].numpy()
    rows, dtype = max(old.shape[0], spec.max_positions), old.dtype
    short = [t.astype(dtype) for t in exact_rounded(spec, limit, rows, str(dtype))]
    long = [t.astype(dtype) for t in exact_rounded(spec, limit + 1, rows, str(dtype))]
    readers = list({id(u.node): u.node for u in [*cos.uses(), *sin.uses()]}.values())  # each node once
    kinds = {node.op_type for node in readers}
    if kinds == {"GroupQueryAttention"}:
        made: dict[str, tuple[ir.Value, ir.Value]] = {}
        for node in readers:
            total = node.inputs[6]
            if total is None:
                raise SpecError("model", f"{node.op_type} {node.name!r} reads the table {cos.name!r} without "
                                "total_sequence_length: graft cannot add the LongRoPE switch to it")  # fmt: skip
            key = name_of(total)
            if key not in made:
                total = _refuse_mixed(node, total, node.inputs[5], limit, name_of(cos))
                made[key] = _if_between(node, total, limit, short, long, name_of(cos))
            node.replace_input_with(7, made[key][0])
            node.replace_input_with(8, made[key][1])
        how = "an If on total_sequence_length between the short and the long table"
    elif kinds <= {"RotaryEmbedding", "Gather"}:
        pairs[0][0][1](ir.tensor(np.concatenate([short[0], long[0]]), name=cos.name))
        pairs[1][0][1](ir.tensor(np.concatenate([short[1], long[1]]), name=sin.name))
        shifted: dict[str, ir.Value] = {}
        for node in readers:
            index = 1 if node.op_type == "Gather" or node.domain == "com.microsoft" else 3
            pos = node.inputs[index]
            if pos is None:
                raise SpecError("model", f"{node.op_type} {node.name!r} reads the table {cos.name!r} without "
                                "positions: graft cannot add the LongRoPE switch to it")  # fmt: skip
            key = name_of(pos)
            if key not in shifted:
                shifted[key] = _shift_rows(node, pos, limit, rows)
            node.replace_input_with(index, shifted[key])
        how = "short and long tables stacked, rows shifted by max_positions when L > original"
    else:
        raise SpecError("model", f"the table {cos.name!r} is read by {', '.join(sorted(kinds))}: graft adds the "
                        "LongRoPE switch to RotaryEmbedding, Gather and GroupQueryAttention readers only")  # fmt: skip
    return {"cos": cos.name, "sin": sin.name, "rows": int(rows), "regime_length": f"switch at {limit}",
            "dtype": str(dtype), "replaced_by": how}  # fmt: skip


def _if_between(before: ir.Node, total: ir.Value, limit: int, short: list[np.ndarray], long: list[np.ndarray],
                name: str) -> tuple[ir.Value, ir.Value]:  # fmt: skip
    """(cos, sin) of an If picking ``long`` when ``total`` > ``limit``, else ``short``; inserted before ``before``."""

    def branch(tables: list[np.ndarray], tag: str) -> ir.Graph:
        nodes = []
        for table, part in zip(tables, ("cos", "sin"), strict=True):
            node = ir.node("Constant", [], attributes={"value": ir.tensor(table, name=f"{name}_{tag}_{part}")})
            node.outputs[0].name = f"{name}__graft_{tag}_{part}"
            nodes.append(node)
        return ir.Graph([], [n.outputs[0] for n in nodes], nodes=nodes, name=f"{name}__graft_{tag}")

    count = total.dtype.numpy() if total.dtype is not None else np.int32
    threshold = ir.node("Constant", [], attributes={"value": ir.tensor(np.array(limit, count))})
    threshold.outputs[0].name = f"{name}__graft_original"
    longer = ir.node("Greater", [total, threshold.outputs[0]])
    longer.outputs[0].name = f"{name}__graft_long"
    pick = ir.node("If", [longer.outputs[0]], num_outputs=2,
                   attributes={"then_branch": ir.AttrGraph("then_branch", branch(long, "long")),
                               "else_branch": ir.AttrGraph("else_branch", branch(short, "short"))})  # fmt: skip
    for out, part in zip(pick.outputs, ("cos", "sin"), strict=True):
        out.name = f"{name}__graft_{part}"
    _insert(before, [threshold, longer, pick])
    return pick.outputs[0], pick.outputs[1]


def _refuse_mixed(before: ir.Node, total: ir.Value, seqlens: ir.Value | None, limit: int, name: str) -> ir.Value:
    """``total`` + 0, through a Gather that fails at run time when the rows' lengths seqlens_k + 1 lie on both sides
    of ``limit`` (module doc of ``add_switch``); inserted before ``before``. ``total`` as it is without seqlens_k.
    """  # noqa: D205
    if seqlens is None:
        return total
    count = total.dtype.numpy() if total.dtype is not None else np.int32
    consts = [ir.node("Constant", [], attributes={"value": ir.tensor(np.array(v, np.int64))}) for v in (limit, 1)]
    zero = ir.node("Constant", [], attributes={"value": ir.tensor(np.zeros(1, count))})  # [1]: index 1 is past it
    lengths = ir.node("Cast", [seqlens], attributes={"to": ir.DataType.INT64})  # [b]: L_b - 1
    shortest = ir.node("ReduceMin", [lengths.outputs[0]], attributes={"keepdims": 0})
    longest = ir.node("ReduceMax", [lengths.outputs[0]], attributes={"keepdims": 0})
    short = ir.node("Less", [shortest.outputs[0], consts[0].outputs[0]])  # some L_b <= limit
    below = ir.node("Less", [longest.outputs[0], consts[0].outputs[0]])
    long = ir.node("Not", [below.outputs[0]])  # some L_b > limit
    mixed = ir.node("And", [short.outputs[0], long.outputs[0]])
    index = ir.node("Cast", [mixed.outputs[0]], attributes={"to": ir.DataType.INT64})
    refused = ir.node("Gather", [zero.outputs[0], index.outputs[0]])  # 0 for one regime, a run-time error for two
    scalar = ir.node("Squeeze", [refused.outputs[0]])
    checked = ir.node("Add", [total, scalar.outputs[0]])
    nodes = [*consts, zero, lengths, shortest, longest, short, below, long, mixed, index, refused, scalar, checked]
    for i, node in enumerate(nodes):
        node.outputs[0].name = f"{name}__graft_mixed_{i}"
        node.name = f"{name}__graft_mixed_{i}"
    refused.name = f"{name}__graft_mixed_regimes_refused"
    _insert(before, nodes)
    return checked.outputs[0]


def _shift_rows(before: ir.Node, pos: ir.Value, limit: int, rows: int) -> ir.Value:
    """``pos`` + rows x (L_b > limit) per row, L_b = max over the row (the last axis) + 1; int64, inserted before
    ``before``.
    """  # noqa: D205
    i64 = lambda v: ir.tensor(np.array(v, np.int64))  # noqa: E731
    nodes = [ir.node("Cast", [pos], attributes={"to": ir.DataType.INT64})]
    # TopK(k=1) over the last axis: each row's max, [.., 1], in every opset from 10 (ReduceMax moved its axes from an
    # attribute to an input at 18, and the reader's graph may be a subgraph that names no opset)
    k = ir.node("Constant", [], attributes={"value": i64([1])})
    top = ir.node("TopK", [nodes[0].outputs[0], k.outputs[0]], attributes={"axis": -1}, num_outputs=2)
    nodes.append(k)
    consts = [ir.node("Constant", [], attributes={"value": i64(v)}) for v in (1, limit, rows)]
    length = ir.node("Add", [top.outputs[0], consts[0].outputs[0]])
    longer = ir.node("Greater", [length.outputs[0], consts[1].outputs[0]])
    use = ir.node("Cast", [longer.outputs[0]], attributes={"to": ir.DataType.INT64})
    offset = ir.node("Mul", [use.outputs[0], consts[2].outputs[0]])
    shifted = ir.node("Add", [nodes[0].outputs[0], offset.outputs[0]])
    nodes += [top, *consts, length, longer, use, offset, shifted]
    for i, node in enumerate(nodes):
        node.outputs[0].name = f"{pos.name}__graft_switch_{i}"
    top.outputs[1].name = f"{pos.name}__graft_switch_argmax"
    _insert(before, nodes)
    return shifted.outputs[0]


def _insert(before: ir.Node, nodes: list[ir.Node]) -> None:
    """``nodes`` inserted before ``before``, in its own graph (a reader of a table: always in one)."""
    assert before.graph is not None, "a reader of the table is a node of a graph"
    before.graph.insert_before(before, nodes)
