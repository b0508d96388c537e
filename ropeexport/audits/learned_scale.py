"""Mistral Large 4's learned query scale audited against its checkpoint: ``q_scale[h] * log(pos + 1) + q_bias[h]``.

transformers 5.23's ``MistralLarge4TextSoftmaxScaling`` (modular_mistral_large4.py 295-308) multiplies each head's
query by ``scale[h] * log(position_ids + 1) + bias[h]``, the log taken in float32, in every layer's attention
(``layers.{i}.attention.ssmax_scaling.s`` / ``.b`` as Mistral saves them) and in its indexer's query
(``layers.{i}.attention.indexer.ssmax_scaling.s`` / ``.b``). The values are the checkpoint's, not the config's: they
are read from the checkpoint beside config.json (``hf.learned_rope.beside``, as LeRoPE's alpha is), through the
decoder's own reading of a checkpoint (``decoder.checkpoint.CheckpointWeights``: the names and formats a build reads).

Found in the graph by what it computes, not by its names: a ``Mul`` of a constant of H >= 2 values (through nodes that
only shape or cast it, ``SHAPING``) by a log of the position (``log_of``: a ``Gather`` of a 1-D float table at
``position_ids`` plus a constant, ropeexport's form, ``components.query_scale.learned_factor``; or a ``Log`` of
``position_ids`` plus a constant, cast, transformers' form and ropeexport's indexer's), and the ``Add`` of a constant of
H values after it (the bias; none found: no bias added). Its layer is its name's or module path's (``layers.layer_of``);
it is the indexer's when either says ``indexer``, or when the query it multiplies selects keys
(``indexer.feeds_selection``: ONNX Runtime's optimized graph folds the scale into a constant no name of which says
it). Checked in float64 per layer and head, each value within two units of its stored dtype of the checkpoint's value
rounded once to that dtype: the scale, the bias, and the log at every
position 0 .. max_positions - 1 against log(p + 1) (``query_scale._close``). The attention's factor, and the
indexer's, must also multiply that part's query rotation (``slices``' reading of it, ``_applied``): after it, before
the query meets a key, or before it, after the projection; not traced: the nope half alone, a NoPE layer's query (no
rotation to follow).

- ``learned-query-scale``: a scale, a bias or the log's position step other than the checkpoint's (the words say
  the layers, the part, the heads, what the graph holds and what the checkpoint holds), or a factor right but not
  on its layer's query rotation's path (``NOT_APPLIED``);
- ``learned-query-scale-unread``: no checkpoint beside the config, one that does not read, or a layer whose factor is
  not found in the graph: not checked, never called exact.

graft repairs neither (``fix.UNREPAIRABLE``): it puts the config's values right, and these are the checkpoint's.

Shapes: scale and bias [H] (H the attention's heads, or the indexer's ``index_n_heads``); the log [P], P positions.
"""  # noqa: D205

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from ropeexport.audits.indexer import feeds_selection
from ropeexport.audits.layers import SCOPES, layer_finding, layer_of
from ropeexport.audits.patterns.base import Site, constant_of
from ropeexport.audits.query_scale import _close, learned

SHAPING = {"Unsqueeze", "Squeeze", "Reshape", "Cast", "Identity", "Expand"}
# part -> the canonical names of its scale and bias (``architectures.mistral_large4_text.NAMES``)
PARTS = {"attention": ("q_scale", "q_scale_bias"), "indexer": ("indexer.q_scale", "indexer.q_bias")}
# where a query's path ends: it meets a key (forward) or its projection (backward)
MEETS = {"MatMul", "Gemm", "MatMulNBits", "Einsum", "Softmax", "Attention", "GroupQueryAttention", "MultiHeadAttention",
         "Shape"}  # fmt: skip
NOT_APPLIED = ("its query rotation's output reaches the query . key product without the factor (a half or all of the "
               "query unscaled)")  # fmt: skip
FOUND_AS = ("ropeexport reads a Mul of H constants by a log of position_ids (a gathered table or a Log), then an Add "
            "of H constants")  # fmt: skip


@dataclass
class Factor:
    """One learned factor the graph computes: its layer, part (attention or indexer), values and the Mul it is at."""

    layer: int | None
    part: str
    scale: np.ndarray  # [H], as stored
    bias: np.ndarray | None  # [H], as stored; None: no bias added
    log: np.ndarray  # [P] in its dtype: the log the graph takes at positions 0 .. P - 1 (NaN past a table's end)
    node: str
    out: ir.Value | None = None  # the factor the query is multiplied by: the bias's Add, else the Mul


