"""``report.md``: the summary of a report a reviewer reads in a pull request.

The verdict comes first, then what failed, then every section of ``report.json`` in the order a reviewer checks it:
comparisons, error by position, properties, tables, guards, runtimes, coverage and tolerances, environment, spec.

The words that describe a result (numbers, where the worst error sits, what failed) live here and are shared with
``report.html``, so both files say the same thing. They are plain text; each renderer escapes them for its format.
Every optional key may be absent or empty and every metric may be null (a runtime that raised): the renderer then
says so instead of failing.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Iterable
from typing import Any

# Keys of ``worst`` that say where the element sits, with the word a reader sees.
PLACE_WORDS = (
    ("batch", "batch"),
    ("head", "head"),
    ("position", "position"),
    ("query_position", "query"),
    ("key_position", "key"),
    ("channel", "channel"),
)
_NOT_PLACES = {"probe", "error", "actual", "expected", *(key for key, _ in PLACE_WORDS)}


# ---- words shared with report.html (plain text, not escaped) ----


def items(report: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """``report[key]`` as a list of dicts: absent, null, or entries that are not objects are left out."""
    value = report.get(key)
    if not isinstance(value, list):
        return []
    return [entry for entry in value if isinstance(entry, dict)]


def mapping(report: dict[str, Any], key: str) -> dict[str, Any]:
    """``report[key]`` as a dict; empty when absent or not an object."""
    value = report.get(key)
    return value if isinstance(value, dict) else {}


def number(value: Any, digits: int = 3) -> str:
    """A metric for a reader: ``n/a`` for null, thousands separators for counts, 3 significant digits otherwise."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.{digits}g}"
    return str(value)


def exact(value: Any) -> str:
    """An output value with the digits that tell actual from expected (9 significant: float32 and more)."""
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.9g}"
    return number(value)


def cosine(value: Any) -> str:
    """Cosine similarity; near 1 as ``1 - gap`` since six nines say nothing about an fp32 artifact."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return number(value)
    gap = 1.0 - float(value)
    if gap == 0.0:
        return "1"
    if 0.0 < gap < 1e-3:
        return f"1 - {gap:.1e}"
    return f"{value:.6f}"


def verdict(passed: Any) -> str:
    """PASS, FAIL, or info for a check that measures without judging (``passed`` null)."""
    if passed is True:
        return "PASS"
    if passed is False:
        return "FAIL"
    return "info"


def compact(value: Any) -> str:
    """A spec, coverage or environment value on one line, as JSON writes it (strings without quotes)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(", ", ": "), default=str)


def comparison_label(c: dict[str, Any]) -> str:
    """``float64 vs ort: query_out``."""
    return f"{c.get('reference', '?')} vs {c.get('runtime', '?')}: {c.get('output', '?')}"


