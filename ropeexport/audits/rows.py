"""Computed sites replaced by the rope family's own rows (what ``graft`` does where cos/sin are computed in the graph).

cos/sin of positions x frequencies, as torch.onnx.export writes them, become the rope family's decomposed rows
(``families.rope.export.cos_sin_rows``: exact tables gathered by position_ids, a LongRoPE switch on each row's length, a
position past the table failing the Gather; a model without position_ids whose site reads the lengths of input_ids and
its cache gathers by past length + 0 .. s - 1, as it computes them itself), widened and shaped as the values they
replace (rotate-half or interleaved duplication, [b, 1, s, r]); the old computation is pruned (``prune``). Main graph
only: ``graft`` refuses a computed site inside a subgraph. Dynamic NTK computed in the graph is refused (its values
depend on the call length).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropeexport.audits.observe import Evaluator
from ropeexport.audits.patterns import Site
from ropeexport.audits.tables import DTYPE_NAMES
from ropeexport.errors import SpecError
from ropeexport.families.rope.regimes import regime_kind


def replace_computed(proto: Any, site: dict[str, Any], spec: Any, evaluator: Evaluator, tag: str = "",
                     readers: set[str] | None = None) -> dict[str, Any]:  # fmt: skip
    """A computed site's cos/sin replaced by the rope family's own rows (``cos_sin_rows``: exact tables gathered by
    position_ids, a LongRoPE switch on each row's length included), widened and shaped as the site's values were.

    ``readers``: the names of the nodes to rewire (the layers of one encoding, where the site's layers need two);
    every reader when None. ``tag`` keeps the names of one site's new nodes apart from another's.
    """  # noqa: D205
    from ropeexport.families.rope.export import cos_sin_rows, mrope_cos_sin, rope_tables, row_lengths
    from ropeexport.graph.guard import rename_inputs
    from ropeexport.graph.onnx_io import GraphBuilder

    regime = regime_kind(spec)
    if regime == "continuous":
        raise SpecError("model", f"the computed site reading {site['cos']!r} follows dynamic NTK, whose cos/sin "
                        "depend on the call length: graft does not replace it (yet)")  # fmt: skip
    past = _cache_input(site)
    if "position_ids" not in site["inputs"] and past is None:
        reads = ", ".join(site["inputs"]) or "constants only"
        raise SpecError("model", f"the computed site reading {site['cos']!r} is not computed from a position_ids "
                        f"input (it reads {reads}): graft cannot feed it")  # fmt: skip
    probe = 7  # a call length no other axis of these values has
    cos_raw = evaluator.raw(Site.from_dict(site), probe)[0]
    shape, w = list(cos_raw.shape), spec.rotary_dim // 2
    axis = next((i for i, n in enumerate(shape) if n == probe), None)
    heads_last = len(shape) == 4 and axis == 1 and shape[2] == 1  # [b, s, 1, width]: Gemma 3n's q is [b, s, h, d]
    if axis is None or shape[-1] not in (w, 2 * w) or (axis != len(shape) - 2 and not heads_last):
        raise SpecError("model", f"the computed site reading {site['cos']!r} has values of shape {shape}: graft "
                        "expects [.., positions, width]")  # fmt: skip
    # [a, b, s, width] with a > 1 at batch 1: one table per position axis (Qwen3.5's three, expanded from one
    # position_ids for text and recomposed after), each the same rows: the rows are expanded to every axis
    axes = shape[0] if len(shape) == 4 and shape[0] > 1 and shape[1] == 1 else 0
    if axes and not all(np.array_equal(cos_raw[0], cos_raw[k]) for k in range(axes)):
        raise SpecError("model", f"the computed site reading {site['cos']!r} has {axes} position axes whose values "
                        "differ on a call of text positions: graft writes one table for all of them")  # fmt: skip
    flat = cos_raw.reshape(-1, shape[-1])[:probe]
    layout = "none" if shape[-1] == w else "half" if np.array_equal(flat[:, :w], flat[:, w:]) else "interleaved"
    dtype = DTYPE_NAMES.get(str(cos_raw.dtype), "fp32")
    piece_spec = spec.replace(artifact="rope", graph="decomposed", dtype=dtype)
    g = GraphBuilder(prefix=f"ropeexport_graft/{tag}")
    tables = rope_tables(g, piece_spec)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 17)
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    positions = "position_ids" if past is None else _lengths_positions(g, past)
    length = row_lengths(g, [positions], opset) if regime != "static" else None
    made = []
    pair_rows: tuple[str, str, str | None]
    if piece_spec.mrope_section and _takes_axes(proto, positions):  # M-RoPE: each pair from its axis's rows
        pair_rows = mrope_cos_sin(g, piece_spec, tables, positions)
    elif piece_spec.mrope_section:  # no table gives a one-axis input the axes it lacks
        raise SpecError("model", f"the site reading {site['cos']!r} is computed from {positions} [batch, seq], one "
                        "position axis, where the config's M-RoPE reads three (time, height, width): graft cannot "
                        "give the model the axes it does not take; export it with position_ids [3, batch, seq]")
    else:
        pair_rows = cos_sin_rows(g, piece_spec, tables, positions, length)
    for name, rows in zip(("cos", "sin"), pair_rows[:2], strict=True):
        if layout == "half":  # [b, s, w] -> [b, s, 2w]: f | f
            rows = g.op("Concat", [rows, rows], axis=-1)
        elif layout == "interleaved":  # f0 f0 f1 f1 ..
            pair = g.op("Unsqueeze", [rows, g.const(f"{name}_pair_axis", i64(-1))])
            both = g.op("Concat", [pair, pair], axis=-1)
            rows = g.op("Reshape", [both, g.const(f"{name}_pair_shape", i64(0, 0, 2 * w))])
        if name == "sin" and site.get("sign", 1) == -1:  # its rotations turn the other way: they apply minus it
            rows = g.op("Neg", [rows])
        if heads_last:  # [b, s, width] -> [b, s, 1, width]
            rows = g.op("Unsqueeze", [rows, g.const(f"{name}_heads_axis", i64(2))])
        elif axes:  # [b, s, width] -> [axes, b, s, width]
            rows = g.op("Unsqueeze", [rows, g.const(f"{name}_axes_axis", i64(0))])
            rows = g.op("Expand", [rows, g.const(f"{name}_axes_shape", i64(axes, 1, 1, 1))])
        elif len(shape) == 2:  # [s, width]: the first batch row
            rows = g.op("Squeeze", [rows, g.const(f"{name}_batch_axis", i64(0))])
        elif len(shape) > 3:  # [b, 1, .., s, width]
            rows = g.op("Unsqueeze", [rows, g.const(f"{name}_head_axes", i64(*range(1, len(shape) - 2)))])
        made.append(rows)
    # the family names a few values itself (row_length, <positions>_rows): prefixed, so two sites' never meet
    renamed = {o: f"{g.prefix}{o}" for n in g.nodes for o in n.output if not o.startswith(g.prefix)}
    for node in g.nodes:
        node.input[:] = [renamed.get(i, i) for i in node.input]
        node.output[:] = [renamed.get(o, o) for o in node.output]
        node.name = node.name if node.name.startswith(g.prefix) else f"{g.prefix}{node.name}"
    made = [renamed.get(m, m) for m in made]
    rest = list(proto.graph.node)  # the new nodes read position_ids and their own constants only: first is in order
    del proto.graph.node[:]
    proto.graph.node.extend([*g.nodes, *rest])
    proto.graph.initializer.extend(g.initializers)
    for old, new in zip((site["cos"], site["sin"]), made, strict=True):
        if readers is None:
            rename_inputs(proto.graph, old, new)
            continue
        for node in proto.graph.node:
            if node.name in readers:
                node.input[:] = [new if name == old else name for name in node.input]
    return {"cos": site["cos"], "sin": site["sin"], "rows": int(spec.max_positions), "dtype": str(cos_raw.dtype),
            "regime_length": None, "layout": layout, "replaced_by": "the rope family's gathered rows"}  # fmt: skip


def _cache_input(site: dict[str, Any]) -> str | None:
    """The cache input a site without position_ids takes its positions from, or None: a site reading input_ids and
    cache inputs only (Optimum's Gemma and gpt-oss exports compute each token's position as the cache's length plus
    0 .. s - 1, from the lengths of the two); one reading position_ids, or anything else, has none.
    """  # noqa: D205
    reads = list(site.get("inputs", []))
    caches = [name for name in reads if "past" in name or "cache" in name]
    if "position_ids" in reads or not caches or set(reads) - {"input_ids", *caches}:
        return None
    return caches[0]


def _lengths_positions(g: Any, past: str) -> str:
    """int64 [1, s]: past length + 0 .. s - 1, from the lengths of input_ids [b, s] and of ``past`` [b, kv, p, d]:
    each token's position as a model without position_ids computes it (``_cache_input``).
    """  # noqa: D205
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    zero = g.const("lengths_axis0", i64(0))
    s = g.op("Squeeze", [g.op("Gather", [g.op("Shape", ["input_ids"]), g.const("lengths_at1", i64(1))], axis=0),
                         zero])  # fmt: skip
    p = g.op("Squeeze", [g.op("Gather", [g.op("Shape", [past]), g.const("lengths_at2", i64(2))], axis=0), zero])
    steps = g.op("Range", [p, g.op("Add", [p, s]), g.const("lengths_step", np.array(1, np.int64))])
    return g.op("Unsqueeze", [steps, zero])  # [1, s]


def prune(graph: Any) -> None:
    """Drop the nodes no graph output needs any more (the old cos/sin computation), and constants nothing reads."""
    needed = {o.name for o in graph.output}
    kept = []
    for node in reversed(list(graph.node)):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(i for i in node.input if i)
            for attr in node.attribute:  # If branches read outer values by name
                for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    needed.update(i for n in sub.node for i in n.input if i)
    del graph.node[:]
    graph.node.extend(reversed(kept))
    inits = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(inits)


def _takes_axes(proto: Any, name: str) -> bool:
    """Whether the graph input ``name`` is M-RoPE's [3, batch, seq] (``axes.takes_axes``)."""
    from ropeexport.audits.axes import takes_axes

    found = next((i for i in proto.graph.input if i.name == name), None)
    if found is None:
        return False
    dims = [d.dim_value if d.HasField("dim_value") else None for d in found.type.tensor_type.shape.dim]
    return takes_axes(dims)
