"""DeepSeek Sparse Attention's indexer in a model audit reads: which rotations are the indexer's, what its layers
need, and its findings in its own words.

The indexer (transformers 5.23 ``DeepseekV32Indexer``; ``components.latent.indexer``) rotates the first
``qk_rope_head_dim`` dims of its own query heads and of its one key with the attention's cos/sin, in pairs of its own
(``index_layout``: halves in DeepSeek V3.2, interleaved pairs in GLM-5 and Mistral Large 4, whose attention
interleaves them all), and not at all on Mistral Large 4's NoPE layers or on GLM-5's "shared" layers (they reuse
another layer's selection and run no indexer). So its rotations are judged against the layer's indexer, not the
attention: the same tables, the indexer's pairing.

Which rotation is the indexer's is read from the graph, not from names: the indexer's scores pick each query's keys
with a ``TopK``, the attention's go through a ``Softmax`` (or an attention operator). A rotation is the indexer's
when its output (a decomposed rotation's y, a ``RotaryEmbedding``'s output) reaches a score product (``MatMul``,
``Einsum`` or ONNX Runtime's ``FusedMatMul``: q . k, the rotated value on either side) through nodes that are none of
``STOPS`` nor another product, and that product reaches a ``TopK`` through no ``Softmax``, ``Sigmoid`` or attention
operator (products allowed: transformers weighs the heads' scores with a second MatMul) (``feeds_selection``). The
attention's q . k meets its ``Softmax`` (or its operator) first; a mixture's router (a ``TopK`` too) reads a product
of the hidden state through a ``Softmax`` or ``Sigmoid``, which no rotation reaches without passing an attention
first.
"""  # noqa: D205

from __future__ import annotations

from dataclasses import replace
from typing import Any

import onnx_ir as ir

from ropeexport.audits.downstream import reached
from ropeexport.audits.layers import Encodings, layer_finding
from ropeexport.audits.patterns import Site

# the indexer's q . k (its heads' scores); FusedMatMul: ONNX Runtime's MatMul with a transpose or scale folded in (its
# MatmulTransposeFusion and MatMulScaleFusion: none at level basic, 10 at extended and all in the tiny GLM-5's
# latent-cache build, ONNX Runtime 1.31.1), com.microsoft
SCORES = ("MatMul", "Einsum", "FusedMatMul")
STOPS = {"Softmax", "Attention", "GroupQueryAttention", "MultiHeadAttention", "SparseAttention", "PagedAttention"}
ROUTERS = {"Sigmoid"}  # a mixture's router scores (DeepSeek's sigmoid; a softmax router meets STOPS): not the indexer's
DEPTH = 16  # nodes followed from a rotation to its score product, and from that product to the TopK


def feeds_selection(value: ir.Value, known: dict[int, bool] | None = None) -> bool:
    """Whether the rotated ``value`` is the indexer's (module doc): it reaches a score product through no ``Softmax``,
    attention operator or other product, and that product a ``TopK`` through no ``Softmax``, ``Sigmoid`` or attention
    operator. ``known``: the answers one reading of the graph has already found, by id(value) (``Site.selection``),
    this one added: a value is walked once per reading.
    """  # noqa: D205
    if known is not None and id(value) in known:
        return known[id(value)]
    onward = lambda n: n.op_type not in STOPS and n.op_type not in SCORES  # noqa: E731
    scored = lambda n: n.op_type not in STOPS and n.op_type not in ROUTERS  # noqa: E731
    # every product before a stop: the indexer's when one selects keys
    found = any(use.node.op_type in SCORES and any(u.node.op_type == "TopK"
                                                   for u in reached(use.node.outputs[0], DEPTH, scored))
                for use in reached(value, DEPTH, onward))  # fmt: skip
    if known is not None:
        known[id(value)] = found
    return found


