"""Latent attention's rope slice: which channels of each head a rotation turns, read from the values the model moves.

DeepSeek V2 / V3 and Kimi K2 (``kv_lora_rank`` with ``qk_rope_head_dim``) rotate only part of each head. transformers
5.23 splits each query head of ``qk_nope_head_dim + qk_rope_head_dim`` channels into the nope part and the rope part
(``torch.split(q, [nope, rope], -1)``: the rope part last), and the key's rope part off the end of ``kv_a_proj``'s
output (``kv_lora_rank`` latent channels, then ``qk_rope_head_dim``: one rotated key shared by every head). A table
checked right says nothing of which channels it turns: an export that rotates the nope dims (the split's outputs
taken in the wrong order) has exact tables and is wrong (planted: ``tests/audits/test_audit_latent.py``).

How it is read (no names trusted): every rotation's input (a ``RotaryEmbedding``'s X, or the tensors a decomposed
rotation multiplies with cos and sin, ``rotations.find_rotations``) is followed back through nodes that only move
channels (``MOVES``) to the tensor it is cut from (its ``source``: the projection's output). Both are evaluated in
ONNX Runtime for one call of ``LENGTH`` tokens (the model's own weights: every value a product of random-looking
weights, so a value names the channel it sits in), and each rotated value is looked up among the source's channels.
The channels found, modulo the head's width (``qk_nope_head_dim + qk_rope_head_dim`` for the query,
``kv_lora_rank + qk_rope_head_dim`` for the key), must be the last ``qk_rope_head_dim``. A query or key rotation
whose values are not found among its source's (a norm or a scale between them), or that cannot be evaluated apart
from its source, is not read: said so in ``slices`` and a ``rope-slice-unread`` finding of its layers (never exact).
Not findings: a rotation nothing reads as a query or a key (its role untold: a reusing layer's key rotation, whose
output Mistral Large 4's build leaves unused), said in ``slices`` as not read. The DSA indexer's rotations (its
output reaches a score product that reaches a TopK: ``indexer.feeds_selection``) are read apart from the attention's:
each indexer head's and its key's FIRST ``qk_rope_head_dim`` channels (``components.latent.indexer``), a wrong one
``rope-slice``, an unread one ``rope-slice-unread``, both marked ``indexer``.

Shapes: source [.., W] (W = heads * width, or width), a rotation's input [.., r] (r the rotated channels).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from ropeexport.audits.indexer import feeds_selection
from ropeexport.audits.layers import layer_finding, layer_of
from ropeexport.audits.model import load_model, materialize, quiet
from ropeexport.audits.observe import _cut, _output_for, session_feeds
from ropeexport.audits.patterns.base import Site, is_constant
from ropeexport.audits.rotations import _carried, role_of
from ropeexport.audits.uses import _sources
from ropeexport.hf import spans

MOVES = {"Slice", "Split", "Reshape", "Transpose", "Unsqueeze", "Squeeze", "Identity", "Expand"}
LENGTH = 4  # tokens of the one call evaluated: enough values per channel to tell the channels apart
ROTARY_OPS = ("RotaryEmbedding",)


def latent_widths(config_path: Path | None) -> dict[str, int] | None:
    """The widths latent attention splits ({q, k: the width a query head or the key is cut from; rope: the rotated
    channels}), or None for a config without latent attention.
    """  # noqa: D205
    if config_path is None:
        return None
    try:
        config = json.loads(Path(config_path).read_text())
    except (OSError, ValueError):
        return None  # the audit's own reading of the config says what is wrong with it
    config = config.get("text_config") or config
    rope, nope, lora = (config.get(k) for k in ("qk_rope_head_dim", "qk_nope_head_dim", "kv_lora_rank"))
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (rope, nope, lora)):
        return None
    out = {"q": nope + rope, "k": lora + rope, "rope": rope}
    index = config.get("index_head_dim") if "index_topk" in config else None
    if isinstance(index, int) and not isinstance(index, bool) and index >= rope:
        out["index"] = index  # DeepSeek Sparse Attention's indexer: its heads' and its key's width
    return out


def _source(value: ir.Value) -> ir.Value:
    """The tensor ``value`` is cut from by nodes that only move channels (module doc)."""
    while (made := value.producer()) is not None and made.op_type in MOVES and made.inputs and made.inputs[0]:
        value = made.inputs[0]
    return value


Rotated = tuple[int | None, str | None, bool, list[ir.Value]]  # (layer, role, the indexer's, the rotation's inputs)


def _rotations(model: ir.Model, sites: list[Site]) -> list[Rotated]:
    """(layer, role, the indexer's, the rotation's inputs) of every rotation: a fused operator's X; in a decomposed
    rotation, the tensors multiplied by the cos a site makes (x itself: the sin's tensor is rotate(x), negated in
    part), grouped by the Mul's layer and role, the indexer's apart from the attention's (``indexer.feeds_selection``).
    """  # noqa: D205
    found: list[Rotated] = []
    known = sites[0].selection if sites else {}  # what reading the sites found already (``indexer.mark``)
    nodes = list(ir.traversal.RecursiveGraphIterator(model.graph))
    for node in nodes:
        if node.op_type in ROTARY_OPS and node.inputs and node.inputs[0] is not None:
            out = node.outputs[0]
            layer = layer_of(node.name or "", node.metadata_props)
            found.append((layer, role_of(out), feeds_selection(out, known), [node.inputs[0]]))
    cosines = [pair[0] for s in sites if (pair := _sources(s)) is not None]
    carried = _carried(cosines)
    grouped: dict[tuple[int | None, str | None, bool], list[ir.Value]] = {}
    for node in nodes:
        if node.op_type != "Mul" or len(node.inputs) != 2 or any(v is None for v in node.inputs):
            continue
        hits = [i for i, v in enumerate(node.inputs) if id(v) in carried and carried[id(v)][2] == 1]
        if len(hits) == 1 and not is_constant(node.inputs[1 - hits[0]]):
            out = node.outputs[0]
            key = (layer_of(node.name or "", node.metadata_props), role_of(out), feeds_selection(out, known))
            grouped.setdefault(key, []).append(node.inputs[1 - hits[0]])  # type: ignore[arg-type]
    found += [(layer, role, own, inputs) for (layer, role, own), inputs in grouped.items()]
    return found


def evaluate(path: Path, names: list[str], length: int, threads: int) -> list[np.ndarray] | None:
    """The values named (in a fresh copy of the model, cut to them) for one call of ``length`` tokens at positions
    0 .. length - 1 with an empty cache (``observe.feed``), or None when it does not run.
    """  # noqa: D205
    import onnxruntime as ort

    model = load_model(path)
    by_name = {v.name: v for n in model.graph for v in n.outputs} | dict(model.graph.initializers)
    by_name |= {v.name: v for v in model.graph.inputs}
    wanted = [by_name.get(n) for n in names]
    if any(v is None for v in wanted):
        return None
    model.graph.outputs.clear()
    model.graph.outputs.extend(_output_for(model.graph, v) for v in wanted if v is not None)
    _cut(model.graph)
    materialize(model)
    try:
        proto = ir.serde.serialize_model(model)
        session = ort.InferenceSession(proto.SerializeToString(), quiet(threads)[0],
                                       providers=["CPUExecutionProvider"])  # fmt: skip
        return [np.asarray(a) for a in session.run(None, session_feeds(session, length), quiet()[1])]
    except Exception:  # noqa: BLE001 - a cut that does not run leaves what it reads unread, said so by the caller
        return None


def _channels(source: np.ndarray, rotated: list[np.ndarray]) -> set[int] | None:
    """The channels of ``source``'s last axis whose values the rotated tensors hold; None when a value is in none
    (or in several: then it cannot name a channel).
    """  # noqa: D205
    width = source.shape[-1]
    flat = source.reshape(-1, width)
    where: dict[float, int] = {}
    for channel in range(width):
        for value in np.unique(np.abs(flat[:, channel])):
            where[float(value)] = -1 if where.get(float(value), channel) != channel else channel
    found: set[int] = set()
    for tensor in rotated:
        for value in np.unique(np.abs(tensor)):
            at = where.get(float(value))
            if at is None:
                return None
            if at >= 0:
                found.add(at)
    return found


def read_slices(path: Path, model: ir.Model, sites: list[Site], widths: dict[str, int],
                threads: int = 2) -> list[dict[str, Any]]:  # fmt: skip
    """Per rotation: its layer, role, the channels of its head it turns (modulo the head's width) or why unread."""
    rotations = _rotations(model, sites)
    untold = "what it rotates (a query or a key) is not told by what reads it"
    out: list[dict[str, Any]] = [{"layer": layer, "role": role, "unread": untold} | ({"indexer": True} if own else {})
                                 for layer, role, own, _ in rotations if role not in ("q", "k")]  # fmt: skip
    named = [(r, [_source(v) for v in r[3]]) for r in rotations if r[1] in ("q", "k")]
    values = [v for (_, _, _, inputs), srcs in named for v in (*inputs, *srcs)]
    names = [v.name or "" for v in values]
    got = evaluate(path, names, LENGTH, threads) if values and all(names) else None
    arrays = dict(zip(names, got or [], strict=False))
    for (layer, role, own, inputs), srcs in named:
        if own and "index" not in widths:  # an indexer's rotation where the config gives none: its width not told
            out.append({"layer": layer, "role": role, "indexer": True, "unread": "the config gives no indexer"})
            continue
        head = widths["index" if own else str(role)]
        record: dict[str, Any] = {"layer": layer, "role": role, "head": head} | ({"indexer": True} if own else {})
        if got is None or len({id(s) for s in srcs}) != 1:
            out.append(record | {"unread": "its input and the tensor it is cut from could not be evaluated apart"})
            continue
        source = arrays[srcs[0].name or ""]
        channels = _channels(source, [arrays[v.name or ""] for v in inputs])
        if channels is None or source.shape[-1] % head:
            out.append(record | {"unread": "its values are not moved channels of the projection's output"})
            continue
        out.append(record | {"channels": sorted({c % head for c in channels})})
    return out


def slice_findings(slices: list[dict[str, Any]], widths: dict[str, int]) -> list[dict[str, Any]]:
    """``rope-slice`` findings: the layers whose query or key rotation turns other channels than the config's last
    ``qk_rope_head_dim`` of each head (module doc; an indexer's, its first), grouped by (role, channels);
    ``rope-slice-unread``: those whose query or key rotation (any indexer rotation) was not read, grouped by (role,
    why); each with ``sites`` [].
    """  # noqa: D205
    groups: dict[tuple[str, tuple[int, ...]], list[int]] = {}
    indexed: dict[tuple[str, tuple[int, ...]], list[int]] = {}
    unread: dict[tuple[str, str, bool], list[int | None]] = {}
    for s in slices:
        if "channels" not in s:  # unread: a finding for a query or key (module doc), its layer told or not
            if s["role"] in ("q", "k") or s.get("indexer"):
                unread.setdefault((str(s["role"]), s["unread"], bool(s.get("indexer"))), []).append(s["layer"])
            continue
        if s.get("indexer"):  # the indexer rotates the FIRST qk_rope_head_dim dims of its heads and its key
            if s["channels"] != list(range(widths["rope"])) and s["layer"] is not None:
                indexed.setdefault((s["role"], tuple(s["channels"])), []).append(s["layer"])
            continue
        want = list(range(s["head"] - widths["rope"], s["head"]))
        if s["channels"] != want and s["layer"] is not None:
            groups.setdefault((s["role"], tuple(s["channels"])), []).append(s["layer"])
    out = [_indexer_slice(role, channels, layers, widths) for (role, channels), layers in indexed.items()]
    for (role, channels), layers in groups.items():
        head = widths[role]
        part = ("nope dims: qk_nope_head_dim" if role == "q" else "latent: kv_lora_rank") + f" {head - widths['rope']}"
        inside = set(channels) <= set(range(head - widths["rope"]))
        what = f"the {part}" if inside else f"not the last {widths['rope']}"
        noun = "query's channels" if role == "q" else "key's channels"
        of = f"of each {head}-channel head" if role == "q" else f"of kv_a_proj's {head}"
        template = (f"{{who}} rotate{{s}} the {noun} {spans(list(channels))} {of} ({what}) where the config "
                    f"rotates the last {widths['rope']} (qk_rope_head_dim)")  # fmt: skip
        out.append(layer_finding("rope-slice", template, "", sorted(set(layers))) | {"sites": []})
    for (role, why, own), found in unread.items():
        out += _unread(role, why, own, found)
    return out


def _unread(role: str, why: str, own: bool, found: list[int | None]) -> list[dict[str, Any]]:
    """The ``rope-slice-unread`` findings of the rotations of ``role`` left unread for ``why`` on layers ``found``
    (None: a rotation whose layer nothing tells, still never exact); ``own``: the indexer's, marked so.
    """  # noqa: D205
    told = sorted({i for i in found if i is not None})
    out = []
    if own:  # never exact about channels nobody read (the indexer's)
        what = {"q": "query's", "k": "key's"}.get(role, "")
        template = (f"the indexer on {{who}}: which channels its {what + ' ' if what else ''}rotation turns is not "
                    f"read ({why}): not checked")  # fmt: skip
        if told:
            out.append(layer_finding("rope-slice-unread", template, "", told) | {"sites": [], "indexer": True})
        return out
    noun = "query" if role == "q" else "key"
    if told:
        template = f"the {noun} rotation of {{who}} is not read ({why}): which channels it turns is not checked"
        out.append(layer_finding("rope-slice-unread", template, "", told) | {"sites": []})
    if None in found:  # no layer to name, still never exact
        template = (f"a {noun} rotation whose layer no name or module path tells is not read ({why}): which "
                    "channels it turns is not checked")  # fmt: skip
        out.append(layer_finding("rope-slice-unread", template, "", []) | {"sites": []})
    return out


def _indexer_slice(role: str, channels: tuple[int, ...], layers: list[int], widths: dict[str, int]) -> dict[str, Any]:
    """The ``rope-slice`` finding of indexer rotations turning other channels than the first ``qk_rope_head_dim`` of
    each indexer head (its query's) or of its one key, marked ``indexer``.
    """  # noqa: D205
    rope, head = widths["rope"], widths["index"]
    inside = set(channels) <= set(range(rope, head))
    what = f"its nope part: index_head_dim {head} past qk_rope_head_dim {rope}" if inside else f"not the first {rope}"
    noun = "query's channels" if role == "q" else "key's channels"
    of = f"of each {head}-channel indexer head" if role == "q" else f"of its {head}-channel key"
    template = (f"the indexer on {{who}} rotates its {noun} {spans(list(channels))} {of} ({what}) where the config "
                f"rotates the first {rope} (qk_rope_head_dim)")  # fmt: skip
    return layer_finding("rope-slice", template, "", sorted(set(layers))) | {"sites": [], "indexer": True}
