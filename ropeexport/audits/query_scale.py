"""Position-dependent query scales audited: Ministral 3's ``llama_4_scaling_beta`` and Llama 4's NoPE temperature,
the query times 1 + c * log(1 + floor((pos + offset) / divisor)) (``components.query_scale``).

Not a rotary site, but a position encoding all the same: a wrong factor moves every logit of the positions past its
first step. The config's factor per layer is read as a decoder reads it (``decoder.config.from_config``: the
architecture's own reading of ``rope_parameters``); a config ropeexport does not read as a decoder describes none.
The factor is found where ropeexport's graphs write it: a ``Gather`` of a 1-D float table at the step, the step an
integer ``Div`` of ``position_ids`` (plus a constant offset: ``Add``) by a constant divisor; each such table is
checked, per layer that reads it, against the formula in float64 at every step (within two units of its dtype):

- ``query-scale``: the table is the config's formula one step ahead (``query-scale`` with the words "the step count
  one ahead": at positions 0 .. divisor - 1 the factor is 1 + c * log 2, where the config's is 1; vLLM #48621's
  1.2773 is 1 + 0.4 * log 2), another coefficient, another divisor or offset, or other values (said as measured);
- ``query-scale-unread``: the config scales the query of some layers and no table of them is found (another
  exporter computes it in the graph, say): not checked, never called exact.
- not here: the layers whose factor is learned per head (Mistral Large 4's ``q_scale[h] * log(pos + 1) +
  q_bias[h]``, ``learned``): the checkpoint's weights, which the config does not give, judged against the checkpoint
  beside it by ``audits.learned_scale`` (``learned-query-scale``, ``learned-query-scale-unread``).

A wrong table is repaired by replacing its values (``repair``: a table read by layers of different factors is
split, each group its own copy); its effect is the model against that repair, run as users run it
(``effect.between``).
"""  # noqa: D205

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from ropeexport.audits.layers import layer_finding, layer_of
from ropeexport.components.query_scale import QueryScaleSpec
from ropeexport.errors import InputError
from ropeexport.numerics import round_once

DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


@dataclass
class Table:
    """One factor table the graph gathers at the step: its initializer, divisor, offset and readers' layers."""

    name: str
    values: np.ndarray  # [n], as stored
    divisor: int
    offset: int
    readers: dict[int, list[str]] = field(default_factory=dict)  # layer -> the Gather nodes of that layer


def _decoder_layers(hf_config: str | Path | None) -> list[tuple[Any, int]]:
    """(layer, max_positions) per decoder layer ropeexport reads from ``hf_config`` ([]: none given, or not a
    decoder's).
    """  # noqa: D205
    if hf_config is None:
        return []
    from ropeexport.decoder.config import from_config

    try:
        spec = from_config(json.loads(Path(hf_config).read_text()), "audit")
    except (InputError, OSError, ValueError, KeyError, TypeError):
        return []  # not a decoder ropeexport reads: it says no query scale
    return [(layer, spec.position_spec().max_positions) for layer in spec.layers]


def expected(hf_config: str | Path | None) -> dict[int, QueryScaleSpec]:
    """Layer -> the query scale the config gives it (none: the config describes none, or is not a decoder's)."""
    # Mistral Large 4's learned scale is the checkpoint's weights (q_scale, q_scale_bias), not the config's: it has no
    # expected value here (``learned``)
    return {i: QueryScaleSpec.of(layer.query_scale, positions, "fp32")
            for i, (layer, positions) in enumerate(_decoder_layers(hf_config))
            if layer.query_scale is not None and layer.query_scale.get("kind") != "learned_log"}  # fmt: skip


def learned(hf_config: str | Path | None) -> list[int]:
    """The layers whose query scale is learned per head (Mistral Large 4's ``learned_log``: weights, not config)."""
    return [i for i, (layer, _) in enumerate(_decoder_layers(hf_config))
            if (layer.query_scale or {}).get("kind") == "learned_log"]  # fmt: skip