def _through(value: ir.Value) -> ir.Value:
    """The value ``value`` is made from by nodes that only shape or cast it (``SHAPING``)."""
    while (made := value.producer()) is not None and made.op_type in SHAPING and made.inputs and made.inputs[0]:
        value = made.inputs[0]
    return value


def _heads(value: ir.Value | None) -> np.ndarray | None:
    """[H]: a float constant of H >= 2 values along one axis behind ``value`` (``_through``), else None."""
    found = None if value is None else constant_of(_through(value))
    if found is None or found.dtype.kind != "f" or found.size < 2 or max(found.shape, default=0) != found.size:
        return None
    return found.reshape(-1)


def _position_plus(value: ir.Value | None) -> int | None:
    """c when ``value`` is ``position_ids`` + c (casts, shaping and Adds of an integral constant between), else None.
    A value named for the positions is taken as them (ropeexport's range guard, ``position_ids__checked``, adds a
    computed zero: ``query_scale.tables`` reads it so too).
    """  # noqa: D205
    added = 0
    while value is not None:
        value = _through(value)
        if "position_ids" in (value.name or ""):
            return added
        node = value.producer()
        if node is None or node.op_type != "Add" or len(node.inputs) != 2:
            return None
        constants = [constant_of(v) for v in node.inputs]
        k = next((i for i, c in enumerate(constants) if c is not None and c.size == 1), None)
        if k is None or float(constants[k].reshape(-1)[0]) != int(constants[k].reshape(-1)[0]):  # type: ignore[union-attr]
            return None
        added += int(constants[k].reshape(-1)[0])  # type: ignore[union-attr]
        value = node.inputs[1 - k]
    return None


def _dtype(value: ir.Value | None) -> np.dtype:
    """The numpy dtype of ``value``: its type's, else the ``to`` of the Cast making it, else float32
    (transformers' ``(position_ids + 1).float().log()``).
    """  # noqa: D205
    if value is None:
        return np.dtype(np.float32)
    if value.dtype is not None:
        return np.dtype(value.dtype.numpy())
    node = value.producer()
    if node is not None and node.op_type == "Cast" and "to" in node.attributes:
        return np.dtype(ir.DataType(node.attributes["to"].value).numpy())
    return np.dtype(np.float32)


def log_of(value: ir.Value, positions: int) -> np.ndarray | None:
    """[positions]: the log ``value`` holds at positions 0 .. positions - 1 (module doc: a gathered table at
    position_ids + c, or the Log of position_ids + c in the dtype the Log takes), in its dtype; None when it is neither.
    """  # noqa: D205
    node = _through(value).producer()
    if node is None or not node.inputs:
        return None
    if node.op_type == "Log":
        step = _position_plus(node.inputs[0])
        if step is None:
            return None
        # in the dtype the Log takes (float16 holds no position + 1 past 65504: inf there), log(0) -inf, as the graph
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.log((np.arange(positions) + step).astype(_dtype(node.inputs[0])))
    if node.op_type == "Gather" and len(node.inputs) == 2:
        table, step = constant_of(node.inputs[0]), _position_plus(node.inputs[1])
        if table is None or table.ndim != 1 or table.dtype.kind != "f" or step is None:
            return None
        at = np.arange(positions) + step
        inside = (at >= 0) & (at < table.size)
        out = np.full(positions, np.nan, table.dtype)
        out[inside] = table[at[inside]]
        return out
    return None


def factors(model: ir.Model, positions: int) -> list[Factor]:
    """Every learned factor of the main graph (module doc), the log read at ``positions`` positions."""
    found = []
    for node in model.graph:
        if node.op_type != "Mul" or len(node.inputs) != 2 or any(v is None for v in node.inputs):
            continue
        for k in (0, 1):
            scale = _heads(node.inputs[k])
            log = None if scale is None else log_of(node.inputs[1 - k], positions)  # type: ignore[arg-type]
            if scale is None or log is None:
                continue
            bias, out = next(((b, use[0].outputs[0]) for use in node.outputs[0].uses() if use[0].op_type == "Add"
                              for b in (_heads(v) for v in use[0].inputs if v is not node.outputs[0])
                              if b is not None), (None, node.outputs[0]))  # fmt: skip
            props = dict(node.metadata_props)
            said = " ".join([node.name or "", _through(node.inputs[k]).name or "",  # type: ignore[arg-type]
                             *(props.get(s, "") for s in SCOPES)])  # fmt: skip
            # by use where no name says it: ONNX Runtime folds the scale's Reshape into a constant of the Reshape's
            # name, and the indexer's factor keeps no "indexer" (its query's product selects keys: ``feeds_selection``)
            part = "indexer" if "indexer" in said or feeds_selection(out) else "attention"
            found.append(Factor(layer_of(node.name or "", props), part, scale, bias, log, node.name or "", out))
            break
    return found


