"""Comparing two decoder reports scenario by scenario (``ropeexport diff OLD NEW`` on decoder report.json files).

Scenarios are matched by name. A regression is any of: a scenario (or the report) that passed and now fails; a
scenario of OLD missing from NEW; a worst error over the logit scale (``worst_rel``, against the float64 truth) that
grew by more than ``max_growth`` times **and** by more than one ulp of the dtype relative to the scale (2^-23 fp32,
2^-10 fp16: growth below that is rounding, not a regression); greedy agreement with float64 that dropped (a smaller
share of rows agree); a first divergence that appeared or came earlier; a tolerance loosened. Notes: new scenarios,
near ties that changed, a tightened tolerance, growth of the error against transformers or of a kept cache's regime
cost, a transformers comparison dropped, another runtime.

Specs: reports of different specs (a ``position`` field is named ``position.<field>``) or of different weights are
not comparable (a regression), unless the fields that differ are named in ``across`` (``weights`` for the weights).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ropeexport.errors import ArtifactError
from ropeexport.report.diff_result import ReportDiff
from ropeexport.report.words import error

# One ulp of the dtype relative to the logit scale: the least growth of worst_rel that counts.
NOISE = {"fp32": 2.0**-23, "fp16": 2.0**-10}
NUMBER = (int, float)


def is_decoder_report(report: Any) -> bool:
    """A report.json written by ``build --artifact decoder`` (or ``verify`` of its folder)."""
    return isinstance(report, dict) and report.get("artifact") == "decoder"


def _number(value: Any) -> bool:
    return isinstance(value, NUMBER) and not isinstance(value, bool)


def _agreement(text: Any) -> tuple[int, int] | None:
    """The agreement text ``a/b`` as (a, b); None when it is not that."""
    if not isinstance(text, str):
        return None
    head, slash, tail = text.partition("/")
    if not slash or not head.isdigit() or not tail.isdigit() or int(head) > int(tail):
        return None
    return int(head), int(tail)


def check_report(report: dict[str, Any], which: str) -> dict[str, Any]:
    """The fields the decoder diff reads, with their types; a damaged report is bad input (SpecError naming it)."""
    if not isinstance(report.get("spec"), dict) or not isinstance(report.get("passed"), bool):
        raise ArtifactError(which, "decoder report needs a spec table and passed true or false")
    tolerance = report.get("tolerance")
    if not isinstance(tolerance, dict) or not _number(tolerance.get("rel")):
        raise ArtifactError(which, "decoder report's tolerance.rel must be a number")
    scenarios = report.get("scenarios")
    if not isinstance(scenarios, list):
        raise ArtifactError(which, "decoder report has no scenarios list")
    seen = set()
    for i, s in enumerate(scenarios):
        if not isinstance(s, dict) or not isinstance(s.get("name"), str) or not isinstance(s.get("passed"), bool):
            raise ArtifactError(which, f"scenarios[{i}] must be a table with a name and passed true or false")
        if s["name"] in seen:
            raise ArtifactError(which, f"scenarios[{i}]: scenario {s['name']!r} is listed twice")
        seen.add(s["name"])
        summary = s.get("summary")
        if not isinstance(summary, dict):
            raise ArtifactError(which, f"scenarios[{i}].summary must be a table")
        for key in ("worst_rel", "worst_abs"):
            if not _number(summary.get(key)):
                raise ArtifactError(which, f"scenarios[{i}].summary.{key} must be a number, got {summary.get(key)!r}")
        for key in ("worst_rel_transformers", "regime_cost_rel"):
            if key in summary and not _number(summary[key]):
                raise ArtifactError(which, f"scenarios[{i}].summary.{key} must be a number, got {summary[key]!r}")
        if _agreement(summary.get("agreement")) is None:
            raise ArtifactError(which, f"scenarios[{i}].summary.agreement must read 'agreeing/rows', got "
                            f"{summary.get('agreement')!r}")  # fmt: skip
        first = summary.get("first_divergence")
        if first is not None and (not isinstance(first, int) or isinstance(first, bool)):
            raise ArtifactError(which, f"scenarios[{i}].summary.first_divergence must be a call index or null")
        if not isinstance(summary.get("near_ties"), list):
            raise ArtifactError(which, f"scenarios[{i}].summary.near_ties must be a list of call indices")
    return report


def fields(report: dict[str, Any]) -> set[str]:
    """The names ``across`` may take for a decoder report: its spec fields, ``position.<field>``, ``weights``."""
    spec = report.get("spec") or {}
    position = spec.get("position")
    if not isinstance(position, dict):
        position = {}
    return {k for k in spec if k != "position"} | {f"position.{k}" for k in position} | {"weights"}


def _flat(report: dict[str, Any]) -> dict[str, Any]:
    spec = dict(report["spec"])
    position = spec.pop("position", None)
    out = {k: v for k, v in spec.items() if k != "name"}
    if isinstance(position, dict):
        out |= {f"position.{k}": v for k, v in position.items()}
    out["weights"] = report.get("weights")
    return out


def _growth(before: float, after: float) -> float | None:
    return after / before if before else (None if after else 1.0)


def diff_decoder_reports(
    old: dict[str, Any],
    new: dict[str, Any],
    max_growth: float,
    across: Sequence[str] = (),
) -> ReportDiff:
    """Compare NEW against OLD, two decoder reports (module doc for what counts as a regression)."""
    result = ReportDiff()
    a, b = _flat(old), _flat(new)
    for key in sorted(set(a) | set(b)):
        before, after = a.get(key), b.get(key)
        if before == after:
            continue
        what = "weights" if key == "weights" else f"spec.{key}"
        if key in across:
            result.notes.append(f"{what}: {before!r} in OLD, {after!r} in NEW (compared across it on purpose)")
        else:
            result.regressions.append(f"different {'weights' if key == 'weights' else 'specs'}: {what} is {before!r} "
                                      f"in OLD, {after!r} in NEW; to compare across it on purpose, give `across` "
                                      f"{key}")  # fmt: skip
    if old.get("runtime") != new.get("runtime"):
        result.notes.append(f"runtime: {old.get('runtime')!r} in OLD, {new.get('runtime')!r} in NEW")
    was, now = old["tolerance"]["rel"], new["tolerance"]["rel"]
    if now > was and "dtype" in across and old["spec"].get("dtype") != new["spec"].get("dtype"):
        # each dtype has its own bound: a change of dtype asked for on purpose brings its bound along
        result.notes.append(f"tolerance {was:g} -> {now:g} of the logit scale, the bound of NEW's dtype")
    elif now > was:
        result.regressions.append(f"tolerance loosened from {was:g} to {now:g} of the logit scale")
    elif now < was:
        result.notes.append(f"tolerance tightened from {was:g} to {now:g} of the logit scale")
    noise = NOISE.get(str(old["spec"].get("dtype")), NOISE["fp16"])
    olds = {s["name"]: s for s in old["scenarios"]}
    news = {s["name"]: s for s in new["scenarios"]}
    for name in [*olds, *(n for n in news if n not in olds)]:
        if name not in news:
            result.regressions.append(f"{name}: missing from NEW")
            continue
        if name not in olds:
            result.notes.append(f"{name}: new in NEW")
            continue
        _scenario(result, name, olds[name], news[name], max_growth, noise, now < was)
    hf_old, hf_new = (str(r.get("references", {}).get("transformers", "")) for r in (old, new))
    if not hf_old.startswith("skipped") and hf_new.startswith("skipped"):
        result.notes.append(f"transformers: compared in OLD, not in NEW ({hf_new})")
    if old["passed"] and not new["passed"]:
        result.regressions.append("report: passed before, fails now")
    return result


def _scenario(
    result: ReportDiff,
    name: str,
    o: dict[str, Any],
    n: dict[str, Any],
    max_growth: float,
    noise: float,
    tightened: bool,
) -> None:
    """The rows, regressions and notes of one scenario present in both reports."""
    so, sn = o["summary"], n["summary"]
    grown = False
    for metric in ("worst_rel", "worst_abs", "worst_rel_transformers", "regime_cost_rel"):
        before, after = so.get(metric), sn.get(metric)
        if before is None and after is None:
            continue
        row = {"comparison": name, "metric": metric, "old": before, "new": after, "growth": None}
        if before is not None and after is not None:
            row["growth"] = _growth(before, after)
            if after > before * max_growth and after - before > (noise if metric.endswith("rel") else 0.0):
                factor = after / max(before, 1e-300)
                change = f"{name} {metric}: {error(before)} -> {error(after)} (x{factor:,.2f})"
                if metric == "worst_rel":
                    grown = True
                    result.regressions.append(change)
                elif metric != "worst_abs":  # worst_abs follows worst_rel; the others are not judged
                    result.notes.append(change)
        elif before is not None and metric == "worst_rel_transformers":
            result.notes.append(f"{name}: compared with transformers in OLD, not in NEW")
        result.rows.append(row)
    counted_o, counted_n = _agreement(so["agreement"]), _agreement(sn["agreement"])
    assert counted_o is not None and counted_n is not None, "check_report read both agreements"
    (agree_o, rows_o), (agree_n, rows_n) = counted_o, counted_n
    result.rows.append({"comparison": name, "metric": "agreement", "old": so["agreement"], "new": sn["agreement"],
                        "growth": None})  # fmt: skip
    if agree_n * max(rows_o, 1) < agree_o * max(rows_n, 1):
        result.regressions.append(f"{name}: greedy agreement with float64 {so['agreement']} -> {sn['agreement']}")
    elif rows_o != rows_n:
        result.notes.append(f"{name}: {rows_o} rows compared in OLD, {rows_n} in NEW")
    first_o, first_n = so.get("first_divergence"), sn.get("first_divergence")
    result.rows.append({"comparison": name, "metric": "first_divergence", "old": first_o, "new": first_n,
                        "growth": None})  # fmt: skip
    if first_n is not None and (first_o is None or first_n < first_o):
        where = "none before" if first_o is None else f"call {first_o} before"
        result.regressions.append(f"{name}: tokens diverge from float64 at call {first_n} ({where})")
    elif first_o is not None and (first_n is None or first_n > first_o):
        result.notes.append(f"{name}: first divergence {first_o} -> {first_n} (later or gone)")
    ties_o, ties_n = so["near_ties"], sn["near_ties"]
    result.rows.append({"comparison": name, "metric": "near_ties", "old": len(ties_o), "new": len(ties_n),
                        "growth": None})  # fmt: skip
    if sorted(ties_o) != sorted(ties_n):
        result.notes.append(
            f"{name}: near ties (listed, not counted) at calls {ties_o or 'none'} -> {ties_n or 'none'}"
        )
    if o["passed"] and not n["passed"]:
        why = " under a tightened tolerance with worst_rel not grown: the tolerance changed" if tightened else ""
        why = "" if grown else why
        result.regressions.append(f"{name}: passed before, fails now{why}")
