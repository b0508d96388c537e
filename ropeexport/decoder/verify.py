"""A decoder verified by generation: every call of every scenario against the float64 truth and transformers.

For each call (``generate.Call``) the logits of the slots it computed, real tokens only, are compared with (a) the
float64 no-cache recompute (``decoder.oracle``), the truth, and (b) transformers' eager model recomputed without a
cache (``decoder.reference``), when transformers is installed. Per call: max abs error, that error over the logit
scale (max |float64 logit| of the call), the next token each one picks, whether the runtime's agrees with the truth,
the float64 top-2 margin. A call passes when its error is within ``TOLERANCE[dtype]`` x the scale and its tokens
agree with the truth, a near tie excepted (a row whose top-2 margin is below the measured error: listed, not counted).
A call that read keys cached under another regime (the ``keep`` policy) is reported as that regime's cost, not judged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ropeexport.decoder.greedy import Call, Infer, run_scenario
from ropeexport.decoder.oracle import Feed, Stored64, decoders_float64
from ropeexport.decoder.parts import Pieces, twins
from ropeexport.decoder.scenarios import Scenario, scenarios
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.kinds import PositionPiece

# Max abs logit error over the call's logit scale. fp32: the target of the decoder work (1e-4). fp16: twenty of its
# ulps at the scale (2^-10 ~ 1e-3 relative): its rounding grows with the activations through every layer (seeded
# tiny presets measure 5e-4 to 7e-4, the tests' random checkpoints with spread weights up to 7e-3).
TOLERANCE = {"fp32": 1e-4, "fp16": 2e-2}
# Every call of a scenario -> each call's float64 logits over its slots [first, t): the truth, all calls at once.
Recompute = Callable[[list[Call]], list[np.ndarray]]


def _compare(call: Call, runtime: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """max abs and relative error of ``runtime`` against ``reference`` on the call's real slots."""
    real = call.attention_mask[:, call.first :] != 0  # [b, s]
    diff = np.abs(runtime - reference)[real]
    scale = float(np.abs(reference[real]).max())
    worst = float(diff.max())
    return {"max_abs": worst, "rel": worst / scale if scale else worst, "scale": scale}


def _last(call: Call) -> np.ndarray:
    """[b]: the index (within the call's slots) of each row's last slot; every row's last slot is real."""
    return np.full(call.input_ids.shape[0], call.input_ids.shape[1] - call.first - 1)


def judge_call(call: Call, truth: np.ndarray, eager: np.ndarray | None, tolerance: float) -> dict[str, Any]:
    """The record of one call (module doc); ``truth`` / ``eager`` [b, s, vocab] over the call's slots."""
    runtime = np.asarray(call.logits, np.float64)
    rows = np.arange(runtime.shape[0])
    last = _last(call)
    versus = _compare(call, runtime, truth)
    ordered = np.sort(truth[rows, last], axis=-1)
    margins = ordered[:, -1] - ordered[:, -2]
    errors = np.abs(runtime[rows, last] - truth[rows, last]).max(axis=-1)
    picks = {"runtime": runtime[rows, last].argmax(-1), "float64": truth[rows, last].argmax(-1)}
    record: dict[str, Any] = {
        "index": call.index,
        "kind": call.kind,
        "positions": [int(call.position_ids[:, call.first :].min()), int(call.position_ids[:, call.first :].max())],
        "L": call.length,
        "regime": call.regime,
        "stale_cache": call.stale,
        "float64": versus,
    }
    if eager is not None:
        record["transformers"] = _compare(call, runtime, eager)
        record["transformers_vs_float64"] = _compare(call, eager, truth)
        picks["transformers"] = eager[rows, last].argmax(-1)
    ties = [int(r) for r in rows if picks["runtime"][r] != picks["float64"][r] and margins[r] <= errors[r]]
    differ = [int(r) for r in rows if picks["runtime"][r] != picks["float64"][r] and int(r) not in ties]
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
    rows = sum(len(r["tokens"]["runtime"]) for r in judged)
    agree = sum(len(r["tokens"]["runtime"]) - len(r["diverged_rows"]) - len(r["near_ties"]) for r in judged)
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
    if any("transformers" in r for r in records):
        out["worst_rel_transformers"] = max((r["transformers"]["rel"] for r in judged), default=0.0)
        out["worst_rel_transformers_vs_float64"] = max(r["transformers_vs_float64"]["rel"] for r in judged or records)
    if stale:
        out["regime_cost_rel"] = max(r["float64"]["rel"] for r in stale)
        out["regime_cost_calls"] = len(stale)
    return out


def verify_scenario(
    infer: Infer,
    spec: DecoderSpec,
    scenario: Scenario,
    truth: Recompute,
    eager: Any | None,
) -> dict[str, Any]:
    """Run one scenario and judge every call."""
    calls = run_scenario(infer, spec, scenario)
    if eager is not None:
        eager.fresh()
    records = []
    for call, full in zip(calls, truth(calls), strict=True):
        theirs = None
        if eager is not None:
            slots = call.input_ids.shape[1] - call.first  # the head multiplies only the slots judged
            theirs = eager.logits(call.input_ids, call.position_ids, call.attention_mask, slots)
        records.append(judge_call(call, full, theirs, TOLERANCE[spec.dtype]))
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
) -> list[dict[str, Any]]:
    """Every scenario (``scenarios.scenarios``, or ``chosen``) judged against the float64 truth of ``pieces``: per
    layer its position piece (``parts.position_pieces``), or one piece for every layer that has an encoding.
    """  # noqa: D205
    weights64 = Stored64(spec, weights)  # read layer by layer, once per scenario (decoder.oracle)
    layers = twins(spec, pieces) if isinstance(pieces, PositionPiece) else list(pieces)

    def truth(calls: list[Call]) -> list[np.ndarray]:
        feeds = [Feed(c.input_ids, c.position_ids, c.attention_mask, c.first) for c in calls]
        return decoders_float64(spec, weights64, feeds, layers)

    out = []
    for scenario in chosen if chosen is not None else scenarios(spec):
        result = verify_scenario(infer, spec, scenario, truth, eager)
        out.append(result)
        if on_scenario is not None:
            on_scenario(result)
    return out
