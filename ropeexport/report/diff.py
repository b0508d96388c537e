"""Comparing two reports comparison by comparison (``ropeexport diff OLD NEW``).

A regression is any of: a comparison, table check, guard or property that passed and now fails; a comparison of
OLD missing from NEW; an error metric (max_abs, p99_abs, mean_abs, max_ulp) that grew by more than ``max_growth``
times **and** by more than the comparison's atol (the second condition keeps noise around zero from counting); a
metric that was a number and is now null (the runtime raised). The default ``max_growth`` is 2.0: an error that
doubles is a regression worth a look.

Tolerances: a comparison whose atol or rtol changed says so (a loosened one is a regression: it can hide growth; a
tightened one is a note), and a pass that became a fail under a tightened tolerance with no metric grown says that
the tolerance, not the artifact, changed.

Specs: two reports of different specs are not comparable (a regression), unless the fields that differ are named in
``across`` on purpose: ``across=("graph",)`` compares a fused artifact with a decomposed one of the same model (the
names differ with them and are never compared). Comparisons are matched by reference, runtime and output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ropeexport.errors import ArtifactError
from ropeexport.report import REPORT_SCHEMA
from ropeexport.report.diff_result import ReportDiff
from ropeexport.report.words import error

METRICS = ("max_abs", "p99_abs", "mean_abs", "max_ulp")
DEFAULT_MAX_GROWTH = 2.0


def check_report(report: dict[str, Any], which: str) -> dict[str, Any]:
    """An artifact's report of this schema with the fields diff reads; else ArtifactError naming OLD or NEW."""
    if report.get("schema") != REPORT_SCHEMA:
        raise ArtifactError(which, f"has schema {report.get('schema')!r}; this ropeexport reads {REPORT_SCHEMA!r}")
    _check_structure(report, which)
    return report


def _check_structure(report: dict[str, Any], which: str) -> None:
    """The fields diff reads, with their types; a damaged report is bad input, not a regression."""
    comparisons = report.get("comparisons")
    if not isinstance(comparisons, list):
        raise ArtifactError(which, "report has no comparisons list")
    for i, c in enumerate(comparisons):
        if not isinstance(c, dict):
            raise ArtifactError(which, f"comparisons[{i}] is not a table")
        for key in ("reference", "runtime", "output"):
            if not isinstance(c.get(key), str):
                raise ArtifactError(which, f"comparisons[{i}].{key} must be a string")
        if not isinstance(c.get("passed"), bool):
            raise ArtifactError(which, f"comparisons[{i}].passed must be true or false")
        for key in ("atol", "rtol", "elements", *METRICS):
            value = c.get(key)
            required = key in ("atol", "rtol", "elements")
            if (value is None and required) or (
                value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)))
            ):
                raise ArtifactError(which, f"comparisons[{i}].{key} must be a number, got {value!r}")
    for section, name in (("tables", "name"), ("guards", "case"), ("properties", "name")):
        items = report.get(section, [])
        if not isinstance(items, list) or not all(isinstance(i, dict) and name in i for i in items):
            raise ArtifactError(which, f"{section} must be a list of tables with a {name!r}")


def _key(c: dict[str, Any]) -> tuple[str, str, str]:
    return c["reference"], c["runtime"], c["output"]


def _checks(report: dict[str, Any]) -> dict[str, bool]:
    out = {}
    for section, singular, name in (
        ("tables", "table", "name"),
        ("guards", "guard", "case"),
        ("properties", "property", "name"),
    ):
        for item in report.get(section, []):
            if item.get("passed") is not None:
                label = f"{singular} {item[name]}" + (f" ({item['runtime']})" if "runtime" in item else "")
                out[label] = bool(item["passed"])
    return out