def _applied(rotation: list[ir.Value], factor: Factor) -> bool:
    """Whether a Mul by ``factor`` (through ``SHAPING``) lies on the query's path through its ``rotation`` (the
    rotation's inputs): after it, before the query meets a key (``MEETS``), as transformers applies it to the
    concatenated rotated query, or before it, after the projection (a per-head factor commutes with the rotation).
    """  # noqa: D205
    for forward in (True, False):
        seen: set[int] = set()
        frontier = list(rotation)
        while frontier:
            value = frontier.pop()
            nodes = [use[0] for use in value.uses()] if forward else [value.producer()]
            for node in nodes:
                if node is None or id(node) in seen:
                    continue
                seen.add(id(node))
                if node.op_type == "Mul" and any(v is not None and _through(v) is factor.out for v in node.inputs):
                    return True
                if node.op_type not in MEETS:
                    frontier += node.outputs if forward else [v for v in node.inputs if v is not None]
    return False


def _values(values: np.ndarray, heads: list[int]) -> str:
    return ", ".join(f"{float(values[h]):.6g}" for h in heads[:4]) + (", ..." if len(heads) > 4 else "")


def _heads_words(heads: list[int]) -> str:
    shown = ", ".join(str(h) for h in heads[:4]) + (", ..." if len(heads) > 4 else "")
    return f"head{'s' if len(heads) > 1 else ''} {shown}"


def _compare(what: str, stored: np.ndarray | None, want: np.ndarray, key: str) -> str | None:
    """Why the graph's ``stored`` [H] is not the checkpoint's ``want`` [H] (float64), in words; None when it is."""
    if stored is None:
        heads = list(range(want.size))
        return f"no {what} is added where the checkpoint's {key} holds {_values(want, heads)} ({_heads_words(heads)})"
    if stored.size != want.size:
        return f"the graph holds {stored.size} heads' {what}s where the checkpoint's {key} holds {want.size}"
    off = [h for h in range(want.size) if not _close(stored[h : h + 1], want[h : h + 1])]
    if not off:
        return None
    swapped = _close(np.sort(stored), np.sort(want)) and len(off) > 1  # the same values at other heads
    return (f"the {what} of {_heads_words(off)} is {_values(stored, off)} where the checkpoint's {key} holds "
            f"{_values(want, off)}" + (" (the heads' values swapped)" if swapped else ""))  # fmt: skip


def _log_words(log: np.ndarray) -> str | None:
    """Why the graph's log [P] is not log(p + 1), in words; None when it is at every position."""
    positions = np.arange(log.size, dtype=np.float64)
    if np.all(np.isfinite(log)) and _close(log, np.log1p(positions)):
        return None
    for step in (0, 2):  # the position step taken one early or one late
        with np.errstate(divide="ignore"):
            other = np.log(positions + step)
        finite = np.isfinite(other)
        if np.all(np.isfinite(log[finite])) and _close(log[finite], other[finite]):
            return (f"the log is log(pos{f' + {step}' if step else ''}) where transformers takes log(pos + 1) (the "
                    f"factor one position {'behind' if step == 0 else 'ahead'})")  # fmt: skip
    off = np.abs(log.astype(np.float64) - np.log1p(positions))  # beyond two units of the log's dtype (``_close``)
    bad = np.flatnonzero(~np.isfinite(log) | (off > 2 * np.spacing(np.log1p(positions).astype(log.dtype))))
    p = int(bad[0]) if bad.size else int(np.argmax(off))
    return f"the log at position {p} is {float(log[p]):.6g} where log({p} + 1) is {float(np.log1p(p)):.6g}"