def _constant(value: ir.Value | None) -> np.ndarray | None:
    """A value's constant (an initializer or a Constant node's output), else None."""
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    node = value.producer()
    if node is not None and node.op_type == "Constant" and "value" in node.attributes:
        return node.attributes["value"].value.numpy()
    return None


def _layers(gather: ir.Node) -> set[int]:
    """The layers a factor's Gather serves: its own name's, and those of the nodes two steps down (the Unsqueeze and
    the Mul into each layer's query): ONNX Runtime's optimizer merges the identical Gathers of several layers into one.
    """  # noqa: D205
    found, frontier = set(), [gather]
    for _ in range(3):
        step = []
        for node in frontier:
            layer = layer_of(node.name or "", dict(node.metadata_props))
            if layer is not None:
                found.add(layer)
            step += [use[0] for out in node.outputs for use in out.uses()]
        frontier = step
    return found


def factor_table(node: ir.Node) -> Table | None:
    """The factor table ``node`` gathers at the step (module doc: a 1-D float table, the step an integer ``Div`` of
    ``position_ids`` plus a constant offset by a constant divisor), its readers not filled; None for any other node.
    """  # noqa: D205
    if node.op_type != "Gather" or len(node.inputs) < 2:
        return None
    data, step = node.inputs[0], node.inputs[1]
    values = _constant(data)
    div = step.producer() if step is not None else None
    if data is None or values is None or values.ndim != 1 or values.dtype.kind != "f" or div is None or (
            div.op_type != "Div"):  # fmt: skip
        return None
    divisor = _constant(div.inputs[1])
    if divisor is None or divisor.dtype.kind not in "iu" or divisor.size != 1:
        return None
    offset, source = 0, div.inputs[0]
    add = source.producer() if source is not None else None
    if add is not None and add.op_type == "Add" and _constant(add.inputs[1]) is not None:
        offset, source = int(np.asarray(_constant(add.inputs[1])).reshape(-1)[0]), add.inputs[0]
    if source is None or "position_ids" not in (source.name or ""):
        return None
    return Table(data.name or "", values, int(divisor.reshape(-1)[0]), offset)


def tables(model: ir.Model) -> list[Table]:
    """Every factor table of the main graph (module doc), each once with its readers."""
    found: dict[str, Table] = {}
    for node in model.graph:
        read = factor_table(node)
        if read is None:
            continue
        table = found.setdefault(read.name, read)
        for layer in _layers(node):
            table.readers.setdefault(layer, []).append(node.name or "")
    return list(found.values())


def _formula(spec: QueryScaleSpec) -> str:
    shifted = f"(pos + {spec.offset})" if spec.offset else "pos"
    return f"1 + {spec.coefficient:g} * log(1 + floor({shifted} / {spec.divisor}))"


def _exact(spec: QueryScaleSpec, n: int, ahead: int = 0) -> np.ndarray:
    """float64 [n]: the factor of steps 0 .. n - 1 (``ahead``: of steps ahead .. n - 1 + ahead)."""
    return 1.0 + spec.coefficient * np.log1p(np.arange(n, dtype=np.float64) + ahead)


def _close(values: np.ndarray, exact: np.ndarray) -> bool:
    dtype = DTYPES.get(str(values.dtype), "fp32")
    return bool(np.all(np.abs(values.astype(np.float64) - round_once(exact, dtype).astype(np.float64))
                       <= 2 * np.spacing(np.abs(exact).astype(values.dtype)).astype(np.float64)))  # fmt: skip


