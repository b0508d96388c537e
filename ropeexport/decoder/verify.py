"""A decoder verified by generation: every call of every scenario against the float64 truth and transformers.

For each call (``generate.Call``) the logits of the slots it computed, real tokens only, are compared with (a) the
float64 no-cache recompute (``decoder.oracle``; calls that extend one another under the same tables computed once,
``oracle.chained_float64``), the truth, and (b) transformers' eager model recomputed without a
cache (``decoder.reference``), when transformers is installed. Per call: max abs error, that error over the logit
scale (max |float64 logit| of the call), the next token each one picks, whether the runtime's agrees with the truth,
the float64 top-2 margin. A call passes when its error is within ``TOLERANCE[dtype]`` x the scale and its tokens
agree with the truth, a near tie excepted (a row whose top-2 margin is at most twice the measured error: two logits
erring by that much in opposite directions close such a gap; listed, not counted).
Rows that read keys cached under another regime (the ``keep`` policy; per row, each row's regime being its own) are
reported as that regime's cost, not judged; the call's other rows are judged as usual.

A mixture of experts (gpt-oss) routes each token to its k largest router logits: where the k-th and (k + 1)-th are
closer than a runtime's error on them (a routing near tie: within the tolerance x the token's largest |router
logit|), the runtime may take the other expert, and its output jumps by that expert's weighted difference, through
every later layer and, by the cache, every later call. The truth is then the float64 recompute of the routing the
runtime took, among those the near ties allow: a call that fails against the float64 routing is judged against the
recomputes with near-tie tokens taken the other way (the flips the previous call kept with each near tie added or
dropped, and each near tie alone; the closest ties' first, ``CANDIDATES`` a pass, until one passes the call), the
nearest one computed kept. The call record lists the flips (``routing_flips``: layer, row, slot, float64
margin); a runtime wrong in any other way matches none of them and fails. A routing is computed over a run of calls
at once (the call and the later ones that extend it, ``oracle.chained``: the longest computed, each call's slots and
near ties taken from it), and a call's candidates in one pass: a real size's pass is minutes of reading weights, so a
near tie costs one pass, whatever the candidates and the calls after it (before: one pass per candidate and one per
later call). DeepSeek Sparse Attention's indexer
(``components.latent.indexer``) selects each query's top-k keys the same way: its near ties (the k-th and
(k + 1)-th scores within the tolerance x the query's largest |score|; exact ties included, which ONNX's TopK and the
twin both give to the lower key) are flips of their own, listed with the key taken in and the key left out
(``key_in``, ``key_out``; ``decoder.routing``).

A decoder with int4 weights gets two figures per call, never mixed: its positional fidelity is the comparison above
(the float64 truth reads the dequantized weights the model holds, ``linear.WeightFormat.read64``), judged by
``tolerance(spec)``; its quantization cost (``quantization_cost``) is the same call against the float64 recompute
with the checkpoint's weights unquantized (as the decoder of the same dtype without int4 holds them: for fp32, the
checkpoint's values exactly), and the next token that recompute picks: reported, never judged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ropeexport.decoder.greedy import Call, Infer, run_scenario
from ropeexport.decoder.oracle import Feed, Stored64, chained, chained_float64, decoders_float64
from ropeexport.decoder.parts import Pieces, twins
from ropeexport.decoder.routing import Flip, NearTie, Routing
from ropeexport.decoder.scenarios import Scenario, scenarios
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.decoder.truth_tasks import Spread, plain
from ropeexport.recipes import PositionPiece

# Max abs logit error over the call's logit scale. fp32: the target of the decoder work (1e-4). fp16: twenty of its
# ulps at the scale (2^-10 ~ 1e-3 relative): its rounding grows with the activations through every layer (seeded
# tiny presets measure 5e-4 to 7e-4, the tests' random checkpoints with spread weights up to 7e-3).
TOLERANCE = {"fp32": 1e-4, "fp16": 2e-2}
# A call's candidate routings computed in one pass, the closest near ties' first (``_routed``): a pass's cost is
# mostly reading the weights (a real size's: minutes), each routing's the compute of its run of calls (DeepSeek-V2-Lite
# int4, 27 layers: about 180 s a pass and 0.7 s a token-row); the next pass only while none passes the call.
CANDIDATES = 4
# A call's truth under one routing: its float64 logits over its slots [b, s - first, vocab] and the near ties within
# the tolerance among its tokens (``NearTie``)
Ahead = tuple[np.ndarray, list[NearTie]]
# (a scenario's calls from the one judged on, the routings to compute: per routing its flips) -> per routing, per call
# of the run that starts at the first (it and the calls after it that each extend the one before, ``oracle.chained``)
# its ``Ahead``: every routing one feed of one pass (``verify_decoder``)
Recompute = Callable[[Sequence[Call], Sequence[frozenset[Flip]]], list[list[Ahead]]]
# Every call of a scenario -> each call's float64 logits over its slots [first, t): the truth, all calls at once
# (layer by layer, ``decoder.oracle``).
Truths = Callable[[list[Call]], list[np.ndarray]]
# What int4 weights' MatMulNBits may compute the activations in, by accuracy level (``linear.COMPUTE``), beyond the
# dtype's own rounding: levels 0 and 1 compute in fp32 (the dtype's tolerance holds: the weights are the dequantized
# values the truth reads); 2 (fp16) and 3 (bf16) may round the activations to that format (ONNX Runtime's x86 CPU
# kernels measure the same as level 1: they have no fp16 / bf16 path; another machine may take it): fp16's bound, and
# bf16's eight times it (2^-8 against 2^-11: 8 bits of mantissa, not 11); 4 quantizes each block of activations to
# int8 (a step of max |a| / 127 per block) before the dot products: one MatMulNBits measures 4e-3 to 9e-3 of its
# output's scale against float64, a decoder up to 2.2e-2 of the logit scale (seeded tiny presets) and 1.1e-1 (the
# tests' tiny random checkpoints, their weights spread wider); the bound is twice the latter. At that level a
# positional fault below the int8 rounding is not visible: theta 1% off measures 7.5e-2 on tiny Llama (caught at
# level 0: 2.1e-2 against 1e-4), theta 10% off 4.4e-1 is caught (tests/decoder/test_quantized.py).
COMPUTED = {"fp16": 2e-2, "bf16": 1.6e-1, "int8": 2.5e-1}


def tolerance(spec: DecoderSpec) -> float:
    """The bound a call's error over the logit scale is judged by (``TOLERANCE``, ``COMPUTED``)."""
    from ropeexport.components.linear import COMPUTE

    own = TOLERANCE[spec.dtype]
    storage = spec.storage
    if storage.format != "int4" or COMPUTE[storage.accuracy_level] == "fp32":
        return own
    return max(own, COMPUTED[COMPUTE[storage.accuracy_level]])


