"""A decoder's float64 truth fanned out: its passes split by scenario, each part a Ray task (``verify DECODER --ray``).

``verify_decoder`` runs every scenario on the runtime first, then one float64 pass judges all of their calls
(``oracle.chained_float64``: layer by layer, calls that extend one another computed once, as one run). Here that
pass is split into parts, one per scenario (a run of calls that extend one another, a chain, stays whole in the part
of the scenario it starts in, so each call is computed in the same run as in one pass), and each part is a task
(``ropeexport.fanout``). A task reads what the pass reads, itself: the checkpoint's weights (or the seeded draws) and
for int4 the projections the written model holds (its external data), from the paths the driver gives, on storage
every worker reads. Each run's logits are computed by the same float64 operations on the same values as in the one
pass (runs never mix within a layer's arithmetic), so the report is the same; ``tests/test_fanout.py`` compares it.

A mixture of experts is not fanned out: its truth follows the routing each call took, a call at a time
(``verify._routed``), in the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ropeexport.decoder.oracle import Feed, Stored64, chained, chained_float64
from ropeexport.decoder.parts import Pieces, position_pieces, weight_format
from ropeexport.decoder.spec import DecoderSpec

# (the feeds of every call, grouped by scenario; unquantized) -> per call its float64 logits over its slots
Spread = Callable[[list[list[Feed]], bool], list[np.ndarray]]


@dataclass(frozen=True)
class TruthPart:
    """One task's part of the float64 pass: the decoder (its spec and where its weights are read) and the feeds."""

    spec: DecoderSpec
    checkpoint: Path | None  # None: the seeded weights
    model: Path  # model.onnx: an int4 decoder's projections are read back from it
    feeds: list[Feed]
    unquantized: bool  # the quantization cost's recompute (the checkpoint's weights, not the int4 ones)


def plain(spec: DecoderSpec) -> DecoderSpec:
    """``spec`` without its weight format: the unquantized recompute's (``verify.verify_decoder``)."""
    return spec.replace(weight_format="", block_size=0, accuracy_level=0, symmetric=True, tied_head_int4=False,
                        tied_embedding_int4=False)  # fmt: skip


def truth_part(part: TruthPart) -> list[np.ndarray]:
    """One part's float64 logits, per feed [b, s - first, vocab] (a Ray task's body): the weights read here."""
    import onnx

    from ropeexport.decoder.checkpoint import CheckpointWeights
    from ropeexport.decoder.weights import seeded_weights

    spec = part.spec
    weights = CheckpointWeights(spec, part.checkpoint) if part.checkpoint is not None else seeded_weights(spec)
    pieces = list(position_pieces(spec))  # the spec's, for the unquantized pass too (``verify_decoder``'s)
    if part.unquantized:
        of = plain(spec)
        return chained_float64(of, Stored64(of, weights), part.feeds, pieces)
    held = None
    if weight_format(spec).quantized:  # what the model multiplies by, as the one pass reads it (``kind.run_scenarios``)
        from ropeexport.decoder.held import held_weights

        held, _ = held_weights(onnx.load(part.model, load_external_data=False), spec, part.model.parent)
    return chained_float64(spec, Stored64(spec, weights, held), part.feeds, pieces)


def parts_of(spec: DecoderSpec, groups: Sequence[Sequence[Feed]], pieces: Pieces) -> list[list[int]]:
    """The calls (flat indices) of each part: a scenario's, a chain that starts in it kept whole (module doc)."""
    flat = [feed for group in groups for feed in group]
    owner = [g for g, group in enumerate(groups) for _ in group]
    parts: list[list[int]] = [[] for _ in groups]
    for chain in chained(spec, flat, pieces):
        parts[owner[chain[0]]].extend(chain)
    return [p for p in parts if p]


def spread_on(ray: str, spec: DecoderSpec, checkpoint: Path | None, model: Path) -> Spread:
    """The float64 pass of ``verify_decoder`` as Ray tasks on the cluster at ``ray``, one per part (module doc)."""
    from ropeexport.fanout import fan_out

    def spread(groups: list[list[Feed]], unquantized: bool) -> list[np.ndarray]:
        parts = parts_of(plain(spec) if unquantized else spec, groups, list(position_pieces(spec)))
        flat = [feed for group in groups for feed in group]
        jobs = [TruthPart(spec, checkpoint, model, [flat[i] for i in part], unquantized) for part in parts]
        out: list[np.ndarray] = [np.empty(0)] * len(flat)
        for part, logits in zip(parts, fan_out(truth_part, jobs, ray), strict=True):
            for i, each in zip(part, logits, strict=True):
                out[i] = each
        return out

    return spread
