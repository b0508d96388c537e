"""Rotations rebuilt: a decomposed rotation that pairs its channels otherwise than the config (read by running it:
``audits.rotations``) replaced by the config's own, with exact values (what ``graft`` does for a ``pairing`` finding
at a site read from its rotations; a fused reader's is an attribute, set in place by ``fix``).

For each of the site's rotations, y = x * cos + rotate(x) * sin is computed anew from its x: the rope family's rows
gathered by position_ids (``families.rope.export.cos_sin_rows``, as ``rows.replace_computed`` puts them in), widened
to the rotated channels in the config's layout (halves: (c, c); interleaved pairs: c0 c0 c1 c1 ..), rotate(x) the
config's ((-x2, x1) of the halves, or (-x_odd, x_even) of the pairs), the channels it leaves alone concatenated back;
every reader of the old y reads the new one and the old nodes are pruned (``rows.prune``); the new nodes name the
old rotation's layer in their metadata (``layers.SCOPES``), so that the audit after reads them on their layer. x is
[b, h, s, d], or [b, s, d] (one head whose axis is added after it: the indexer's key) read as [b, 1, s, d].
"""  # noqa: D205

from __future__ import annotations

from typing import Any

import numpy as np

from ropeexport.audits.layers import SCOPES
from ropeexport.audits.tables import DTYPE_NAMES
from ropeexport.errors import SpecError
from ropeexport.families.rope.regimes import regime_kind

Rotation = tuple[str, str, int, int, int | None]  # (x, y, rotated channels r, channels d, its layer or None)


def rotations_of(model: Any, record: dict[str, Any]) -> list[Rotation]:
    """Each rotation of ``model`` (ir) that reads the site ``record`` (its cos and sin as named, in those places; the
    indexer's where the record is: ``audits.indexer``): (x, y, rotated channels r, channels d, its layer or None).
    """  # noqa: D205
    from ropeexport.audits.sites import find_sites

    found = []
    for site in find_sites(model):
        mine = site.indexer == bool(record.get("indexer"))  # one table, the attention's and the indexer's rotations
        if (site.cos, site.sin) == (record["cos"], record["sin"]) and site.rotations and mine:
            found += [(r.x.name, r.y.name, r.width, r.channels, r.layer) for r in site.rotations]
    return found


