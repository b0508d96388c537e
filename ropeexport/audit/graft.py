"""``graft``: a foreign model's rotary tables replaced by exact ones, the node types kept, then proven.

What is grafted: table sites whose cos/sin are constants: initializers (onnxruntime-genai's cos_cache / sin_cache
read by GroupQueryAttention, caches of RotaryEmbedding), or the Constant nodes of an ``If`` picking between two
tables (the builder's LongRoPE: each branch gets the exact table of the regime its values are nearest to, with its
own row count). Each table is the config's schedule in float64, rounded once to the stored dtype, at least
max_positions rows where the model's was shorter. Where the config's LongRoPE switches and the model has one table,
the switch is added (``_add_switch``). The graph is otherwise untouched: same nodes, same runtime and execution
providers. A site computed in the graph (cos/sin of positions x frequencies, as torch.onnx.export writes it) is
replaced by the rope family's own rows (``cos_sin_rows`` of its decomposed form: exact tables gathered by
position_ids, a LongRoPE switch on the call length), widened and shaped like the values it replaces; the old
computation is pruned. Dynamic NTK computed in the graph is refused (its values depend on the call length). An ALiBi
site's stored slopes are replaced by the config's (``audit.alibi.graft_slopes``).

When the audit says the model's constants imply another schedule than the config's (scaling ignored, another
factor, a switch never taken, ...), which one is right cannot be told from the model: the graft refuses unless
``trust="config"``. Precision findings (float32 angles or frequencies) are what it repairs.

Proof, written into the result: the grafted model audited again (every site exact), and the grafted and original
models run on the same short call (8 tokens at positions 0 .. 7, an empty cache), every output compared: equal to
the dtype's noise where the tables agree there. Given the checkpoint the model was exported from, both models' logits
are also judged against the float64 recompute of the whole decoder at the first and last positions and on both sides
of original_max_position_embeddings (``audit.prove``); the grafted model must pass every call.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from ropeexport.audit.core import AuditResult, _load, _position_spec, audit
from ropeexport.audit.diagnose import estimate_frequencies
from ropeexport.audit.observe import Evaluator, _feed, session_feeds
from ropeexport.audit.prove import DecoderProof
from ropeexport.audit.sites import Site
from ropeexport.errors import SpecError
from ropeexport.families.rope.regimes import exact_tables, frequencies, probe_lengths, regime_kind, table_switch
from ropeexport.numerics import round_once

PRECISION = {"float32-angles", "float32-frequencies", "values-off"}  # what exact tables repair
TRUSTS = ("model", "config")
DTYPE_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


@dataclass
class GraftResult:
    """The grafted model's path, what was replaced, and the proof (module doc)."""

    path: Path
    replaced: list[dict[str, Any]] = field(default_factory=list)
    before: AuditResult | None = None
    after: AuditResult | None = None
    short_call: dict[str, Any] = field(default_factory=dict)
    changed_schedule: list[str] = field(default_factory=list)  # the findings trust="config" overrode
    decoder: dict[str, Any] | None = None  # audit.prove's record of both models, with a checkpoint

    @property
    def proven(self) -> bool:
        """Every site exact after the graft, and (when only precision was repaired) the short call equal to the
        dtype's noise; a graft that changed the schedule on purpose is not expected to agree with the original.
        """  # noqa: D205
        exact = self.after is not None and self.after.verdict == "exact"
        whole = self.decoder is None or bool(self.decoder["passed"].get("grafted"))
        return exact and whole and (bool(self.changed_schedule) or bool(self.short_call.get("equal")))

    def to_dict(self) -> dict[str, Any]:
        """The result as plain data."""
        return {"path": str(self.path), "proven": self.proven, "replaced": self.replaced,
                "before": self.before.verdict if self.before else None,
                "after": self.after.to_dict() if self.after else None, "short_call": self.short_call,
                "changed_schedule": self.changed_schedule, "decoder": self.decoder}  # fmt: skip