def _spec_changes(old: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """{field: (OLD's value, NEW's)} for every spec field that differs, the folder name aside."""
    a, b = old.get("spec"), new.get("spec")
    if not isinstance(a, dict) or not isinstance(b, dict):
        return {} if old.get("spec_sha256") == new.get("spec_sha256") else {"spec": ("?", "?")}
    changes = {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if k != "name" and a.get(k) != b.get(k)}
    if not changes and a.get("name") == b.get("name") and old.get("spec_sha256") != new.get("spec_sha256"):
        changes["spec_sha256"] = (old.get("spec_sha256"), new.get("spec_sha256"))  # equal specs, other hashes
    return changes


def diff_reports(
    old: dict[str, Any],
    new: dict[str, Any],
    max_growth: float = DEFAULT_MAX_GROWTH,
    across: Sequence[str] = (),
) -> ReportDiff:
    """Compare NEW against OLD (module docstring for what counts as a regression and for ``across``)."""
    result = ReportDiff()
    changes = _spec_changes(old, new)
    for key, (before, after) in changes.items():
        if key in across:
            result.notes.append(f"spec.{key}: {before!r} in OLD, {after!r} in NEW (compared across it on purpose)")
        else:
            hint = "" if key in ("spec", "spec_sha256") else f"; to compare across it on purpose, give `across` {key}"
            result.regressions.append(f"different specs: spec.{key} is {before!r} in OLD, {after!r} in NEW{hint}")
    tightened: list[str] = []
    olds = {_key(c): c for c in old["comparisons"]}
    news = {_key(c): c for c in new["comparisons"]}
    for compared in sorted(set(olds) | set(news)):
        label = "/".join(compared)
        if compared not in news:
            result.regressions.append(f"{label}: missing from NEW")
            continue
        if compared not in olds:
            result.notes.append(f"{label}: new in NEW")
            continue
        o, n = olds[compared], news[compared]
        changed = [f"{b} {o[b]:g} -> {n[b]:g}" for b in ("atol", "rtol") if n[b] != o[b]]
        for bound in ("atol", "rtol"):
            if n[bound] > o[bound]:
                result.regressions.append(f"{label}: {bound} loosened from {o[bound]:g} to {n[bound]:g}")
            elif n[bound] < o[bound]:
                result.notes.append(f"{label}: {bound} tightened from {o[bound]:g} to {n[bound]:g}")
        if changed:
            tightened.append(label)
        if o["passed"] and not n["passed"]:
            grown = any(o.get(m) is not None and (n.get(m) is None or n[m] > o[m] * max_growth) for m in METRICS)
            why = (
                f" under a changed tolerance ({', '.join(changed)}) with no metric grown: the tolerance changed, "
                "not the artifact"
                if changed and not grown
                else ""
            )
            result.regressions.append(f"{label}: passed before, fails now{why}")
        if n["elements"] < o["elements"]:
            result.regressions.append(f"{label}: {n['elements']} elements checked, {o['elements']} before")
        for metric in METRICS:
            before, after = o.get(metric), n.get(metric)
            row = {"comparison": label, "metric": metric, "old": before, "new": after, "growth": None}
            if before is not None and after is None:
                result.regressions.append(f"{label} {metric}: {error(before)} -> null (the runtime raised)")
            elif before is not None and after is not None:
                row["growth"] = after / before if before else (None if after else 1.0)
                if (
                    after > before * max_growth and after - before > o["atol"]
                ):  # OLD's atol: a looser NEW must not hide growth
                    factor = after / max(before, 1e-300)
                    result.regressions.append(f"{label} {metric}: {error(before)} -> {error(after)} (x{factor:,.2f})")
            result.rows.append(row)
    old_checks, new_checks = _checks(old), _checks(new)
    for label, ok in old_checks.items():
        if ok and new_checks.get(label) is False:
            result.regressions.append(f"{label}: passed before, fails now")
        elif label not in new_checks:
            result.regressions.append(f"{label}: checked before, not checked in NEW")
    if old.get("passed") and not new.get("passed"):
        why = f" (tolerances changed for {len(tightened)} comparison(s): see the notes)" if tightened else ""
        result.regressions.append(f"report: passed before, fails now{why}")
    return result