def rebuild(proto: Any, record: dict[str, Any], rotations: list[Rotation], spec: Any, tag: str) -> dict[str, Any]:
    """The rotations (``rotations_of``) rebuilt in ``proto`` as the config's (module doc); what was done."""
    from ropeexport.families.rope.export import cos_sin_rows, rope_tables, row_lengths
    from ropeexport.graph.onnx_io import GraphBuilder

    if not rotations:
        raise SpecError("model", f"the rotations reading {record['cos']!r} cannot be found again to be rebuilt")
    if regime_kind(spec) == "continuous":
        raise SpecError("model", f"the rotations reading {record['cos']!r} follow dynamic NTK, whose cos/sin depend "
                        "on the call length: graft does not rebuild them (yet)")  # fmt: skip
    if "position_ids" not in record["inputs"]:
        raise SpecError("model", f"the rotations reading {record['cos']!r} are not fed from a position_ids input: "
                        "graft cannot feed rebuilt ones")  # fmt: skip
    dtype = DTYPE_NAMES.get(str(record.get("dtype")), "fp32")
    piece = spec.replace(artifact="rope", graph="decomposed", dtype=dtype)
    g = GraphBuilder(prefix=f"ropeexport_graft/{tag}")
    tables = rope_tables(g, piece)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 17)
    length = row_lengths(g, ["position_ids"], opset) if regime_kind(spec) != "static" else None
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    half, interleaved = spec.rotary_dim // 2, spec.layout == "interleaved"
    wide = []
    for name, rows in zip(("cos", "sin"), cos_sin_rows(g, piece, tables, "position_ids", length)[:2], strict=True):
        if interleaved:  # c0 c0 c1 c1 ..
            pair = g.op("Unsqueeze", [rows, g.const(f"{name}_pair_axis", i64(-1))])
            both = g.op("Concat", [pair, pair], axis=-1)
            rows = g.op("Reshape", [both, g.const(f"{name}_pairs", i64(0, 0, 2 * half))])
        else:  # c | c
            rows = g.op("Concat", [rows, rows], axis=-1)
        wide.append(g.op("Unsqueeze", [rows, g.const(f"{name}_head_axis", i64(1))]))  # [b, 1, s, r]
    parts: list[tuple[str, str, str, int]] = []  # (x, the old y, the new y, the first of its nodes in g.nodes)
    layers: list[int | None] = []
    for x, y, r, d, layer in rotations:
        if r != spec.rotary_dim:
            raise SpecError("model", f"the rotation of {x!r} turns {r} channels where the config rotates "
                            f"{spec.rotary_dim}: graft rebuilds a rotation of the config's width only")  # fmt: skip
        start = len(g.nodes)
        given, x = x, _heads(g, x)  # [b, h, s, d]
        part = x if r == d else g.op("Slice", [x, g.const("zero", i64(0)), g.const("width", i64(r)),
                                                 g.const("last", i64(-1))])  # fmt: skip
        if interleaved:
            even = g.op("Slice", [part, g.const("zero", i64(0)), g.const("width", i64(r)), g.const("last", i64(-1)),
                                  g.const("two", i64(2))])  # fmt: skip
            odd = g.op("Slice", [part, g.const("one", i64(1)), g.const("width", i64(r)), g.const("last", i64(-1)),
                                 g.const("two", i64(2))])  # fmt: skip
            axis = g.const("pair_axis", i64(-1))
            stacked = g.op("Concat", [g.op("Unsqueeze", [g.op("Neg", [odd]), axis]), g.op("Unsqueeze", [even, axis])],
                           axis=-1)  # fmt: skip
            turned = g.op("Reshape", [stacked, g.const("channels", i64(0, 0, 0, r))])
        else:
            upper = g.op("Slice", [part, g.const("half", i64(half)), g.const("width", i64(r)),
                                   g.const("last", i64(-1))])  # fmt: skip
            lower = g.op("Slice", [part, g.const("zero", i64(0)), g.const("half", i64(half)), g.const("last", i64(-1))])
            turned = g.op("Concat", [g.op("Neg", [upper]), lower], axis=-1)
        out = g.op("Add", [g.op("Mul", [part, wide[0]]), g.op("Mul", [turned, wide[1]])])
        if r != d:  # the channels it leaves alone
            rest = g.op("Slice", [x, g.const("width", i64(r)), g.const("depth", i64(d)), g.const("last", i64(-1))])
            out = g.op("Concat", [out, rest], axis=-1)
        parts.append((given, y, out, start))
        layers.append(layer)
    for k, layer in enumerate(layers):  # each rebuilt rotation names its layer, as the old one did (``layer_of``)
        stop = parts[k + 1][3] if k + 1 < len(parts) else len(g.nodes)
        for node in g.nodes[parts[k][3] : stop] if layer is not None else []:
            node.metadata_props.add(key=SCOPES[0], value=f"layers.{layer}")
    # the family names a few values itself (row_length, <positions>_rows): prefixed, so two sites' never meet
    renamed = {o: f"{g.prefix}{o}" for n in g.nodes for o in n.output if not o.startswith(g.prefix)}
    for node in g.nodes:
        node.input[:] = [renamed.get(i, i) for i in node.input]
        node.output[:] = [renamed.get(o, o) for o in node.output]
        node.name = node.name if node.name.startswith(g.prefix) else f"{g.prefix}{node.name}"
    rows_end = parts[0][3]
    nodes = list(proto.graph.node)
    for k, (x, y, out, start) in reversed(list(enumerate(parts))):  # each rotation's nodes after its x is made
        stop = parts[k + 1][3] if k + 1 < len(parts) else len(g.nodes)
        at = next((i + 1 for i, n in enumerate(nodes) if x in n.output), 0)
        nodes[at:at] = g.nodes[start:stop]
        new = renamed.get(out, out)
        for node in nodes:
            if not node.name.startswith(g.prefix):
                node.input[:] = [new if i == y else i for i in node.input]
        if any(o.name == y for o in proto.graph.output):
            raise SpecError("model", f"the rotation's output {y!r} is a graph output: graft keeps outputs' names")
    nodes[0:0] = g.nodes[:rows_end]  # the rows read position_ids and constants only
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    proto.graph.initializer.extend(g.initializers)
    return {"cos": record["cos"], "sin": record["sin"], "rows": int(spec.max_positions), "dtype": record.get("dtype"),
            "regime_length": None, "layout": spec.layout,
            "replaced_by": f"{len(parts)} rotation(s) rebuilt as the config's ({spec.layout} pairs) with the rope "
            "family's gathered rows"}  # fmt: skip



def _heads(g: Any, x: str) -> str:
    """``x`` [b, h, s, d] as it is, or [b, s, d] (one head whose axis its rotation adds after ``rotations.root``:
    the indexer's key) as [b, 1, s, d]: the head axis read from x's rank as the graph runs (no shape is declared).
    """  # noqa: D205
    from onnx import TensorProto, helper

    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    # Shape's start / end, not Slices: a Slice's constants are what the audit after guesses x's width from
    ones = g.op("ConstantOfShape", [g.op("Sub", [g.const("four", i64(4)), g.op("Shape", [g.op("Shape", [x])])])],
                value=helper.make_tensor("value", TensorProto.INT64, [1], [1]))  # fmt: skip
    batch, rest = g.op("Shape", [x], end=1), g.op("Shape", [x], start=1)
    return g.op("Reshape", [x, g.op("Concat", [batch, ones, rest], axis=0)])