def diagnose(table: Table, spec: QueryScaleSpec) -> str | None:
    """Why ``table`` is not ``spec``'s factor, in words (None: it is, at every step up to the last position)."""
    steps = (spec.max_positions - 1 + spec.offset) // spec.divisor + 1
    said = f"the config's {_formula(spec)}"
    if table.divisor != spec.divisor or table.offset != spec.offset:
        shifted = f"(pos + {table.offset})" if table.offset else "pos"
        if table.divisor == spec.divisor:  # the step taken k positions early or late
            k = table.offset - spec.offset
            return (f"the step is floor({shifted} / {table.divisor}) where {said} shifts by {spec.offset}: the query "
                    f"is scaled {abs(k)} position{'s' if abs(k) > 1 else ''} {'early' if k > 0 else 'late'}")
        return f"the step is floor({shifted} / {table.divisor}) where {said} divides by {spec.divisor}"
    if table.values.size < steps:
        last = spec.max_positions - 1
        return f"the factor table holds {table.values.size} steps where positions up to {last} need {steps}"
    values = table.values[:steps]
    if _close(values, _exact(spec, steps)):
        return None
    first = float(values[0])
    if _close(values, _exact(spec, steps, ahead=1)):
        return (f"the factor is {first:.6g} at positions 0-{spec.divisor - 1 - spec.offset} where {said} gives 1 (the "
                f"step count one ahead: log(2 + floor(...)))")  # fmt: skip
    if steps > 1 and abs(first - 1.0) < 1e-6:
        coefficient = (float(values[1]) - 1.0) / np.log(2.0)
        other = QueryScaleSpec(spec.kind, coefficient, spec.divisor, spec.offset, spec.max_positions, "fp32")
        if coefficient > 0 and _close(values, _exact(other, steps)):
            return f"the coefficient is {coefficient:.6g} where {said} takes {spec.coefficient:g}"
    worst = int(np.argmax(np.abs(values - _exact(spec, steps))))
    return (f"the factor of step {worst} is {float(values[worst]):.6g} where {said} gives "
            f"{float(_exact(spec, steps)[worst]):.6g}")  # fmt: skip


def findings(model: ir.Model, hf_config: str | Path | None) -> list[dict[str, Any]]:
    """The query-scale findings of ``model`` against ``hf_config`` (module doc), each with the tables it is found at
    (``tables``: their names) and no rotary site.
    """  # noqa: D205
    wanted = expected(hf_config)
    found = tables(model)
    out: list[dict[str, Any]] = []
    read: set[int] = set()
    for table in found:
        by_words: dict[str, list[int]] = {}
        shifted: set[str] = set()  # the words of a step at another offset: said, not rewritten (``repair``)
        unasked: set[str] = set()  # a factor the config does not give: said, not removed (``repair`` writes tables)
        for layer in sorted(table.readers):
            read.add(layer)
            spec = wanted.get(layer)
            words = ("the config gives it no query scale" if spec is None else diagnose(table, spec))
            if words is not None:
                by_words.setdefault(words, []).append(layer)
                if spec is not None and spec.offset != table.offset:
                    shifted.add(words)
                if spec is None:
                    unasked.add(words)
        for words, layers in by_words.items():
            template = f"{{who}} scale{{s}} the query by its position wrongly: {words} (table {table.name!r})"
            how = {"unrepairable": "graft rewrites a factor table's values and divisor, not the offset of its step"} \
                if words in shifted else {"unrepairable": "graft rewrites a factor table's values, it does not remove "
                                          "a factor the config does not give"} if words in unasked else {}  # fmt: skip
            out.append(layer_finding("query-scale", template, "", layers) | {"sites": [], "tables": [table.name]}
                       | how)  # fmt: skip
    missing = sorted(set(wanted) - read)
    if missing:
        spec = wanted[missing[0]]
        template = (f"{{who}} scale{{s}} the query by {_formula(spec)} in the config, and no table of it was found "
                    "(ropeexport reads a Gather of a factor table at position_ids // divisor): not checked")
        out.append(layer_finding("query-scale-unread", template, "", missing) | {"sites": []})
    return out


