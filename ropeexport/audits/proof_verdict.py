"""A graft proof's judgements, in records and words.

One model's logits on one call against the float64 recompute (``judge_call``), a model's verdict over every call
(``verdict``: proven, partial, cannot prove or not proven; a call not run is never counted as passed), the finding
that both models miss by the same amount (``outside``), and where the recompute's weights come from
(``source_words``).

A call whose float64 logits cannot show a position error (``unprovable``: not finite, or every logit of the call the
same value, 0 included: a head whose scales are 0) proves nothing: it is ``cannot_prove`` with the reason, never
passed, and a model none of whose calls fails but some cannot prove is ``cannot prove``, never ``proven``.
``prove.DecoderProof`` runs the calls; nothing here runs a model.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropeexport.decoder.held import HeldWeights
from ropeexport.report.words import error


def source_words(held: HeldWeights, tied: bool) -> str:
    """Where the recompute's weights come from, in words (module doc)."""
    parts = []
    if held.projections:
        parts.append(f"its {held.projections} int4 projections as the model holds them (MatMulNBits, dequantized)")
    if "embed" in held.tables:
        head = " and its head, tied to it" if tied else ""
        parts.append(f"its embedding{head}, as the model's 4-bit table holds it (GatherBlockQuantized, dequantized)")
    return ", ".join(["the checkpoint", *parts])


def verdict(calls: list[dict[str, Any]], label: str, budget_gib: float) -> dict[str, Any]:
    """One model's verdict over the calls (``run``'s records): ``proven`` only when every call ran and passed;
    ``partial`` when every call run passed but some were not run (a call not run is never counted as passed):
    ``proven_up_to`` the last position of the calls run, ``not_run`` how many were not, ``cache_gib`` the most cache
    one of those would take (None when none was held back for its size); else ``not proven``. ``text`` says it.
    """  # noqa: D205
    records = [(c, c["models"][label]) for c in calls]
    ran = [(c, r) for c, r in records if "passed" in r]
    held_back = [r for _, r in records if "not_run" in r]
    unproven = [(c, r) for c, r in ran if "cannot_prove" in r]
    failed = sum(not r["passed"] for _, r in ran if "cannot_prove" not in r)
    top = max((c["positions"][1] for c, _ in ran), default=None)
    sizes = [r["cache_gib"] for r in held_back if "cache_gib" in r]
    gib = max(sizes, default=None)
    if held_back:
        plural = "s" if len(held_back) > 1 else ""
        why = (f"cache would need {gib:.3g} GiB, over --proof-cache-gib {budget_gib:g}" if gib is not None
               else held_back[0]["not_run"])  # fmt: skip
        missing = f"{len(held_back)} far call{plural} not run ({why})"
    if failed or not ran:
        verdict = "not proven"
        text = f"NOT proven: {failed} of {len(ran)} calls run fail" if ran else "NOT proven: no call run"
        text += f"; {missing}" if held_back else ""
    elif unproven:
        call, record = unproven[0]
        verdict = "cannot prove"
        text = (f"CANNOT prove: on {len(unproven)} of {len(ran)} calls run (first {call['call']!r}) "
                f"{record['cannot_prove']}: a position error cannot show in them")  # fmt: skip
    elif held_back:
        verdict, text = "partial", f"proven up to position {top}; {missing}"
    else:
        verdict, text = "proven", f"proven (every call, positions up to {top})"
    return {"verdict": verdict, "text": text, "proven_up_to": top if verdict in ("proven", "partial") else None,
            "not_run": len(held_back), "cache_gib": gib}  # fmt: skip


SAME = 0.25  # two models' errors within 25% of each other on a call: the same miss


def outside(calls: list[dict[str, Any]]) -> str | None:
    """Where the grafted model fails and the original fails by the same amount on every such call (within ``SAME``),
    the graft's repair was not what the float64 decoder needed: the difference lies outside the positional encoding
    (the weights, another op, a checkpoint not the model's). The words saying so, else None.
    """  # noqa: D205
    failed = [c["models"] for c in calls
              if c["models"]["grafted"].get("passed") is False and "cannot_prove" not in c["models"]["grafted"]]
    if not failed:
        return None
    for m in failed:
        before, after = m["original"].get("rel"), m["grafted"]["rel"]
        if before is None or m["original"].get("passed") is not False:
            return None
        if abs(before - after) > SAME * max(before, after):
            return None
    worst = max(failed, key=lambda m: m["grafted"]["rel"])
    before, after = error(worst["original"]["rel"]), error(worst["grafted"]["rel"])
    return (f"the original and the grafted model miss the float64 decoder by the same amount "
            f"({before} and {after} of the logit scale on the worst call): "
            "the difference lies outside the positional encoding (the weights, another operation, or a checkpoint "
            "that is not the one the model was exported from)")  # fmt: skip


def unprovable(truth: np.ndarray) -> str | None:
    """Why float64 logits [n, vocab] cannot show a position error (module doc), or None."""
    if not np.all(np.isfinite(truth)):
        return "the float64 logits are not finite"
    if truth.size and np.all(truth == truth.flat[0]):
        return f"every float64 logit is {float(truth.flat[0]):g}"
    return None


def judge_call(got: np.ndarray, truth: np.ndarray, tolerance: float) -> dict[str, Any]:
    """One model's logits [n, vocab] on one call against float64 (module doc)."""
    why = unprovable(truth)
    if why is not None:
        return {"passed": False, "cannot_prove": why}
    worst = float(np.max(np.abs(got - truth)))
    scale = float(np.max(np.abs(truth)))
    rel = worst / scale if scale else worst
    ordered = np.sort(truth[-1])
    margin = float(ordered[-1] - ordered[-2])
    same = int(got[-1].argmax()) == int(truth[-1].argmax())
    tie = not same and margin <= float(np.max(np.abs(got[-1] - truth[-1])))
    return {"max_abs": worst, "rel": rel, "scale": scale, "last_token_same": same, "near_tie": tie,
            "passed": bool(rel <= tolerance and (same or tie))}  # fmt: skip