def _checkpoint(hf_config: str | Path, layers: list[int]) -> tuple[Any, dict[str, np.ndarray]] | str:
    """(the decoder spec of ``hf_config``, the scales and biases [H] of ``layers`` in float64 by canonical name) from
    the checkpoint beside it, or why not. The values are read here, under the same guard as the headers: a tensor
    that does not read (a NaN in it, say) leaves the factor unread, not a crash of the whole audit.
    """  # noqa: D205
    from ropeexport.decoder.build import resolve
    from ropeexport.decoder.checkpoint import CheckpointWeights
    from ropeexport.decoder.request import DecoderRequest
    from ropeexport.errors import CheckpointError, InputError
    from ropeexport.hf.learned_rope import beside

    folder = beside(hf_config)
    if folder is None:
        return "no checkpoint beside the config (its safetensors in the config's folder) to read them from"
    try:
        spec, _ = resolve(DecoderRequest(hf_config=Path(hf_config)))
        weights = CheckpointWeights(spec, folder)
        names = [f"layers.{i}.{n}" for i in layers for pair in PARTS.values() for n in pair]
        return spec, {name: np.asarray(weights[name], np.float64) for name in names if name in weights}
    except (CheckpointError, InputError, OSError, ValueError, KeyError) as exc:
        return f"the checkpoint beside the config does not read ({exc})"


def findings(model: ir.Model, hf_config: str | Path | None, sites: list[Site]) -> list[dict[str, Any]]:
    """The findings of the learned query scale of the layers the config gives one (module doc), each with ``sites``
    []; ``sites`` the rotary sites (``slices``: each layer's query rotation, which the factor must scale).
    """  # noqa: D205
    from ropeexport.audits.slices import _rotations

    layers = learned(hf_config)
    if not layers or hf_config is None:
        return []
    read = _checkpoint(hf_config, layers)
    if isinstance(read, str):
        return [_unread(layers, read)]
    spec, weights = read
    positions = spec.position_spec().max_positions
    graph: dict[tuple[int | None, str], list[Factor]] = {}
    rotations: dict[tuple[int | None, str], list[ir.Value]] = {}  # each layer's and part's query rotations' inputs
    for layer, role, own, inputs in _rotations(model, sites):
        if role == "q":  # the attention's query, or the indexer's (own: its own factor)
            rotations.setdefault((layer, "indexer" if own else "attention"), []).extend(inputs)
    for read_one in factors(model, positions):  # each copy checked (a graph may compute one factor more than once)
        graph.setdefault((read_one.layer, read_one.part), []).append(read_one)
    groups: dict[str, list[int]] = {}
    missing: list[int] = []
    for i in layers:
        for part, names in PARTS.items():
            canonical = [f"layers.{i}.{n}" for n in names]
            if canonical[0] not in weights:  # a layer without an indexer of its own (a shared one, or none)
                continue
            if (i, part) not in graph:
                missing.append(i)
                continue
            keys = [spec.architecture.names.get(f"layers.{{i}}.{n}", n).format(i=i) for n in names]
            scale, bias = (weights[name] for name in canonical)
            said = {words for factor in graph[i, part]
                    for words in (_compare("scale", factor.scale, scale, keys[0]),
                                  _compare("bias", factor.bias, bias, keys[1]), _log_words(factor.log))
                    if words}  # fmt: skip
            if (i, part) in rotations and not any(_applied(rotations[i, part], f) for f in graph[i, part]):
                said.add(NOT_APPLIED)  # computed right, not multiplied into its rotated query
            for words in sorted(said):
                groups.setdefault(f"{part}: {words}", []).append(i)
    out = []
    for words, found in groups.items():
        part, _, what = words.partition(": ")
        template = f"{{who}} scale{{s}} the {part}'s query by a learned factor other than the checkpoint's: {what}"
        out.append(layer_finding("learned-query-scale", template, "", found) | {"sites": []})
    if missing:
        out.append(_unread(sorted(set(missing)), f"no factor of it was found in the graph ({FOUND_AS})"))
    return out


def _unread(layers: list[int], why: str) -> dict[str, Any]:
    template = ("{who} scale{s} the query by a learned per-head factor (q_scale[h] * log(pos + 1) + q_bias[h], the "
                f"checkpoint's weights, not the config's): not checked, {why}")  # fmt: skip
    return layer_finding("learned-query-scale-unread", template, "", layers) | {"sites": []}