def mark(sites: list[Site]) -> list[Site]:
    """``sites`` with ``Site.indexer`` set where every rotation reading it is the indexer's (module doc); a site read
    by the indexer and the attention alike (one cos/sin for both, one pairing: GLM-5's dynamo export) split into one
    site of each's rotations (or fused readers), so that each is judged against its own pairs. The two keep the same
    values and readers: a repair of their values gives both the same exact rows (their tables are the same; only
    their pairs may differ, which a use of its own says: ``audits.uses``). A site the indexer's rotations read beside
    Muls no rotation read by use holds (``Site.unread``, the attention's rope slice, its heads' last channels: ONNX
    Runtime's one lookup for every layer) is split too, the attention's part with no rotations (its layers the
    lookup's reach, its pairing as its pattern reads it).
    """  # noqa: D205
    out: list[Site] = []
    known: dict[int, bool] = {}  # one reading's answers, kept by every site (``Site.selection``)
    for site in sites:
        site.selection = known
        if site.rotations:
            own = [r for r in site.rotations if r.indexer]
            theirs = [r for r in site.rotations if not r.indexer]
            # the attention's rotations of its rope slice (its heads' last channels) are not read by use: where one
            # lookup serves both (ONNX Runtime merges the layers' identical lookups), its Muls are left unread, and
            # the attention's part is read as its pattern reads it (no rotations: its layers the lookup's reach)
            unread = [m for m in site.unread if not feeds_selection(m.outputs[0], known)] if own else []
            if own and (theirs or unread):
                attention = replace(site, rotations=[], interleaved=None) if unread else replace(site, rotations=theirs)
                out += [attention, replace(site, rotations=own, indexer=True, unread=[])]
                continue
            site.indexer = bool(own)
            out.append(site)
            continue
        rotary = [n for n in site.readers if n.op_type == "RotaryEmbedding" and n.outputs]
        own = [n for n in rotary if feeds_selection(n.outputs[0], known)]
        if not own or len(rotary) != len(site.readers):
            out.append(site)
            continue
        if len(own) == len(rotary):
            site.indexer = True
            out.append(site)
            continue
        theirs = [n for n in rotary if not any(n is m for m in own)]
        for readers, flag in ((theirs, False), (own, True)):
            names = sorted({n.name or n.op_type for n in readers})
            out.append(replace(site, readers=readers, users=names, indexer=flag))
    return out


NOPE = ("the indexer on {who} rotates where the config gives {them} no indexer rotation (no RoPE there, or another "
        "layer's selection reused)")  # fmt: skip


def worded(record: dict[str, Any], own: bool = True) -> None:
    """An indexer site's findings said as the indexer's (``the indexer on layers 0-1: ...``), each naming its layers
    and marked ``indexer``; in place. Their names stay the findings' own (graft and the effect read them). ``own``:
    judged against the config's indexer (False: the config gives none, its attention's pairs were the judge).
    """  # noqa: D205
    pairs = "where the config's indexer pairs" if own else "where the config (which gives no indexer) pairs"
    layers = list(record.get("layers") or [])
    out = []
    for found in record["findings"]:
        if found.get("indexer"):
            out.append(found)
            continue
        if found["name"] == "nope-rotated" and "template" in found:
            found = found | layer_finding("nope-rotated", NOPE, "", found["layers"])
        elif "template" in found:
            template = "the indexer on {who}: " + found["template"]
            found = found | layer_finding(found["name"], template, found["label"], found["layers"])
        elif layers:
            text = found["text"].replace("where the config pairs", pairs)
            template = "the indexer on {who}: " + text.replace("{", "{{").replace("}", "}}")
            found = found | layer_finding(found["name"], template, "", layers)
        else:
            found = found | {"text": "the indexer: " + found["text"]}
        out.append(found | {"indexer": True})
    record["findings"] = out


def not_rotated(records: list[dict[str, Any]], indexer: Encodings | None, named: set[int]) -> list[dict[str, Any]]:
    """``not-rotated``: layers whose indexer the config rotates that no indexer site is read by; said only where every
    indexer site's readers name their layers.
    """  # noqa: D205
    own = [r for r in records if r.get("indexer")]
    if indexer is None or any(r.get("layers") is None for r in own):
        return []
    read = {i for r in own for i in r["layers"]}
    missing = sorted(i for i in named if indexer.count is not None and i < indexer.count
                     and indexer.of(i) is not None and i not in read)  # fmt: skip
    if not missing:
        return []
    found = layer_finding("not-rotated", "the indexer on {who} is not rotated but the config rotates it", "", missing)
    return [found | {"sites": [], "indexer": True}]