def share(value: Any) -> str:
    """The worst error as a share of what it may be: ``0.12 of allowed``, ``3.4x allowed`` (fails), ``exact``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a" if value is None else str(value)
    if value == 0:
        return "exact"
    return f"{value:.2g} of allowed" if value <= 1 else f"{value:.3g}x allowed"


def io_rows(report: dict[str, Any]) -> list[list[str]]:
    """[kind, name, dtype, shape] for each model input and output the report records."""
    model = mapping(report, "model")
    rows = []
    for kind in ("inputs", "outputs"):
        for v in model.get(kind) or []:
            if isinstance(v, dict):
                shape = "[" + ", ".join(str(d) for d in v.get("shape") or []) + "]"
                rows.append([kind[:-1], str(v.get("name", "?")), str(v.get("dtype", "?")), shape])
    return rows


def trt_rows(report: dict[str, Any]) -> list[tuple[bool | None, list[str]]]:
    """(compatible, [version, verdict, first reason or note]) for each TensorRT version checked."""
    rows = []
    for version, result in (mapping(report, "model").get("trt_compat") or {}).items():
        if not isinstance(result, dict):
            continue
        ok = result.get("compatible")
        reasons = [r.get("reason", str(r)) if isinstance(r, dict) else str(r) for r in result.get("reasons") or []]
        notes = [str(n) for n in result.get("notes") or []]
        detail = reasons[0] + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else "") if reasons else ""
        detail = detail or "; ".join(notes)
        rows.append((ok, [str(version), "parses" if ok else "does not parse", detail]))
    return rows


def worst_location(worst: Any, max_abs: Any = None) -> str:
    """Where the worst element sits, in words; for a runtime that raised, the probe and the error.

    With ``max_abs`` 0 every element is exact and no place is "worst": the words say so instead of naming an
    arbitrary element (which would disagree with the error-by-position table).
    """
    if not isinstance(worst, dict) or not worst:
        return ""
    if max_abs == 0 and not worst.get("error"):
        return "nowhere: every element exact"
    probe = worst.get("probe")
    if worst.get("error"):
        return f"probe {probe}: {worst['error']}" if probe else str(worst["error"])
    parts = [f"probe {probe}"] if probe is not None else []
    parts += [f"{word} {worst[key]}" for key, word in PLACE_WORDS if worst.get(key) is not None]
    query, key = worst.get("query_position"), worst.get("key_position")
    if isinstance(query, int) and isinstance(key, int):
        parts.append(f"distance {query - key}")
    parts += [f"{k} {compact(v)}" for k, v in worst.items() if k not in _NOT_PLACES and v is not None]
    return ", ".join(parts)


def worst_values(worst: Any) -> str:
    """``actual 3.06041169, expected 3.06041197`` when the worst element has values."""
    if not isinstance(worst, dict) or ("actual" not in worst and "expected" not in worst):
        return ""
    return f"actual {exact(worst.get('actual'))}, expected {exact(worst.get('expected'))}"


def failing_items(report: dict[str, Any]) -> list[str]:
    """One sentence per thing that failed, most basic first: nothing ran, comparisons, tables, guards, properties."""
    out = []
    runtimes = items(report, "runtimes")
    if runtimes and not any(r.get("status") == "verified" for r in runtimes):
        skipped = "; ".join(f"{r.get('name', '?')}: {r.get('reason') or r.get('status', '?')}" for r in runtimes)
        out.append(f"No runtime verified the artifact ({skipped}).")
    # A runtime error stops every comparison of that call: one sentence per error, naming each comparison it stopped.
    raised: dict[str, list[str]] = {}
    sentences: list[tuple[str, str]] = []  # (kind, text): "raised" texts are keys of ``raised``
    for c in items(report, "comparisons"):
        if c.get("passed") is not False:
            continue
        worst = c.get("worst")
        worst = worst if isinstance(worst, dict) else {}
        if worst.get("error"):
            where = worst_location(worst)
            if where not in raised:
                raised[where] = []
                sentences.append(("raised", where))
            raised[where].append(comparison_label(c))
            continue
        sentence = (
            f"{comparison_label(c)}: {number(c.get('failures'))} of {number(c.get('elements'))} elements beyond "
            f"atol {number(c.get('atol'))} and rtol {number(c.get('rtol'))}; max abs error {number(c.get('max_abs'))}"
        )
        where = worst_location(worst)
        values = worst_values(worst)
        sentence += f" at {where}" if where else ""
        sentence += f" ({values})" if values else ""
        sentences.append(("error", sentence + "."))
    for kind, text in sentences:
        out.append(f"{', '.join(raised[text])}: the runtime raised on {text}." if kind == "raised" else text)
    for t in items(report, "tables"):
        if t.get("passed") is False:
            why = t.get("reason") or (
                f"shape {compact(t.get('shape'))} (expected {compact(t.get('expected_shape'))}), "
                f"max ulp {number(t.get('max_ulp'))}"
            )
            out.append(f"Table {t.get('name', '?')}: {why}.")
    for g in items(report, "guards"):
        if g.get("passed") is False:
            out.append(f"Guard {g.get('case', '?')} on {g.get('runtime', '?')}: {g.get('error') or 'no reason given'}.")
    for p in items(report, "properties"):
        if p.get("passed") is False:
            on = f" on {p['runtime']}" if p.get("runtime") else ""
            out.append(f"Property {p.get('name', '?')}{on}: {p.get('summary') or 'no summary given'}.")
    return out


def headline(report: dict[str, Any]) -> str:
    """What was checked, in one line: encoding, artifact, dtype, and how many of each check passed."""
    spec = mapping(report, "spec")
    encoding = report.get("encoding") or spec.get("encoding")
    artifact = report.get("artifact") or spec.get("artifact")
    parts = [f"{k} {v}" for k, v in (("encoding", encoding), ("artifact", artifact), ("dtype", spec.get("dtype")))]
    parts = [p for p, v in zip(parts, (encoding, artifact, spec.get("dtype")), strict=True) if v]
    for key, word in (("comparisons", "comparisons"), ("tables", "tables"), ("guards", "guards")):
        entries = items(report, key)
        if entries:
            passed = sum(e.get("passed") is True for e in entries)
            parts.append(f"{passed}/{len(entries)} {word} passed")
    props = items(report, "properties")
    if props:
        judged = [p for p in props if p.get("passed") is not None]
        passed = sum(p.get("passed") is True for p in judged)
        info = len(props) - len(judged)
        parts.append(f"{passed}/{len(judged)} properties passed" + (f" ({info} informational)" if info else ""))
    verified = [str(r.get("name", "?")) for r in items(report, "runtimes") if r.get("status") == "verified"]
    if verified:
        parts.append("verified on " + ", ".join(verified))
    return "; ".join(parts)


def tolerance_words(tolerance: Any) -> str:
    """``fp32: atol 1e-05, rtol 1e-05``."""
    if not isinstance(tolerance, dict):
        return compact(tolerance)
    head = f"{tolerance['dtype']}: " if tolerance.get("dtype") else ""
    return f"{head}atol {number(tolerance.get('atol'))}, rtol {number(tolerance.get('rtol'))}"


def shared_tolerance(comparisons: list[dict[str, Any]]) -> tuple[Any, Any] | None:
    """(atol, rtol) when every comparison has the same; None when they differ (per-output overrides)."""
    pairs = {(c.get("atol"), c.get("rtol")) for c in comparisons}
    return pairs.pop() if len(pairs) == 1 else None


def tolerance_sentence(tolerance: tuple[Any, Any]) -> str:
    """The rule, with the numbers, for a table that leaves out its tolerance column."""
    atol, rtol = tolerance
    return (
        f"Every comparison: atol {number(atol)}, rtol {number(rtol)}; an element fails only when its error exceeds "
        'both atol and rtol × |expected|, so it may err by max(atol, rtol × |expected|). "of allowed" is the worst '
        "element's error as a share of that allowance: at most 1 passes."
    )


def probe_words(probe: dict[str, Any]) -> str:
    """``sweep[0..2047]`` (positions 0..2047, position_ids 1x2048)."""
    low, high = probe.get("min_position"), probe.get("max_position")
    detail = [f"positions {low}..{high}"] if low is not None or high is not None else []
    for key, value in probe.items():
        if key in ("name", "min_position", "max_position"):
            continue
        if key.endswith("_shape") and isinstance(value, list):
            detail.append(f"{key[: -len('_shape')]} {'x'.join(str(d) for d in value)}")
        else:
            detail.append(f"{key} {compact(value)}")
    name = str(probe.get("name", "?"))
    return f"{name} ({', '.join(detail)})" if detail else name


def position_summary(curve: dict[str, Any]) -> tuple[str, str]:
    """(worst bin in words, its max abs error) of one per-position curve; empty words when it has no number."""
    xs, ys = curve.get("x"), curve.get("max_abs")
    if not isinstance(xs, list) or not isinstance(ys, list):
        return "", "n/a"
    pairs = [(x, y) for x, y in zip(xs, ys, strict=False) if isinstance(y, (int, float)) and not isinstance(y, bool)]
    if not pairs:
        return "", "n/a"
    x, y = max(pairs, key=lambda pair: pair[1] if math.isfinite(pair[1]) else math.inf)
    if y == 0:
        return "none: every bin exact", number(0.0)
    ties = sum(1 for _, v in pairs if v == y)
    width = curve.get("bin_width")
    if isinstance(x, int) and isinstance(width, int) and width > 1:
        where = f"{x}..{x + width - 1}"
    else:
        where = f"{x:g}" if isinstance(x, float) else str(x)
    also = f" (first of {ties} bins at this error)" if ties > 1 else ""
    return f"{curve.get('axis') or 'position'} {where}{also}", number(float(y))


# ---- Markdown ----

_MD_PUNCTUATION = re.compile(r"([\\`*\[\]|~#])")
_MD_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")  # intraword `_` never starts emphasis


def md(value: Any) -> str:
    """Text safe anywhere in Markdown, table cells included.

    Newlines become spaces (they would end a table row); ``& < >`` become entities, so ``<script>`` is shown, never
    parsed as HTML; Markdown punctuation, ``|`` included, is backslash-escaped.
    """
    text = " ".join(str(value).split())
    text = html.escape(text, quote=False)
    text = _MD_PUNCTUATION.sub(r"\\\1", text)
    return _MD_UNDERSCORE.sub(r"\\_", text)


def _table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(md(cell) for cell in row) + " |" for row in rows]
    return lines + [""]


def _mark(passed: Any) -> str:
    word = verdict(passed)
    return {"PASS": "✅ PASS", "FAIL": "❌ FAIL"}.get(word, "ℹ️ info")


def _comparisons(report: dict[str, Any]) -> list[str]:
    comparisons = items(report, "comparisons")
    if not comparisons:
        return ["## Comparisons", "", "No comparisons were recorded.", ""]
    shared = shared_tolerance(comparisons)
    header = ["reference", "runtime", "output", "max abs", "of allowed", "p99 abs", "max ulp", "cosine"]
    header += ["failures / elements"] + ([] if shared else ["atol / rtol"]) + ["worst at", "result"]
    rows = []
    for c in comparisons:
        row = [c.get("reference", "?"), c.get("runtime", "?"), c.get("output", "?")]
        row += [number(c.get("max_abs")), share(c.get("max_ratio")), number(c.get("p99_abs"))]
        row += [number(c.get("max_ulp")), cosine(c.get("cosine"))]
        row.append(f"{number(c.get('failures'))} / {number(c.get('elements'))}")
        row += [] if shared else [f"{number(c.get('atol'))} / {number(c.get('rtol'))}"]
        rows.append([*row, worst_location(c.get("worst"), c.get("max_abs")), _mark(c.get("passed"))])
    intro = [md(tolerance_sentence(shared)), ""] if shared else []
    return ["## Comparisons", "", *intro, *_table(header, rows)]


def _model(report: dict[str, Any]) -> list[str]:
    rows = io_rows(report)
    trt = trt_rows(report)
    if not rows and not trt:
        return []
    out = ["## Model", ""]
    if rows:
        out += _table(["", "name", "dtype", "shape"], rows) + [""]
    if trt:
        out += ["TensorRT ONNX parser, by version (`ropeexport check-trt`; not run on TensorRT):", ""]
        out += _table(["TensorRT", "verdict", "why"], [[r[0], ("✅ " if ok else "❌ ") + r[1], r[2]] for ok, r in trt])
    return out


def _positions(report: dict[str, Any]) -> list[str]:
    curves = items(report, "positions")
    if not curves:
        return []
    rows = []
    for curve in curves:
        where, worst = position_summary(curve)
        bins = len(curve["x"]) if isinstance(curve.get("x"), list) else 0
        rows.append(
            [
                curve.get("reference", "?"),
                curve.get("runtime", "?"),
                curve.get("output", "?"),
                f"{bins} bins of {number(curve.get('bin_width'))}",
                where,
                worst,
            ]
        )
    header = ["reference", "runtime", "output", "curve", "worst bin", "max abs"]
    return ["## Error by position", "", "The curves are plotted in report.html.", "", *_table(header, rows)]


def _properties(report: dict[str, Any]) -> list[str]:
    props = items(report, "properties")
    if not props:
        return []
    by_runtime = any(p.get("runtime") for p in props)
    rows = [
        ([p.get("runtime") or ""] if by_runtime else [])
        + [
            p.get("name", "?"),
            _mark(p.get("passed")),
            (p.get("summary") or "") + (" (curve in report.html)" if p.get("curve") else ""),
        ]
        for p in props
    ]
    header = (["runtime"] if by_runtime else []) + ["property", "result", "summary"]
    return ["## Properties", "", *_table(header, rows)]


def _tables(report: dict[str, Any]) -> list[str]:
    tables = items(report, "tables")
    if not tables:
        return []
    rows = [
        [
            t.get("name", "?"),
            t.get("dtype", ""),
            compact(t.get("shape")),
            compact(t.get("expected_shape")),
            number(t.get("max_ulp")),
            _mark(t.get("passed")),
            t.get("reason") or (f"worst row {t['worst_row']}" if t.get("worst_row") is not None else ""),
        ]
        for t in tables
    ]
    header = ["table", "dtype", "shape", "expected shape", "max ulp", "result", "note"]
    return ["## Tables", "", *_table(header, rows)]


def _guards(report: dict[str, Any]) -> list[str]:
    guards = items(report, "guards")
    if not guards:
        return []
    rows = [[g.get("runtime", "?"), g.get("case", "?"), _mark(g.get("passed")), g.get("error") or ""] for g in guards]
    return [
        "## Guards",
        "",
        "Out-of-range positions sent straight to the runtime must be refused by the graph.",
        "",
    ] + (_table(["runtime", "case", "result", "what the runtime said"], rows))


def _runtimes(report: dict[str, Any]) -> list[str]:
    runtimes = items(report, "runtimes")
    if not runtimes:
        return []
    rows = [[r.get("name", "?"), r.get("status", "?"), r.get("device") or r.get("reason") or ""] for r in runtimes]
    return ["## Runtimes", "", *_table(["runtime", "status", "device or reason skipped"], rows)]


def _coverage(report: dict[str, Any]) -> list[str]:
    coverage = mapping(report, "coverage")
    probes = items(report, "probes")
    if not coverage and not probes:
        return []
    lines = ["## Coverage and tolerances", ""]
    tolerance = coverage.get("tolerance")
    if tolerance:
        reason = tolerance.get("reason") if isinstance(tolerance, dict) else None
        lines.append(f"- **tolerance** {md(tolerance_words(tolerance))}" + (f": {md(reason)}" if reason else ""))
        lines.append("  (an element fails only when its error exceeds both atol and rtol × \\|expected\\|)")
    lines += [f"- **{md(key)}**: {md(compact(value))}" for key, value in coverage.items() if key != "tolerance"]
    lines.append("")
    if probes:
        lines += [f"<details><summary>{len(probes)} probes</summary>", ""]
        lines += [f"- {md(probe_words(p))}" for p in probes]
        lines += ["", "</details>", ""]
    return lines


def _environment(report: dict[str, Any]) -> list[str]:
    env = mapping(report, "environment")
    if not env:
        return []
    words = ", ".join(f"{md(k)} {md(v if v is not None else 'none')}" for k, v in env.items())
    return ["## Environment", "", words, ""]


def _spec(report: dict[str, Any]) -> list[str]:
    spec = mapping(report, "spec")
    files = mapping(report, "files")
    lines = ["## Spec", ""] if spec or files or report.get("spec_sha256") else []
    if spec:
        lines += [", ".join(f"{md(k)}={md(compact(v))}" for k, v in spec.items()), ""]
    if report.get("spec_sha256"):
        lines += [f"spec sha256 {md(report['spec_sha256'])}", ""]
    if files:
        lines += _table(["file", "sha256"], [[name, digest] for name, digest in files.items()])
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    """``report.md`` for a report dict (schema ``ropeexport.report/1`` or ``/2``): verdict first, failures next."""
    name = report.get("name") or mapping(report, "spec").get("name") or "unnamed artifact"
    word = "PASS" if report.get("passed") is True else "FAIL"  # a report that does not say it passed did not
    lines = [f"# {'✅' if word == 'PASS' else '❌'} {word}: {md(name)}", ""]
    summary = headline(report)
    if summary:
        lines += [md(summary), ""]
    failures = failing_items(report)
    if failures:
        lines += ["## What failed", "", *(f"- {md(f)}" for f in failures), ""]
    elif word == "FAIL":
        lines += ["## What failed", "", "- The report does not say it passed, and names no failing check.", ""]
    for section in (
        _comparisons,
        _positions,
        _properties,
        _tables,
        _guards,
        _model,
        _runtimes,
        _coverage,
        _environment,
    ):
        lines += section(report)
    lines += _spec(report)
    if report.get("schema"):
        lines += [f"Report schema {md(report['schema'])}.", ""]
    return "\n".join(lines).rstrip("\n") + "\n"