def repair(model: ir.Model, hf_config: str | Path | None, names: set[str] | None = None) -> list[dict[str, Any]]:
    """``model``'s factor tables (those in ``names``; None: every wrong one) set to the config's factor, in place:
    a table whose readers need different factors is split, each group its own copy. What was replaced.
    """  # noqa: D205
    wanted = expected(hf_config)
    replaced: list[dict[str, Any]] = []
    for table in tables(model):
        if names is not None and table.name not in names:
            continue
        needs: dict[tuple[float, int, int], list[int]] = {}
        for layer in table.readers:
            spec = wanted.get(layer)
            if spec is not None and diagnose(table, spec) is not None:
                needs.setdefault((spec.coefficient, spec.divisor, spec.offset), []).append(layer)
        for (_, divisor, offset), layers in needs.items():
            spec = next(wanted[i] for i in layers)
            if offset != table.offset:
                continue  # an offset other than the config's is said, not rewritten (no exporter writes one)
            steps = (spec.max_positions - 1 + spec.offset) // spec.divisor + 1
            dtype = DTYPES.get(str(table.values.dtype), "fp32")
            values = round_once(_exact(spec, steps), dtype).astype(table.values.dtype)
            name = table.name if len(needs) == 1 and set(layers) == set(table.readers) else f"{table.name}/{layers[0]}"
            _write(model, table, layers, name, values, divisor)
            replaced.append({"query_scale": table.name, "table": name, "layers": sorted(layers), "steps": steps,
                             "replaced_by": _formula(spec)})  # fmt: skip
    return replaced


def _write(model: ir.Model, table: Table, layers: list[int], name: str, values: np.ndarray, divisor: int) -> None:
    """The readers of ``table`` in ``layers`` gather ``values`` (stored as ``name``) at the step over ``divisor``
    (their Div's divisor set where it differs).
    """  # noqa: D205
    graph = model.graph
    if name in graph.initializers:
        graph.initializers[name].const_value = ir.tensor(values, name=name)
        target = graph.initializers[name]
    else:
        target = ir.Value(name=name, const_value=ir.tensor(values, name=name))
        graph.register_initializer(target)
    for node in graph:
        data, step = (node.inputs[0], node.inputs[1]) if len(node.inputs) > 1 else (None, None)
        if node.op_type != "Gather" or data is None or step is None or (data.name or "") != table.name:
            continue
        if not _layers(node) or not _layers(node) <= set(layers):
            continue  # a Gather serving layers of other needs keeps its table (their own copy is written for them)
        node.replace_input_with(0, target)
        div = step.producer()
        stated = None if div is None else _constant(div.inputs[1])
        if div is not None and (stated is None or int(stated.reshape(-1)[0]) != divisor):
            const = ir.Value(name=f"{name}/divisor", const_value=ir.tensor(np.array([divisor], np.int64)))
            if const.name not in graph.initializers:
                graph.register_initializer(const)
            div.replace_input_with(1, graph.initializers[const.name or ""])


def effect(path: Path, hf_config: str | Path, found: dict[str, Any], encodings: Any,
           threads: int | None = None) -> dict[str, Any]:  # fmt: skip
    """The effect of a ``query-scale`` finding: the model against its tables repaired, run as users run it."""
    import tempfile

    from ropeexport.audits.effect import between
    from ropeexport.audits.model import load_model, write_model

    if not found.get("tables"):  # read where the graph computes it (``audits.features``): no values to put right
        why = "a factor the graph computes (no table of it): graft puts table values right, it does not rewrite a " \
              "computation"  # fmt: skip
        return {"not_measured": why, "unrepairable": why}
    model = load_model(path)
    if not repair(model, hf_config, set(found.get("tables", []))):
        return {"not_measured": "its table's offset is not the config's: graft does not rewrite it"}
    with tempfile.TemporaryDirectory(prefix="ropeexport-effect-") as folder:
        fixed = Path(folder) / "fixed.onnx"
        write_model(model, fixed)
        del model
        return between(path, fixed, encodings, threads)
