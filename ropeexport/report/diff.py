"""Comparing two reports comparison by comparison (``ropeexport diff OLD NEW``).

A regression is any of: a comparison, table check, guard or property that passed and now fails; a comparison of
OLD missing from NEW; an error metric (max_abs, p99_abs, mean_abs, max_ulp) that grew by more than ``max_growth``
times **and** by more than the comparison's atol (the second condition keeps noise around zero from counting); a
metric that was a number and is now null (the runtime raised). The default ``max_growth`` is 2.0: an error that
doubles is a regression worth a look.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropeexport.errors import SpecError
from ropeexport.report import REPORT_SCHEMA

METRICS = ("max_abs", "p99_abs", "mean_abs", "max_ulp")
DEFAULT_MAX_GROWTH = 2.0


@dataclass
class ReportDiff:
    """Rows of metric deltas and the regressions among them."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        """True when anything got worse (module docstring)."""
        return bool(self.regressions)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly."""
        return {"regressed": self.regressed, "regressions": self.regressions, "notes": self.notes, "rows": self.rows}


def load_report(path: str | Path, which: str) -> dict[str, Any]:
    """A report.json (or an artifact folder holding one) of this schema; else SpecError naming OLD or NEW."""
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(which, f"cannot read {str(path)!r}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(which, f"{str(path)!r} is not valid JSON: {exc}") from None
    if not isinstance(report, dict) or report.get("schema") != REPORT_SCHEMA:
        got = report.get("schema") if isinstance(report, dict) else None
        raise SpecError(which, f"{str(path)!r} has schema {got!r}; this ropeexport reads {REPORT_SCHEMA!r}")
    _check_structure(report, which)
    return report


def _check_structure(report: dict[str, Any], which: str) -> None:
    """The fields diff reads, with their types; a damaged report is bad input, not a regression."""
    comparisons = report.get("comparisons")
    if not isinstance(comparisons, list):
        raise SpecError(which, "report has no comparisons list")
    for i, c in enumerate(comparisons):
        if not isinstance(c, dict):
            raise SpecError(which, f"comparisons[{i}] is not a table")
        for key in ("reference", "runtime", "output"):
            if not isinstance(c.get(key), str):
                raise SpecError(which, f"comparisons[{i}].{key} must be a string")
        if not isinstance(c.get("passed"), bool):
            raise SpecError(which, f"comparisons[{i}].passed must be true or false")
        for key in ("atol", "rtol", "elements", *METRICS):
            value = c.get(key)
            required = key in ("atol", "rtol", "elements")
            if (value is None and required) or (
                value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)))
            ):
                raise SpecError(which, f"comparisons[{i}].{key} must be a number, got {value!r}")
    for section, name in (("tables", "name"), ("guards", "case"), ("properties", "name")):
        items = report.get(section, [])
        if not isinstance(items, list) or not all(isinstance(i, dict) and name in i for i in items):
            raise SpecError(which, f"{section} must be a list of tables with a {name!r}")


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


def diff_reports(old: dict[str, Any], new: dict[str, Any], max_growth: float = DEFAULT_MAX_GROWTH) -> ReportDiff:
    """Compare NEW against OLD (module docstring for what counts as a regression)."""
    result = ReportDiff()
    if old.get("spec_sha256") != new.get("spec_sha256"):
        result.regressions.append("the two reports are of different specs (spec_sha256 differs)")
    olds = {_key(c): c for c in old["comparisons"]}
    news = {_key(c): c for c in new["comparisons"]}
    for key in sorted(set(olds) | set(news)):
        label = "/".join(key)
        if key not in news:
            result.regressions.append(f"{label}: missing from NEW")
            continue
        if key not in olds:
            result.notes.append(f"{label}: new in NEW")
            continue
        o, n = olds[key], news[key]
        if o["passed"] and not n["passed"]:
            result.regressions.append(f"{label}: passed before, fails now")
        for bound in ("atol", "rtol"):
            if n[bound] > o[bound]:
                result.regressions.append(f"{label}: {bound} loosened from {o[bound]:g} to {n[bound]:g}")
        if n["elements"] < o["elements"]:
            result.regressions.append(f"{label}: {n['elements']} elements checked, {o['elements']} before")
        for metric in METRICS:
            before, after = o.get(metric), n.get(metric)
            row = {"comparison": label, "metric": metric, "old": before, "new": after, "growth": None}
            if before is not None and after is None:
                result.regressions.append(f"{label} {metric}: {before:.3g} -> null (the runtime raised)")
            elif before is not None and after is not None:
                row["growth"] = after / before if before else (None if after else 1.0)
                if (
                    after > before * max_growth and after - before > o["atol"]
                ):  # OLD's atol: a looser NEW must not hide growth
                    factor = after / max(before, 1e-300)
                    result.regressions.append(f"{label} {metric}: {before:.3g} -> {after:.3g} (x{factor:.3g})")
            result.rows.append(row)
    old_checks, new_checks = _checks(old), _checks(new)
    for label, ok in old_checks.items():
        if ok and new_checks.get(label) is False:
            result.regressions.append(f"{label}: passed before, fails now")
        elif label not in new_checks:
            result.regressions.append(f"{label}: checked before, not checked in NEW")
    if old.get("passed") and not new.get("passed"):
        result.regressions.append("report: passed before, fails now")
    return result
