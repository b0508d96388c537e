"""Per-layer features beside the rotation that follow the position, read from the graph against the config.

Llama 4's query temperature (``query-scale``), its chunked attention (``chunk``) and latent attention's rope
slice (``rope-slice``, ``audits.slices``):

- **Query scale.** A layer's query times a factor of its position (Llama 4's NoPE layers: 1 + attn_scale * log(1 +
  floor((pos + 1) / floor_scale)); Ministral 3's: 1 + beta * log(1 + floor(pos / original)),
  ``components.query_scale``). It is found by use: a ``Mul`` whose one input is the query (``rotations.role_of``: it
  reaches the left of q.k or an attention operator's query) and whose other is computed from the positions alone
  through a ``Floor`` or a ``Log`` (transformers' form, as torch.onnx's dynamo exporter writes it: computed once and
  read by every layer's query, each layer's then) or a gathered 1-D table (ropeexport's). That factor is evaluated in
  ONNX Runtime for one call of every position the config declares (0 .. E - 1, an empty cache) and compared with the
  formula in float64 (``query_scale64``), per layer: a factor on a layer the config gives none, none where it gives
  one, and one off by a position (the step one position early or late) or of other values are each said as what they
  are. It is part of the positional encoding's effect (a factor of the position) but not a rotary site. A gathered
  table of the factor is judged by ``audits.query_scale`` (its ``query-scale`` findings, which graft repairs); this
  module judges every other layer (a factor the graph computes, or none where the config gives one: findings without
  ``tables``, which graft refuses: ``graft._refuse_unchecked``).
- **Chunks.** Llama 4's RoPE layers attend within chunks of ``attention_chunk_size`` key slots. A chunk is an
  attention mask, outside the positional encoding (no rotary value changes with it), read from what each layer's
  attention lets through, evaluated (``audits.attention_reads``: any exporter's form), against the config's chunks
  starting at 0, C, 2C ...: another size, none, a boundary moved with the size kept, or another mask; a mask that
  cannot be evaluated is ``chunk-unread``, never exact.
- **The softmax's scale** on latent layers (``attention-scale``): an attention operator's ``scale``, or the constants
  a decomposed attention multiplies its logits by (``attention_reads.decomposed_scales``); unread:
  ``attention-scale-unread``.

Only a config that says them is checked (a decoder ropeexport builds from it: ``decoder.build.resolve``); the
findings carry ``sites`` [] and the readings go in the audit's ``layers`` (``query_scales``, ``chunks``,
``rope_slices``), so that a report says what was read even where nothing is wrong.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from ropeexport.audits.downstream import reached
from ropeexport.audits.layers import layer_finding, layer_of
from ropeexport.audits.patterns.base import Site, constant_of
from ropeexport.audits.rotations import role_of

# Nodes a position-made factor passes through to the query's Mul (one data input, the rest constants)
CARRIED = {"Add", "Sub", "Mul", "Div", "Log", "Cast", "Unsqueeze", "Squeeze", "Reshape", "Expand", "Identity",
           "Floor", "Gather"}  # fmt: skip
DEPTH = 12  # nodes followed from the Floor or the table's Gather to the query's Mul


def expected(config_path: Path | None) -> Any:
    """The decoder ropeexport builds from the config (its layers say chunks and query scales), or None."""
    if config_path is None:
        return None
    from ropeexport.decoder.build import resolve
    from ropeexport.decoder.request import DecoderRequest

    try:
        return resolve(DecoderRequest(hf_config=config_path))[0]
    except Exception:  # noqa: BLE001 - a model type ropeexport does not build: nothing said of these features
        return None


def _anchors(model: ir.Model) -> list[ir.Node]:
    """The Floor and Log nodes and the Gathers of a 1-D float constant table (module doc): the Log too, so that a
    factor computed without its Floor (the step dropped: log(1 + pos / original)) is still read, and judged.
    """  # noqa: D205
    found = []
    for node in model.graph:
        if node.op_type in ("Floor", "Log"):
            found.append(node)
        elif node.op_type == "Gather" and node.inputs and (table := constant_of(node.inputs[0])) is not None:
            if table.ndim == 1 and table.dtype.kind == "f":
                found.append(node)
    return found


def _query_factors(anchor: ir.Node) -> list[tuple[ir.Value, ir.Node]]:
    """Every (factor, query's Mul) the anchor's output reaches through ``CARRIED`` nodes: one factor computed once
    and read by every layer's query (torch.onnx's optimizer computes transformers' per-layer factor once) is each
    of those layers'.
    """  # noqa: D205
    found: list[tuple[ir.Value, ir.Node]] = []
    taken: set[int] = set()  # the queries' Muls: not followed past
    for use in reached(anchor.outputs[0], DEPTH, lambda n: n.op_type in CARRIED and id(n) not in taken):
        node = use.node
        other = [v for i, v in enumerate(node.inputs) if i != use.idx and v is not None]
        if node.op_type == "Mul" and other and constant_of(other[0]) is None and role_of(node.outputs[0]) == "q":
            found.append((node.inputs[use.idx], node))
            taken.add(id(node))
    return found


def read_scales(path: Path, model: ir.Model, length: int, threads: int = 2) -> dict[int, np.ndarray]:
    """Layer -> the factor its query is multiplied by at positions 0 .. length - 1 (float64), where one is found."""
    from ropeexport.audits.slices import evaluate

    found: dict[int, ir.Value] = {}
    for anchor in _anchors(model):
        for factor, mul in _query_factors(anchor):
            if (layer := layer_of(mul.name or "", mul.metadata_props)) is not None:
                found.setdefault(layer, factor)
    if not found:
        return {}
    names = [v.name or "" for v in found.values()]
    got = evaluate(path, names, length, threads)
    if got is None:
        return {}
    out = {}
    for layer, array in zip(found, got, strict=True):
        flat = np.asarray(array, np.float64).reshape(-1)
        if flat.size == length:  # one factor per position ([b, s], [b, 1, s, 1], ...)
            out[layer] = flat
    return out


def _words(described: Any) -> str:
    coefficient, divisor = (described.get(k) for k in ("attn_scale", "floor_scale"))
    if described.get("kind") == "temperature":
        return f"q * (log(floor((pos + 1) / {divisor}) + 1) * {coefficient} + 1)"
    original = described.get("original_max_position_embeddings")
    return f"q * (1 + {described.get('beta')} * log(1 + floor(pos / {original})))"


def scale_findings(seen: dict[int, np.ndarray], spec: Any,
                   skip: frozenset[int] = frozenset()) -> list[dict[str, Any]]:  # fmt: skip
    """``query-scale`` findings (module doc) of the layers not in ``skip``, grouped by what is wrong; each with
    ``sites`` [].
    """  # noqa: D205
    from ropeexport.components.query_scale import QueryScaleSpec, query_scale64

    groups: dict[str, list[int]] = {}
    for i, layer in enumerate(spec.layers):
        if i in skip:  # a gathered table's layer: ``audits.query_scale`` judged it
            continue
        if (layer.query_scale or {}).get("kind") == "learned_log":  # the checkpoint's weights (Mistral Large 4), not
            continue  # the config's: nothing to judge a config against
        have = seen.get(i)
        if layer.query_scale is None:
            if have is not None and np.max(np.abs(have - 1.0)) > 1e-6:
                groups.setdefault("{who} scale{s} the query by a factor of its position where the config gives "
                                  "{them} none (the temperature is on the NoPE layers only)", []).append(i)  # fmt: skip
            continue
        said = _words(layer.query_scale)
        if have is None:
            groups.setdefault(f"no query scale found on {{who}} where the config gives {{them}} {said}", []).append(i)
            continue
        want = query_scale64(QueryScaleSpec.of(layer.query_scale, len(have), "fp32"), np.arange(len(have)))
        tol = 4 * float(np.finfo(np.float32).eps) * float(np.max(np.abs(want)))
        if np.max(np.abs(have - want)) <= tol:
            continue
        early = np.max(np.abs(have[:-1] - want[1:])) <= tol  # position p scaled as the config scales p + 1
        late = np.max(np.abs(have[1:] - want[:-1])) <= tol
        if early or late:
            text = (f"{{who}} scale{{s}} the query one position {'early' if early else 'late'}: position p takes the "
                    f"config's factor of p {'+' if early else '-'} 1 (config: {said})")  # fmt: skip
        else:
            worst = int(np.argmax(np.abs(have - want)))
            text = (f"{{who}} scale{{s}} the query by {have[worst]:.6g} at position {worst} where the config's {said} "
                    f"gives {want[worst]:.6g}")  # fmt: skip
        groups.setdefault(text, []).append(i)
    return [layer_finding("query-scale", t, "", layers) | {"sites": []} for t, layers in groups.items()]


def _starts(starts: list[int]) -> str:
    return ", ".join(str(p) for p in starts[:4]) + (", ..." if len(starts) > 4 else "")


def _said(reading: dict[str, Any]) -> str:
    """A layer's chunks in words (``attention_reads.chunks_of``)."""
    size = reading["size"]
    if size == 0:
        return "without chunks (every earlier key)"
    if size is None:
        return f"in chunks starting at positions {_starts(reading['starts'])}"
    return f"in chunks of {size} key slots"


def chunk_findings(read: dict[int, dict[str, Any]], unread: dict[int, str], spec: Any,
                   n: int) -> list[dict[str, Any]]:  # fmt: skip
    """``chunk`` findings: the layers whose mask cuts the keys otherwise than the config's chunks (module doc:
    another size, none, a boundary moved, another mask; read at positions 0 .. ``n`` - 1), and ``chunk-unread`` for a
    chunked layer whose mask was not read; ``sites`` [].
    """  # noqa: D205
    groups: dict[tuple[str, str], list[int]] = {}
    for i, layer in enumerate(spec.layers):
        want = layer.attention.window if layer.attention.mask == "chunked" else 0
        wanted = f"chunks of {want} key slots" if want else "no chunks"
        if i in unread:
            if want:
                groups.setdefault(("chunk-unread", f"the chunks of {{who}} are not read ({unread[i]}): the config "
                                   f"gives {{them}} {wanted} (attention_chunk_size)"), []).append(i)  # fmt: skip
            continue
        have = read.get(i)
        if have is None:
            continue
        starts = list(range(0, n, want)) if want else [0]
        if have.get("starts") == starts:
            continue
        tail = "(attention_chunk_size; a mask, outside the positional encoding)"
        if "other" in have:
            text = (f"{{who}} attend{{s}} to keys no chunks explain ({have['other']}) where the config gives {{them}} "
                    f"{wanted} {tail}")  # fmt: skip
        elif have["size"] == want and want:
            moved = have["starts"][1] - want
            text = (f"{{who}} attend{{s}} in chunks of {want} key slots starting at positions "
                    f"{_starts(have['starts'])} where the config's start at {_starts(starts)} (a chunk boundary "
                    f"{abs(moved)} position{'s' if abs(moved) > 1 else ''} {'late' if moved > 0 else 'early'}) "
                    f"{tail}")  # fmt: skip
        else:
            text = f"{{who}} attend{{s}} {_said(have)} where the config gives {{them}} {wanted} {tail}"
        groups.setdefault(("chunk", text), []).append(i)
    return [layer_finding(name, t, "", layers) | {"sites": []} for (name, t), layers in groups.items()]


def read_chunks(path: Path, model: ir.Model, spec: Any, length: int, threads: int,
                readings: dict[str, Any]) -> list[dict[str, Any]]:  # fmt: skip
    """The chunks of every layer read from its evaluated mask (``attention_reads``) over 2 chunks and 2 tokens (at
    most ``length``), kept in ``readings`` (``chunks``: size, 0 none, None one boundary seen; ``chunk_starts``), and
    their findings.
    """  # noqa: D205
    from ropeexport.audits.attention_reads import chunks_of, read_visible

    size = max(layer.attention.window for layer in spec.layers if layer.attention.mask == "chunked")
    n = min(length, 2 * size + 2)
    heads = max(layer.attention.num_heads for layer in spec.layers)
    seen, unread = read_visible(path, model, list(range(len(spec.layers))), n, heads, threads)
    read = {i: chunks_of(v) for i, v in seen.items()}
    readings["chunks"] = {str(i): r.get("size", "other") for i, r in sorted(read.items())}
    readings["chunk_starts"] = {str(i): r.get("starts", r.get("other")) for i, r in sorted(read.items())}
    if unread:
        readings["chunks_unread"] = {str(i): why for i, why in sorted(unread.items())}
    return chunk_findings(read, unread, spec, n)


ATTENTION_OPS = ("Attention", "MultiHeadAttention", "GroupQueryAttention")


def read_attention_scales(model: ir.Model) -> dict[int, float | str | None]:
    """Layer -> the ``scale`` attribute of its attention operator (None: absent or 0, the operator's default
    1/sqrt(head size)); a layer without one, the product of the constants its decomposed attention scales the logits
    by (``attention_reads.decomposed_scales``), or why that is unread.
    """  # noqa: D205
    from ropeexport.audits.attention_reads import decomposed_scales

    seen: dict[int, float | str | None] = {}
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.op_type in ATTENTION_OPS and (layer := layer_of(node.name or "", node.metadata_props)) is not None:
            attr = node.attributes.get("scale")
            seen[layer] = float(attr.value) if attr is not None and float(attr.value) else None
    for layer, read in decomposed_scales(model).items():
        seen.setdefault(layer, read)
    return seen


def scale_of_softmax_findings(seen: dict[int, float | str | None], spec: Any,
                              operators: frozenset[int] = frozenset()) -> list[dict[str, Any]]:  # fmt: skip
    """``attention-scale`` findings on latent layers: YaRN's mscale, which DeepSeek puts in the softmax scale squared
    (``1/sqrt(qk_head_dim) * mscale(factor, mscale_all_dim)**2``), missing, doubled or other; a layer whose scale is
    unread, ``attention-scale-unread``; ``sites`` []. ``operators``: the layers read from an operator's attribute
    (exact to 1e-6); the others are products of constants in the model's dtype (fp16's rounding: 2e-3).
    """  # noqa: D205
    groups: dict[tuple[str, str], list[int]] = {}
    for i, layer in enumerate(spec.layers):
        a = layer.attention
        if a.kind != "latent":
            continue
        plain = (a.qk_nope_head_dim + a.head_dim) ** -0.5
        want = a.scale or plain
        read = seen.get(i, "no attention operator or Softmax names this layer")
        if isinstance(read, str):
            groups.setdefault(("attention-scale-unread", f"{{who}}'s attention scale is not read ({read}) where the "
                               f"config gives {want:.6g} (1/sqrt(qk_head_dim) times the softmax's mscale squared)"),
                              []).append(i)  # fmt: skip
            continue
        have = float(read) if read is not None else plain
        tol = 1e-6 if i in operators else 2e-3
        if math.isclose(have, want, rel_tol=tol):
            continue
        squared = want / plain
        if math.isclose(have * squared, want, rel_tol=tol):
            how = f"lacks YaRN's mscale squared ({squared:.6g})"
        elif math.isclose(have, want * squared, rel_tol=tol):
            how = f"has YaRN's mscale squared ({squared:.6g}) twice"
        else:
            how = "is another"
        groups.setdefault(("attention-scale", f"{{who}}'s attention scale {have:.6g} {how} where the config gives "
                           f"{want:.6g} (1/sqrt(qk_head_dim) times the softmax's mscale squared: YaRN's attention "
                           "factor, in the softmax)"), []).append(i)  # fmt: skip
    return [layer_finding(name, t, "", layers) | {"sites": []} for (name, t), layers in groups.items()]


def feature_findings(path: Path, model: ir.Model, sites: list[Site], config_path: Path | None,
                     readings: dict[str, Any], length: int, threads: int = 2,
                     tabled: frozenset[int] = frozenset()) -> list[dict[str, Any]]:  # fmt: skip
    """Every finding of this module's features (module doc), the query scales read at positions 0 .. ``length`` - 1
    (the positions the audit checks); what was read goes into ``readings``. Query-scale findings never of the
    ``tabled`` layers: ``audits.query_scale`` judges gathered tables (one judge each).
    """  # noqa: D205
    from ropeexport.audits.slices import latent_widths, read_slices, slice_findings

    out: list[dict[str, Any]] = []
    widths = latent_widths(config_path)
    if widths is not None:
        readings["rope_slices"] = read_slices(path, model, sites, widths, threads)
        out += slice_findings(readings["rope_slices"], widths)
    spec = expected(config_path)
    if spec is None:
        return out
    if any(layer.attention.kind == "latent" for layer in spec.layers):
        scales = read_attention_scales(model)
        readings["attention_scales"] = {str(i): v for i, v in scales.items()}
        operators = frozenset(layer_of(n.name or "", n.metadata_props) for n in model.graph.all_nodes()
                              if n.op_type in ATTENTION_OPS) - {None}  # fmt: skip
        out += scale_of_softmax_findings(scales, spec, operators)  # type: ignore[arg-type]
    if any(layer.query_scale is not None for layer in spec.layers) or _anchors(model):
        seen = read_scales(path, model, length, threads)
        readings["query_scales"] = {str(i): {"first": float(v[0]), "last": float(v[-1])} for i, v in seen.items()}
        out += scale_findings(seen, spec, tabled)
    if any(layer.attention.mask == "chunked" for layer in spec.layers):
        out += read_chunks(path, model, spec, length, threads, readings)
    return out