def _exact(spec: Any, length: int, rows: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin [rows, r/2] of the regime of call L, float64 rounded once to ``dtype``."""
    short = DTYPE_NAMES.get(dtype, "fp32")
    return tuple(round_once(t, short) for t in exact_tables(spec, length, rows))  # type: ignore[return-value]


def _regime_length(spec: Any, table: np.ndarray, sin: np.ndarray) -> int:
    """The call length whose regime ``table`` is nearest to (its frequencies read from its values)."""
    lengths = probe_lengths(spec)[:2]
    if len(lengths) == 1:
        return spec.max_positions
    seen = estimate_frequencies(table.astype(np.float64), sin.astype(np.float64))
    gaps = [float(np.max(np.abs(seen - frequencies(spec, n)[0]) / frequencies(spec, n)[0])) for n in lengths]
    return lengths[int(np.argmin(gaps))]


def _tables_of(value: ir.Value) -> list[tuple[Any, Any]]:
    """(holder, setter) for each constant table ``value`` can be: an initializer, or an If's Constant branches."""
    if value.const_value is not None:
        return [(value.const_value, lambda t, v=value: setattr(v, "const_value", t))]
    node = value.producer()
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


def _needs_switch(spec: Any, pairs: list[tuple[Any, Any]]) -> bool:
    """One constant table where the config's schedule switches (LongRoPE) and the graph has no switch: not the short
    and long tables stacked ([2 x max_positions, w], rows shifted by the graph as ropeexport's own form does).
    """  # noqa: D205
    if table_switch(spec) is None or len(pairs) != 1:
        return False
    return pairs[0][0].numpy().shape[0] != 2 * spec.max_positions


def _stacked(spec: Any, rows: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """The short and the long exact tables stacked: [2 x max_positions, w] (a table the graph already switches in)."""
    limit, half = table_switch(spec), rows // 2
    short, long = _exact(spec, limit, half, dtype), _exact(spec, limit + 1, half, dtype)
    return np.concatenate([short[0], long[0]]), np.concatenate([short[1], long[1]])


def _add_switch(graph: ir.Graph, cos: ir.Value, sin: ir.Value, spec: Any) -> dict[str, Any]:
    """The config's LongRoPE switch put in where the model has one table (``cos`` / ``sin`` initializers).

    Readers that take table rows by position (RotaryEmbedding, Gather) get the short and long tables stacked
    ([2P, w]) and their positions shifted by P when L = max(positions) + 1 > original (the rope family's own rule);
    GroupQueryAttention, which counts positions itself, gets an ``If`` on its total_sequence_length picking the short
    or the long table (as onnxruntime-genai's builder writes LongRoPE). Anything else reading the table is refused.
    """
    limit = table_switch(spec)
    old = cos.const_value.numpy()
    rows, dtype = max(old.shape[0], spec.max_positions), old.dtype
    short = [t.astype(dtype) for t in _exact(spec, limit, rows, str(dtype))]
    long = [t.astype(dtype) for t in _exact(spec, limit + 1, rows, str(dtype))]
    readers = list({id(u.node): u.node for u in [*cos.uses(), *sin.uses()]}.values())  # each node once
    kinds = {node.op_type for node in readers}
    if kinds == {"GroupQueryAttention"}:
        made: dict[str, tuple[ir.Value, ir.Value]] = {}
        for node in readers:
            total = node.inputs[6]
            if total.name not in made:
                made[total.name] = _if_between(graph, node, total, limit, short, long, cos.name)
            node.replace_input_with(7, made[total.name][0])
            node.replace_input_with(8, made[total.name][1])
        how = "an If on total_sequence_length between the short and the long table"
    elif kinds <= {"RotaryEmbedding", "Gather"}:
        cos.const_value = ir.tensor(np.concatenate([short[0], long[0]]), name=cos.name)
        sin.const_value = ir.tensor(np.concatenate([short[1], long[1]]), name=sin.name)
        shifted: dict[str, ir.Value] = {}
        for node in readers:
            index = 1 if node.op_type == "Gather" or node.domain == "com.microsoft" else 3
            pos = node.inputs[index]
            if pos is None:
                raise SpecError("model", f"{node.op_type} {node.name!r} reads the table {cos.name!r} without "
                                "positions: graft cannot add the LongRoPE switch to it")  # fmt: skip
            if pos.name not in shifted:
                shifted[pos.name] = _shift_rows(graph, node, pos, limit, rows)
            node.replace_input_with(index, shifted[pos.name])
        how = "short and long tables stacked, rows shifted by max_positions when L > original"
    else:
        raise SpecError("model", f"the table {cos.name!r} is read by {', '.join(sorted(kinds))}: graft adds the "
                        "LongRoPE switch to RotaryEmbedding, Gather and GroupQueryAttention readers only")  # fmt: skip
    return {"cos": cos.name, "sin": sin.name, "rows": int(rows), "regime_length": f"switch at {limit}",
            "dtype": str(dtype), "replaced_by": how}  # fmt: skip


def _if_between(graph: ir.Graph, before: ir.Node, total: ir.Value, limit: int, short: list[np.ndarray],
                long: list[np.ndarray], name: str) -> tuple[ir.Value, ir.Value]:  # fmt: skip
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
    graph.insert_before(before, [threshold, longer, pick])
    return pick.outputs[0], pick.outputs[1]


def _shift_rows(graph: ir.Graph, before: ir.Node, pos: ir.Value, limit: int, rows: int) -> ir.Value:
    """``pos`` + rows x (max(pos) + 1 > limit), int64, inserted before ``before``."""
    i64 = lambda v: ir.tensor(np.array(v, np.int64))  # noqa: E731
    nodes = [ir.node("Cast", [pos], attributes={"to": ir.DataType.INT64})]
    top = ir.node("ReduceMax", [nodes[0].outputs[0]], attributes={"keepdims": 0})
    consts = [ir.node("Constant", [], attributes={"value": i64(v)}) for v in (1, limit, rows)]
    length = ir.node("Add", [top.outputs[0], consts[0].outputs[0]])
    longer = ir.node("Greater", [length.outputs[0], consts[1].outputs[0]])
    use = ir.node("Cast", [longer.outputs[0]], attributes={"to": ir.DataType.INT64})
    offset = ir.node("Mul", [use.outputs[0], consts[2].outputs[0]])
    shifted = ir.node("Add", [nodes[0].outputs[0], offset.outputs[0]])
    nodes += [top, *consts, length, longer, use, offset, shifted]
    for i, node in enumerate(nodes):
        node.outputs[0].name = f"{pos.name}__graft_switch_{i}"
    graph.insert_before(before, nodes)
    return shifted.outputs[0]


def graft(
    model: str | Path,
    hf_config: str | Path,
    out: str | Path,
    trust: str = "model",
    checkpoint: str | Path | None = None,
) -> GraftResult:
    """Replace every table site of ``model`` with exact tables of ``hf_config``'s schedule, write ``out``, prove it
    (with ``checkpoint``, the folder the model was exported from, against the whole decoder's float64 recompute too).
    """  # noqa: D205
    if trust not in TRUSTS:
        raise SpecError("trust", f"must be one of {', '.join(TRUSTS)}, got {trust!r}")
    source, target = Path(model), Path(out)
    if target.exists():
        raise SpecError("out", f"{str(target)!r} exists: give a new file")
    if target.suffix != ".onnx":
        raise SpecError("out", f"must name an .onnx file, got {str(target)!r}")
    if target.with_name(f"{target.name}.data").exists():
        raise SpecError("out", f"{str(target.with_name(target.name + '.data'))!r} exists (the tables' file of "
                        f"{target.name}): give a new file")  # fmt: skip
    before = audit(source, hf_config)
    spec = _position_spec(Path(hf_config))
    proof = None if checkpoint is None else DecoderProof(Path(hf_config), Path(checkpoint), source)
    implied = sorted({f["name"] for s in before.sites for f in s["findings"]} - PRECISION)
    if implied and trust != "config":
        raise SpecError("trust", f"the model's tables imply another schedule than the config's ({', '.join(implied)}):"
                        " give `trust` config to replace them with the config's anyway")  # fmt: skip
    graph = _load(source)
    values = {v.name: v for node in ir.traversal.RecursiveGraphIterator(graph.graph) for v in node.outputs}
    values |= {v.name: v for v in graph.graph.initializers.values()}
    replaced: list[dict[str, Any]] = []
    computed: list[dict[str, Any]] = []
    switched: set[str] = set()
    for site in before.sites:
        if site["exact"] or any(f["name"] == "unidentified-site" for f in site["findings"]):
            continue  # nothing to repair (an exact table stays as it is), or nothing known to repair it with
        if site["kind"] == "ALiBi bias":
            from ropeexport.audit.alibi import graft_slopes

            replaced.append(graft_slopes(graph.graph, site, spec))
            continue
        pairs = [_tables_of(values[site[k]]) for k in ("cos", "sin")]
        if not site["table"]:
            computed.append(site)
            continue
        if not pairs[0] or len(pairs[0]) != len(pairs[1]):
            raise SpecError("model", f"the {site['kind']} site reading {site['cos']!r} reads tables ropeexport "
                            "cannot replace (neither constants nor an If between constants)")  # fmt: skip
        if site["cos"] in switched:
            continue  # its table and every reader of it were given the switch with an earlier site's
        if _needs_switch(spec, pairs[0]):
            replaced.append(_add_switch(graph.graph, values[site["cos"]], values[site["sin"]], spec))
            switched.add(site["cos"])
            continue
        for (cos, set_cos), (sin, set_sin) in zip(*pairs, strict=True):
            cos_array, sin_array = cos.numpy(), sin.numpy()
            rows = max(cos_array.shape[0], spec.max_positions) if len(pairs[0]) == 1 else cos_array.shape[0]
            if table_switch(spec) is not None and len(pairs[0]) == 1:  # stacked (_needs_switch said no)
                length, (new_cos, new_sin) = "stacked", _stacked(spec, rows, str(cos_array.dtype))
            else:
                length = _regime_length(spec, cos_array, sin_array)
                new_cos, new_sin = _exact(spec, length, rows, str(cos_array.dtype))
            set_cos(ir.tensor(new_cos.astype(cos_array.dtype), name=cos.name))
            set_sin(ir.tensor(new_sin.astype(sin_array.dtype), name=sin.name))
            replaced.append({"cos": site["cos"], "sin": site["sin"], "rows": int(rows), "regime_length": length,
                             "dtype": str(cos_array.dtype)})  # fmt: skip
    if computed:
        for value in graph.graph.initializers.values():  # read now: the proto round trip forgets their folder
            if isinstance(value.const_value, ir.ExternalTensor):
                value.const_value = ir.tensor(value.const_value.numpy(), name=value.name)
        proto = ir.serde.serialize_model(graph)
        evaluator = Evaluator(source)
        for site in computed:
            replaced.append(_replace_computed(proto, site, spec, evaluator))
        _prune(proto.graph)
        graph = ir.serde.deserialize_model(proto)
    _save(graph, target)
    result = GraftResult(target, replaced, before, changed_schedule=implied)
    try:
        result.after = audit(target, hf_config)
        result.short_call = short_call(source, target, spec)
        if proof is not None:
            result.decoder = proof.run({"original": source, "grafted": target})
    except Exception:
        _remove(target)
        raise
    return result


def _save(model: ir.Model, target: Path) -> None:
    """The model into ``target`` (tables external beside it, data file ``<name>.data``), whole or not at all."""
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".graft-", dir=target.parent))
    try:
        ir.save(model, scratch / target.name, external_data=f"{target.name}.data", size_threshold_bytes=1024)
        for name in sorted(os.listdir(scratch), key=lambda n: n == target.name):  # the model file last
            os.replace(scratch / name, target.parent / name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _remove(target: Path) -> None:
    for path in (target, target.with_name(f"{target.name}.data")):
        path.unlink(missing_ok=True)


def short_call(original: Path, grafted: Path, spec: Any, tokens: int = 8) -> dict[str, Any]:
    """Both models on one call of ``tokens`` tokens at positions 0 .. tokens - 1 (empty cache); every output.

    A cache input's undeclared head count and width come from the config (``spec``).
    """
    import onnxruntime as ort

    outputs = []
    for path in (original, grafted):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feeds = session_feeds(session, tokens, lambda value, n: _short_feed(value, n, spec))
        outputs.append(session.run(None, feeds))
    worst, scale = 0.0, 0.0
    for a, b in zip(*outputs, strict=True):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        worst = max(worst, float(np.max(np.abs(a - b), initial=0)))
        scale = max(scale, float(np.max(np.abs(a), initial=0)))
    relative = worst / scale if scale else worst
    return {"tokens": tokens, "max_abs": worst, "scale": scale, "relative": relative, "equal": relative <= 1e-4}


def _short_feed(value: ir.Value, tokens: int, spec: Any) -> np.ndarray:
    """A short call's inputs: ids and positions as observe feeds them, an integer seqlens / total for GQA."""
    name = value.name or ""
    dims = [d if isinstance(d, int) else None for d in (value.shape or [])]
    if len(dims) == 4 and ("past" in name or "cache" in name):  # [b, KV, past, d], empty
        heads = getattr(spec, "num_kv_heads", None) or spec.num_heads  # an ALiBi spec has one head count
        return np.zeros((1, dims[1] or heads, 0, dims[3] or spec.head_dim), value.dtype.numpy())
    if name in ("seqlens_k", "total_sequence_length"):
        count = tokens - 1 if name == "seqlens_k" else tokens
        return np.array([count] if name == "seqlens_k" else count, np.int32)
    if value.dtype in (ir.DataType.FLOAT, ir.DataType.FLOAT16):  # an activation: fixed random values, 1 x tokens
        sized = [d if d is not None else 1 if i == 0 else tokens for i, d in enumerate(dims)]
        return np.random.default_rng(0).standard_normal(sized).astype(value.dtype.numpy())
    if name == "input_ids":
        return (np.arange(tokens) % 3 + 1).astype(np.int64).reshape(1, tokens)
    return _feed(value, tokens)


def _replace_computed(proto: Any, site: dict[str, Any], spec: Any, evaluator: Evaluator) -> dict[str, Any]:
    """A computed site's cos/sin replaced by the rope family's own rows (``cos_sin_rows``: exact tables gathered by
    position_ids, a LongRoPE switch on the call length included), widened and shaped as the site's values were.
    """  # noqa: D205
    from ropeexport.families.rope.export import call_length, cos_sin_rows, rope_tables
    from ropeexport.graph.guard import rename_inputs
    from ropeexport.graph.onnx_io import GraphBuilder

    regime = regime_kind(spec)
    if regime == "continuous":
        raise SpecError("model", f"the computed site reading {site['cos']!r} follows dynamic NTK, whose cos/sin "
                        "depend on the call length: graft does not replace it (yet)")  # fmt: skip
    if "position_ids" not in site["inputs"]:
        reads = ", ".join(site["inputs"]) or "constants only"
        raise SpecError("model", f"the computed site reading {site['cos']!r} is not computed from a position_ids "
                        f"input (it reads {reads}): graft cannot feed it")  # fmt: skip
    probe = 7  # a call length no other axis of these values has
    cos_raw = evaluator.raw(Site(**{k: site[k] for k in ("kind", "cos", "sin", "table", "inputs")}), probe)[0]
    shape, w = list(cos_raw.shape), spec.rotary_dim // 2
    axis = next((i for i, n in enumerate(shape) if n == probe), None)
    if axis is None or shape[-1] not in (w, 2 * w) or axis != len(shape) - 2:
        raise SpecError("model", f"the computed site reading {site['cos']!r} has values of shape {shape}: graft "
                        "expects [.., positions, width]")  # fmt: skip
    flat = cos_raw.reshape(-1, shape[-1])[:probe]
    layout = "none" if shape[-1] == w else "half" if np.array_equal(flat[:, :w], flat[:, w:]) else "interleaved"
    dtype = DTYPE_NAMES.get(str(cos_raw.dtype), "fp32")
    piece_spec = spec.replace(artifact="rope", graph="decomposed", dtype=dtype)
    g = GraphBuilder(prefix="ropeexport_graft/")
    tables = rope_tables(g, piece_spec)
    length = call_length(g, ["position_ids"]) if regime != "static" else None
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    made = []
    for name, rows in zip(("cos", "sin"), cos_sin_rows(g, piece_spec, tables, "position_ids", length)[:2], strict=True):
        if layout == "half":  # [b, s, w] -> [b, s, 2w]: f | f
            rows = g.op("Concat", [rows, rows], axis=-1)
        elif layout == "interleaved":  # f0 f0 f1 f1 ..
            pair = g.op("Unsqueeze", [rows, g.const(f"{name}_pair_axis", i64(-1))])
            both = g.op("Concat", [pair, pair], axis=-1)
            rows = g.op("Reshape", [both, g.const(f"{name}_pair_shape", i64(0, 0, 2 * w))])
        if len(shape) == 2:  # [s, width]: the first batch row
            rows = g.op("Squeeze", [rows, g.const(f"{name}_batch_axis", i64(0))])
        elif len(shape) > 3:  # [b, 1, .., s, width]
            rows = g.op("Unsqueeze", [rows, g.const(f"{name}_head_axes", i64(*range(1, len(shape) - 2)))])
        made.append(rows)
    rest = list(proto.graph.node)  # the new nodes read position_ids and their own constants only: first is in order
    del proto.graph.node[:]
    proto.graph.node.extend([*g.nodes, *rest])
    proto.graph.initializer.extend(g.initializers)
    for old, new in zip((site["cos"], site["sin"]), made, strict=True):
        rename_inputs(proto.graph, old, new)
    return {"cos": site["cos"], "sin": site["sin"], "rows": int(spec.max_positions), "dtype": str(cos_raw.dtype),
            "regime_length": None, "layout": layout, "replaced_by": "the rope family's gathered rows"}  # fmt: skip


def _prune(graph: Any) -> None:
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