# Slots a comparison widens and subtracts at a time: a call's logits are compared in blocks of at most this many
# float64 bytes, not whole (Gemma 4's 1048-slot window crossing is 2 GiB of float64 logits a copy, and the whole
# comparison made four such copies: the widened runtime, the difference, its absolute value and its real slots). A
# maximum is the same taken in any order, so the figures are the whole comparison's bit for bit.
COMPARE_BYTES = 64 * 2**20


def _compare(
    call: Call, runtime: np.ndarray, reference: np.ndarray, rows: np.ndarray | None = None
) -> dict[str, float]:
    """max abs and relative error of ``runtime`` (float32 as the runtime returned it, or float64) against
    ``reference`` [b, s, vocab] on the call's real slots (of ``rows`` [b] bool only, when given), a block of slots at
    a time (``COMPARE_BYTES``).
    """  # noqa: D205
    real = call.attention_mask[:, call.first :] != 0  # [b, s]
    if rows is not None:
        real = real & rows[:, None]
    step = max(1, COMPARE_BYTES // (8 * reference.shape[-1]))
    worst, scale, seen = np.float64(-np.inf), np.float64(-np.inf), False
    for b in range(real.shape[0]):
        for start in range(0, real.shape[1], step):
            kept = real[b, start : start + step]  # [<= step]
            if not kept.any():
                continue
            truth = reference[b, start : start + step][kept]  # [n, vocab]
            widened = np.asarray(runtime[b, start : start + step][kept], np.float64)
            worst = np.maximum(worst, np.abs(widened - truth).max())  # np.maximum: a NaN is kept, as whole
            scale = np.maximum(scale, np.abs(truth).max())
            seen = True
    if not seen:
        raise ValueError("a call compared on no real slot")
    top, of = float(worst), float(scale)
    return {"max_abs": top, "rel": top / of if of else top, "scale": of}


@dataclass(frozen=True)
class Cost:
    """A call's quantization cost as its record keeps it (``cost_of``): what is left of the unquantized float64
    recompute's logits once compared, so that a pass's logits need not be held beside the truth's.
    """  # noqa: D205

    compared: dict[str, float]  # ``_compare`` of the runtime against the unquantized recompute
    picks: np.ndarray  # [b]: the token the unquantized recompute picks at each row's last slot


def cost_of(call: Call, unquantized: np.ndarray) -> Cost:
    """The call's ``Cost`` against ``unquantized`` [b, s, vocab] (its slots' float64 logits, weights unquantized)."""
    rows = np.arange(unquantized.shape[0])
    return Cost(_compare(call, call.logits, unquantized), unquantized[rows, _last(call)].argmax(-1))


def _last(call: Call) -> np.ndarray:
    """[b]: the index (within the call's slots) of each row's last slot; every row's last slot is real."""
    return np.full(call.input_ids.shape[0], call.input_ids.shape[1] - call.first - 1)


def judge_call(call: Call, truth: np.ndarray, eager: np.ndarray | None, tolerance: float,
               unquantized: np.ndarray | Cost | None = None) -> dict[str, Any]:  # fmt: skip
    """The record of one call (module doc); ``truth`` / ``eager`` / ``unquantized`` (the float64 recompute with the
    weights unquantized, for a quantized decoder's cost, or its ``Cost`` already taken) [b, s, vocab] over the call's
    slots.
    """  # noqa: D205
    runtime = call.logits  # [b, s, vocab] float32 as returned: widened a block at a time (``_compare``)
    rows = np.arange(runtime.shape[0])
    last = _last(call)
    stale = call.stale_rows  # [b]: judged on the other rows (module doc)
    judged = None if call.stale or not stale.any() else ~stale
    versus = _compare(call, runtime, truth, judged)
    ordered = np.sort(truth[rows, last], axis=-1)
    margins = ordered[:, -1] - ordered[:, -2]
    ends = np.asarray(runtime[rows, last], np.float64)  # [b, vocab]: each row's last slot
    errors = np.abs(ends - truth[rows, last]).max(axis=-1)
    picks = {"runtime": ends.argmax(-1), "float64": truth[rows, last].argmax(-1)}
    record: dict[str, Any] = {
        "index": call.index,
        "kind": call.kind,
        "positions": [int(call.position_ids[:, call.first :].min()), int(call.position_ids[:, call.first :].max())],
        "L": call.length,
        "regime": call.regime,
        "stale_cache": call.stale,
        "float64": versus,
    }
    if judged is not None:  # some rows only read stale keys: their error is the regime's cost
        record["stale_rows"] = [int(r) for r in rows[stale]]
        record["regime_cost"] = _compare(call, runtime, truth, stale)
    if eager is not None:
        record["transformers"] = _compare(call, runtime, eager)
        record["transformers_vs_float64"] = _compare(call, eager, truth)
        picks["transformers"] = eager[rows, last].argmax(-1)
    if unquantized is not None:  # reported, never judged (module doc)
        cost = unquantized if isinstance(unquantized, Cost) else cost_of(call, unquantized)
        record["quantization_cost"] = dict(cost.compared)
        picks["unquantized"] = cost.picks
    counted = rows if judged is None else rows[judged]
    ties = [int(r) for r in counted if picks["runtime"][r] != picks["float64"][r] and margins[r] <= 2 * errors[r]]
    differ = [int(r) for r in counted if picks["runtime"][r] != picks["float64"][r] and int(r) not in ties]
    record["tokens"] = {k: [int(x) for x in v] for k, v in picks.items()}
    record["margin"] = float(margins.min())
    record["near_ties"] = ties
    record["diverged_rows"] = differ
    within = versus["rel"] <= tolerance
    record["passed"] = bool(call.stale or (within and not differ))
    return record


def _summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    judged = [r for r in records if not r["stale_cache"]]
    stale = [r for r in records if r["stale_cache"]]
    counted = lambda r: len(r["tokens"]["runtime"]) - len(r.get("stale_rows", ()))  # noqa: E731
    rows = sum(counted(r) for r in judged)
    agree = sum(counted(r) - len(r["diverged_rows"]) - len(r["near_ties"]) for r in judged)
    first = next((r["index"] for r in judged if r["diverged_rows"]), None)
    out = {
        "calls": len(records),
        "worst_rel": max((r["float64"]["rel"] for r in judged), default=0.0),
        "worst_abs": max((r["float64"]["max_abs"] for r in judged), default=0.0),
        "agreement": f"{agree}/{rows}",
        "first_divergence": first,
        "near_ties": [r["index"] for r in records if r["near_ties"]],
        "re_prefills": sum(r["kind"] == "re-prefill" for r in records),
        "positions": [min(r["positions"][0] for r in records), max(r["positions"][1] for r in records)],
        "regimes": sorted({r["regime"] for r in records}),
    }
    flipped = [r["index"] for r in judged if r.get("routing_flips")]
    if flipped:  # a mixture of experts' calls judged against a routing its near ties allow (module doc)
        out["routing_flips"] = flipped
    if any("transformers" in r for r in records):
        out["worst_rel_transformers"] = max((r["transformers"]["rel"] for r in judged), default=0.0)
        out["worst_rel_transformers_vs_float64"] = max(r["transformers_vs_float64"]["rel"] for r in judged or records)
    costed = [r for r in judged if "quantization_cost" in r]
    if costed:
        out["cost_rel"] = max(r["quantization_cost"]["rel"] for r in costed)
        out["cost_abs"] = max(r["quantization_cost"]["max_abs"] for r in costed)
        same = sum(int(np.sum(np.equal(r["tokens"]["runtime"], r["tokens"]["unquantized"]))) for r in costed)
        out["cost_agreement"] = f"{same}/{sum(len(r['tokens']['runtime']) for r in costed)}"
    costs = [r["float64"]["rel"] for r in stale] + [r["regime_cost"]["rel"] for r in records if "regime_cost" in r]
    if costs:
        out["regime_cost_rel"] = max(costs)
        out["regime_cost_calls"] = len(costs)
    return out


def _routed(calls: Sequence[Call], k: int, known: dict[frozenset[Flip], dict[int, Ahead]], recompute: Recompute,
            tolerance: float, kept: frozenset[Flip],
            ) -> tuple[np.ndarray, frozenset[Flip], list[dict[str, Any]]]:  # fmt: skip
    """(the truth of call k's slots, the flips it took, their records): the float64 routing with ``kept`` flipped,
    else, when that fails the call, the nearest of the routings its near ties allow (module doc). ``known``: per
    routing (its flips), per call index, its ``Ahead`` computed so far (the float64 routing's: every call's, one pass
    ahead); a routing not known at call k is computed from call k on (``Recompute``), a call's candidates
    ``CANDIDATES`` a pass, the closest ties' first, until one passes. Routings other than the float64 one and the one
    kept are dropped once the call is judged.
    """  # noqa: D205

    def learn(routings: list[frozenset[Flip]]) -> None:
        for flips, found in zip(routings, recompute(calls[k:], routings) if routings else [], strict=True):
            known.setdefault(flips, {}).update({k + i: ahead for i, ahead in enumerate(found)})

    if k not in known.get(kept, {}):
        learn([kept])
    full, ties = known[kept][k]
    # the runtime's logits as returned, widened a block at a time (``_compare``), never whole
    rel = lambda reference: _compare(calls[k], calls[k].logits, reference)["rel"]  # noqa: E731
    # a router's (layer, row, slot) or an indexer's (layer, row, slot, key in, key out): its margin
    margins: dict[Flip, float] = {tuple(int(x) for x in t[:-1]): float(t[-1]) for t in ties}
    if margins and rel(full) > tolerance:
        # each near tie's candidates (the flips kept with it added or dropped, and it alone), the closest ties' first
        order: list[frozenset[Flip]] = []
        for t in sorted(margins, key=lambda t: (margins[t], t)):
            for f in (kept - {t} if t in kept else kept | {t}, frozenset({t})):
                if f != kept and f not in order:
                    order.append(f)
        best: tuple[float, list[Flip], frozenset[Flip]] | None = None
        for start in range(0, len(order), CANDIDATES):
            batch = order[start : start + CANDIDATES]
            learn([f for f in batch if k not in known.get(f, {})])
            best = min([*([best] if best else []), *((rel(known[f][k][0]), sorted(f), f) for f in batch)],
                       key=lambda x: (x[0], x[1]))  # fmt: skip
            for f in batch:  # the candidates beaten go at once: a pass's logits held, not every pass's
                if f and f != best[2]:
                    known.pop(f, None)
            if best[0] <= tolerance:  # a routing the near ties allow that passes the call
                break
        if best is not None and best[0] < rel(full):
            full, kept = known[best[2]][k][0], best[2]
    for flips in [f for f in known if f and f != kept]:  # the candidates not taken: no later call reads them
        del known[flips]
    records = [{"layer": f[0], "row": f[1], "slot": f[2], "margin": margins.get(f),
                **({"key_in": f[3], "key_out": f[4]} if len(f) == 5 else {})} for f in sorted(kept)]  # fmt: skip
    return full, kept, records


def routed_passes(spec: DecoderSpec, weights64: Mapping[str, np.ndarray], pieces: Pieces, bound: float,
                  jobs: Sequence[tuple[Sequence[Feed], frozenset[Flip]]],
                  on_layer: Callable[[int], None] | None = None) -> list[list[Ahead]]:  # fmt: skip
    """Per job (feeds that each extend the one before, ``oracle.chained``; the flips to take), per feed its float64
    logits over its slots [b, s - first, vocab] and the near ties within ``bound`` among its tokens (a tie at slot
    j: the feeds at least j + 1 long). Each job is one feed of one pass (``oracle.decoders_float64``): its last,
    from the first slot any of them asks for; each feed's values are the run's (causal: a slot reads only the
    slots before it; ``oracle.chained_float64``).
    """  # noqa: D205
    runs = [Feed(feeds[-1].input_ids, feeds[-1].position_ids, feeds[-1].attention_mask, min(f.first for f in feeds))
            for feeds, _ in jobs]  # fmt: skip
    routings = [Routing(flips, bound, []) for _, flips in jobs]
    found = decoders_float64(spec, weights64, runs, pieces, routings, on_layer=on_layer)
    return [[(logits[:, f.first - run.first : f.input_ids.shape[1] - run.first],
              [t for t in routing.ties if int(t[2]) < f.input_ids.shape[1]]) for f in feeds]
            for (feeds, _), run, logits, routing in zip(jobs, runs, found, routings, strict=True)]  # fmt: skip


def _feed(call: Call) -> Feed:
    """The call as the float64 recompute takes it: the sequence so far, its slots from ``first``."""
    return Feed(call.input_ids, call.fed_positions, call.attention_mask, call.first)


def verify_scenario(
    spec: DecoderSpec,
    scenario: Scenario,
    calls: list[Call],
    fulls: Sequence[np.ndarray | None],
    eager: Any | None,
    costs: Sequence[np.ndarray | Cost | None],
    routed: Recompute | None = None,
    aheads: Sequence[Ahead | None] | None = None,
) -> dict[str, Any]:
    """Judge every call of one scenario (``greedy.run_scenario``'s) against its truth in ``fulls`` (a mixture of
    experts: None, each call's truth under the routing it took computed by ``routed``, module doc; ``aheads``: per
    call its float64 routing's truth and near ties already computed, or None) and, for a quantized decoder, report
    its cost against ``costs`` (None each otherwise).
    """  # noqa: D205
    if eager is not None:
        eager.fresh()
    records = []
    flips: frozenset[Flip] = frozenset()
    bound = tolerance(spec)
    # per routing (its flips), per call: its truth and near ties (``_routed``)
    known: dict[frozenset[Flip], dict[int, Ahead]] = {frozenset(): {k: a for k, a in enumerate(aheads or []) if a}}
    for k, (call, full, cost) in enumerate(zip(calls, fulls, costs, strict=True)):
        taken: list[dict[str, Any]] = []
        if routed is not None:  # a call at a time: the flips one call takes carry to the next
            full, flips, taken = _routed(calls, k, known, routed, bound, flips)
        assert full is not None
        theirs = None
        if eager is not None:
            slots = call.input_ids.shape[1] - call.first  # the head multiplies only the slots judged
            theirs = eager.logits(call.input_ids, call.fed_positions, call.attention_mask, slots)
        records.append(judge_call(call, full, theirs, bound, cost))
        if taken:
            records[-1]["routing_flips"] = taken
    return {
        "name": scenario.name,
        "about": scenario.about,
        "policy": scenario.policy,
        "batch": len(scenario.prompts),
        "passed": all(r["passed"] for r in records),
        "summary": _summary(records),
        "calls": records,
    }


def verify_decoder(
    infer: Infer,
    spec: DecoderSpec,
    weights: Mapping[str, np.ndarray],
    pieces: Pieces | PositionPiece,
    eager: Any | None = None,
    chosen: list[Scenario] | None = None,
    on_scenario: Callable[[dict[str, Any]], None] | None = None,
    stage: Callable[[str, int | None, int | None], None] | None = None,
    held: Mapping[str, np.ndarray] | None = None,
    spread: Spread | None = None,
    release: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """Every scenario (``scenarios.scenarios``, or ``chosen``) judged against the float64 truth of ``pieces``: per
    layer its position piece (``parts.position_pieces``), or one piece for every layer that has an encoding. A
    quantized decoder's calls also get their quantization cost (module doc). Every scenario runs, then one float64
    pass judges all of their calls (a quantized decoder: two; a mixture of experts: its pass under the float64
    routing, then a call recomputed alone after one that took a flip). ``stage(what, done, total)`` is told each
    scenario as it starts and each layer of the float64 passes (``every scenario: float64``, a mixture's ``every
    scenario: float64 routed``, a quantized decoder's ``every scenario: float64 unquantized``, layer i of
    num_layers). ``held``: the projections as the written model holds
    them (``Stored64``), read there instead of quantized again from ``weights``. ``spread``: the float64 passes run
    as parts elsewhere (``truth_tasks``: Ray tasks, one per scenario), a mixture of experts' aside (its flips carry
    from call to call). ``release``: called once every scenario has run, before the float64 passes (the runtime's
    session let go: nothing runs on it after).
    """  # noqa: D205
    weights64 = Stored64(spec, weights, held)  # read layer by layer, once a float64 pass (decoder.oracle)
    layers = twins(spec, pieces) if isinstance(pieces, PositionPiece) else list(pieces)

    now = [""]  # what the float64 pass computes, for the stage lines

    def truths(of: DecoderSpec, held: Stored64, label: str = "float64") -> Truths:
        def run(calls: list[Call]) -> list[np.ndarray]:
            feeds = [_feed(c) for c in calls]
            told = None if stage is None else (lambda i: stage(f"{now[0]}: {label}", i, of.num_layers))
            return chained_float64(of, held, feeds, layers, on_layer=told)

        return run

    routed: Recompute | None = None
    bound = tolerance(spec)
    if any(layer.ffn.kind == "moe" or layer.attention.index_topk for layer in spec.layers):
        # a call at a time, its routing's near ties collected and flips applied (module doc); an indexer's selection
        # too (DeepSeek Sparse Attention: a query's keys, ``routing``)

        def routed(calls: Sequence[Call], flipsets: Sequence[frozenset[Flip]]) -> list[list[Ahead]]:
            feeds = [_feed(c) for c in calls]
            run = [feeds[j] for j in chained(spec, feeds, layers)[0]]  # the first call and the calls extending it
            told = None if stage is None else (lambda i: stage(f"{now[0]}: float64 routed again", i, spec.num_layers))
            return routed_passes(spec, weights64, layers, bound, [(run, f) for f in flipsets], on_layer=told)

    def ahead(calls: list[Call]) -> list[Ahead | None]:
        """Every call under the float64 routing in one pass (``routed_passes``: each expert read once for all of
        them, the calls that extend one another computed once), its near ties within the tolerance collected: what
        ``_routed`` asks first of each call whose scenario has taken no flip before it.
        """  # noqa: D205
        feeds = [_feed(c) for c in calls]
        runs = [[feeds[j] for j in chain] for chain in chained(spec, feeds, layers)]
        told = None if stage is None else (lambda i: stage(f"{now[0]}: float64 routed", i, spec.num_layers))
        found = routed_passes(spec, weights64, layers, bound, [(run, frozenset()) for run in runs], on_layer=told)
        return [a for run in found for a in run]

    unquantized: Truths | None = None
    if spec.storage.format:
        unquantized = truths(plain(spec), Stored64(plain(spec), weights), "float64 unquantized")

    # Every scenario runs first, then one float64 pass reads each layer's weights once for all of their calls (a
    # real size's pass is minutes, most of it reading and dequantizing weights; the runtime's logits of every call
    # are held meanwhile: slots x vocab floats, small beside the weights).
    runs = chosen if chosen is not None else scenarios(spec)
    if not runs:
        return []
    ran = []
    for k, scenario in enumerate(runs):
        if stage is not None:
            stage(scenario.name, k, len(runs))
        ran.append(run_scenario(infer, spec, scenario))
    flat = [call for calls in ran for call in calls]
    if release is not None:  # the runtime's outputs are held in the calls; its weights need not be beside the truth's
        release()
    now[0] = "every scenario" if len(runs) > 1 else runs[0].name
    fulls: list[np.ndarray | None] = [None] * len(flat)
    costs: list[Cost | None] = [None] * len(flat)
    # The unquantized pass first, each call's logits kept only as its Cost, so that the truth's pass does not hold
    # them beside its own (Gemma 4's vocabulary of 262144: 2.5 GiB of float64 logits a pass for its 1261 slots)
    groups = [[_feed(c) for c in calls] for calls in ran]
    if unquantized is not None:
        passed = spread(groups, True) if spread is not None and routed is None else unquantized(flat)
        costs = [cost_of(call, logits) for call, logits in zip(flat, passed, strict=True)]
        del passed
    aheads: list[Ahead | None] = ahead(flat) if routed is not None else [None] * len(flat)
    if spread is not None and routed is None:  # the passes as parts, each computing its calls as the one pass does
        fulls = list(spread(groups, False))
    elif routed is None:
        fulls = list(truths(spec, weights64)(flat))
    out = []
    for scenario, calls in zip(runs, ran, strict=True):
        n = len(calls)
        result = verify_scenario(spec, scenario, calls, fulls[:n], eager, costs[:n], routed, aheads[:n])
        fulls, costs, aheads = fulls[n:], costs[n:], aheads[n:]
        out.append(result)
        if on_scenario is not None:
            on_scenario(result)
    return out
