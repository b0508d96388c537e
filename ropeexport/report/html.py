"""``report.html``: one self-contained file with the report's sections and its plots.

Nothing is fetched: the style sheet is inline, there is no script, and the plots (``plots.py``) are PNG data URIs.
Every string that comes from the report (names, spec values, error messages, reasons) goes through ``html.escape``:
a runtime's error message or a user's ``--name`` may hold markup. The sections and their words are those of
``report.md`` (``markdown.py``); failing rows are highlighted.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Iterable
from html import escape
from typing import Any

from ropeexport.report import plots
from ropeexport.report.markdown import (
    compact,
    comparison_label,
    cosine,
    failing_items,
    headline,
    io_rows,
    items,
    mapping,
    number,
    position_summary,
    probe_words,
    share,
    shared_tolerance,
    tolerance_sentence,
    tolerance_words,
    trt_rows,
    verdict,
    worst_location,
    worst_values,
)

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; color: #1f2328;
       max-width: 1200px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 22px; margin: 0; }
h2 { font-size: 18px; border-bottom: 1px solid #d0d7de; padding-bottom: 4px; margin-top: 28px; }
.banner { color: #fff; padding: 14px 18px; border-radius: 6px; }
.banner.pass { background: #1a7f37; }
.banner.fail { background: #cf222e; }
.banner p { margin: 4px 0 0; opacity: 0.95; }
.failures { border: 2px solid #cf222e; background: #ffebe9; border-radius: 6px; padding: 4px 16px; margin-top: 16px; }
.failures h2 { border: 0; margin-top: 8px; color: #a40e26; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
td.where { min-width: 15em; }
td.name, td.where { overflow-wrap: break-word; }
table.pairs th.key { background: #f6f8fa; font-weight: 600; }
tr.fail td { background: #ffebe9; }
tr.skip td { background: #fff8c5; }
.badge { display: inline-block; padding: 0 7px; border-radius: 10px; font-size: 12px; font-weight: 600;
         white-space: nowrap; }
.badge.pass { background: #dafbe1; color: #1a7f37; }
.badge.fail { background: #cf222e; color: #fff; }
.badge.info { background: #ddf4ff; color: #0969da; }
.small { color: #57606a; font-size: 12px; }
.wrap { word-break: break-all; }
figure { margin: 8px 0 16px; }
figcaption { color: #57606a; font-size: 12px; }
img { max-width: 100%; height: auto; border: 1px solid #d0d7de; }
.grid { display: flex; flex-wrap: wrap; gap: 8px 16px; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; }
"""


class _Safe(str):
    """Markup built here from escaped parts: table cells take it as it is."""


class _Td(_Safe):
    """A whole table cell, ``<td class=...>`` included."""


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _td(value: Any, css: str) -> _Td:
    """A cell with a class; ``value`` is escaped unless it is ``_Safe``."""
    return _Td(f'<td class="{css}">{value if isinstance(value, _Safe) else _e(value)}</td>')


def _num(value: Any) -> _Td:
    return _td(value, "num")


def _badge(passed: Any) -> _Safe:
    word = verdict(passed)
    return _Safe(f'<span class="badge {word.lower()}">{word}</span>')


def _table(header: Iterable[str], rows: Iterable[tuple[str, list[Any]]]) -> str:
    """A table; each row is (css class, cells); a cell is text (escaped here), ``_Safe`` markup or a ``_Td``."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for css, cells in rows:
        tds = "".join(
            cell if isinstance(cell, _Td) else f"<td>{cell if isinstance(cell, _Safe) else _e(cell)}</td>"
            for cell in cells
        )
        body.append((f'<tr class="{css}">' if css else "<tr>") + tds + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _row_class(passed: Any) -> str:
    return "fail" if passed is False else ""


def _png_size(png: bytes) -> tuple[int, int]:
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk follows the 8-byte signature
    return width, height


def _safe_plot(make: Any, *args: Any) -> bytes:
    """``make(*args)``'s PNG, or empty bytes when matplotlib cannot draw the values (the figure is then left out)."""
    try:
        return make(*args)
    except Exception:  # noqa: BLE001 - a plot must never cost the report
        return b""


def _figure(png: bytes, alt: str, caption: str = "") -> str:
    if not png:
        return f'<p class="note">Plot left out: {_e(alt)} could not be drawn from these values.</p>'
    width, height = _png_size(png)
    data = base64.b64encode(png).decode("ascii")
    img = f'<img alt="{_e(alt)}" width="{width}" height="{height}" src="data:image/png;base64,{data}">'
    return f"<figure>{img}" + (f"<figcaption>{_e(caption)}</figcaption>" if caption else "") + "</figure>"


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{_e(title)}</h2>{body}</section>'


def _banner(report: dict[str, Any], name: str) -> str:
    passed = report.get("passed") is True
    word = "PASS" if passed else "FAIL"
    summary = headline(report)
    return (
        f'<header class="banner {word.lower()}"><h1>{word}: {_e(name)}</h1>'
        + (f"<p>{_e(summary)}</p>" if summary else "")
        + "</header>"
    )


def _failures(report: dict[str, Any]) -> str:
    failures = failing_items(report)
    if not failures and report.get("passed") is not True:
        failures = ["The report does not say it passed, and names no failing check."]
    if not failures:
        return ""
    bullets = "".join(f"<li>{_e(f)}</li>" for f in failures)
    return f'<section class="failures" id="failures"><h2>What failed</h2><ul>{bullets}</ul></section>'


def _comparisons(report: dict[str, Any]) -> str:
    comparisons = items(report, "comparisons")
    if not comparisons:
        return _section("comparisons", "Comparisons", "<p>No comparisons were recorded.</p>")
    shared = shared_tolerance(comparisons)
    metrics = ("max_abs", "mean_abs", "p99_abs", "max_rel", "p99_rel", "max_ulp")
    header = [
        "reference",
        "runtime",
        "output",
        "max abs",
        "of allowed",
        *(m.replace("_", " ") for m in metrics[1:]),
        "cosine",
        "failures / elements",
    ]
    header += ([] if shared else ["atol / rtol"]) + ["worst at", "result"]
    rows = []
    for c in comparisons:
        worst = c.get("worst")
        where = _e(worst_location(worst, c.get("max_abs")))
        values = worst_values(worst) if c.get("max_abs") != 0 else ""
        where += f'<br><span class="small">{_e(values)}</span>' if values else ""
        cells: list[Any] = [c.get("reference", "?"), c.get("runtime", "?"), _td(c.get("output", "?"), "name")]
        cells += [_num(number(c.get("max_abs"))), _num(share(c.get("max_ratio")))]
        cells += [_num(number(c.get(m))) for m in metrics[1:]]
        cells += [_num(cosine(c.get("cosine"))), _num(f"{number(c.get('failures'))} / {number(c.get('elements'))}")]
        cells += [] if shared else [_num(f"{number(c.get('atol'))} / {number(c.get('rtol'))}")]
        cells += [_td(_Safe(where), "where"), _badge(c.get("passed"))]
        rows.append((_row_class(c.get("passed")), cells))
    intro = f"<p>{_e(tolerance_sentence(shared))}</p>" if shared else ""
    return _section("comparisons", "Comparisons", intro + _table(header, rows))


def _atol_of(report: dict[str, Any], curve: dict[str, Any]) -> list[float]:
    """The atol of the comparison a curve belongs to; else the report's tolerance."""
    key = (curve.get("reference"), curve.get("runtime"), curve.get("output"))
    for c in items(report, "comparisons"):
        if (c.get("reference"), c.get("runtime"), c.get("output")) == key and c.get("atol") is not None:
            return plots.floats([c["atol"]])
    tolerance = mapping(report, "coverage").get("tolerance")
    return plots.floats([tolerance.get("atol")]) if isinstance(tolerance, dict) else []


def _positions(report: dict[str, Any]) -> str:
    curves = items(report, "positions")
    if not curves:
        return ""
    by_axis: dict[str, list[dict[str, Any]]] = {}
    for curve in curves:
        by_axis.setdefault(str(curve.get("axis") or "position"), []).append(curve)
    body = []
    for axis, group in by_axis.items():
        widths = sorted({str(c.get("bin_width")) for c in group if c.get("bin_width") is not None})
        label = axis + (f" (bins of {', '.join(widths)})" if widths and widths != ["1"] else "")
        lines = [plots.Line(comparison_label(c), c.get("x") or [], c.get("max_abs") or []) for c in group]
        atols = sorted({a for c in group for a in _atol_of(report, c)})
        png = _safe_plot(plots.error_by_position, lines, label, atols)
        body.append(
            _figure(
                png,
                f"worst absolute error against {axis}",
                "Each line is one comparison's worst absolute error in each bin; the dotted line is atol. An element "
                "may err by max(atol, rtol × |expected|), so a line above atol can still pass where values are "
                "large: the next plot divides each error by its own allowance.",
            )
        )
        ratios = [plots.Line(comparison_label(c), c.get("x") or [], c.get("max_ratio") or []) for c in group]
        if any(c.get("max_ratio") for c in group):
            png = _safe_plot(plots.share_by_position, ratios, label)
            body.append(
                _figure(
                    png,
                    f"worst error as a share of its allowance against {axis}",
                    "Each bin's worst error divided by what that element may err by, max(atol, rtol × |expected|): "
                    "the tolerance envelope is the dashed line at 1, and a point above it is a failing element.",
                )
            )
    rows = []
    for curve in curves:
        where, worst = position_summary(curve)
        bins = len(curve["x"]) if isinstance(curve.get("x"), list) else 0
        ratios = [r for r in plots.floats(curve.get("max_ratio")) if math.isfinite(r)]
        cells = [comparison_label(curve), f"{bins} bins of {number(curve.get('bin_width'))}", where, _num(worst)]
        cells.append(_num(share(max(ratios)) if ratios else "n/a"))
        rows.append(("", cells))
    body.append(_table(["comparison", "curve", "worst bin", "max abs", "of allowed"], rows))
    return _section("positions", "Error by position", "".join(body))


def _histograms(report: dict[str, Any]) -> str:
    figures = []
    for c in items(report, "comparisons"):
        histogram = c.get("histogram")
        if not isinstance(histogram, dict):
            continue
        png = _safe_plot(
            plots.error_histogram,
            comparison_label(c),
            histogram.get("edges_log10") or [],
            histogram.get("counts") or [],
            histogram.get("zeros"),
            c.get("atol"),
        )
        figures.append(_figure(png, f"error histogram, {comparison_label(c)}"))
    if not figures:
        return ""
    caption = (
        '<p class="small">Elements by absolute error; exact zeros in grey on the left. The dotted line is atol: '
        "elements right of it still pass where rtol × |expected| allows them (the share-of-allowance plot above says "
        "where).</p>"
    )
    return _section("histograms", "Error histograms", f'{caption}<div class="grid">{"".join(figures)}</div>')


def _has_points(curve: dict[str, Any]) -> bool:
    xs, ys = plots.floats(curve.get("x")), plots.floats(curve.get("y"))
    return any(math.isfinite(a) and math.isfinite(b) for a, b in zip(xs, ys, strict=False))


def _properties(report: dict[str, Any]) -> str:
    props = items(report, "properties")
    if not props:
        return ""
    by_runtime = any(p.get("runtime") for p in props)
    rows = []
    for p in props:
        cells = [p.get("name", "?"), _badge(p.get("passed")), p.get("summary") or ""]
        rows.append((_row_class(p.get("passed")), ([p.get("runtime") or ""] if by_runtime else []) + cells))
    header = (["runtime"] if by_runtime else []) + ["property", "result", "summary"]
    figures = []
    for p in props:
        curve = p.get("curve")
        if not isinstance(curve, dict):
            continue
        name = str(p.get("name") or "curve") + (f" ({p['runtime']})" if p.get("runtime") else "")
        if not _has_points(curve):
            figures.append(f'<p class="small">{_e(name)}: the curve has no finite points to plot.</p>')
            continue
        x_label, y_label = str(curve.get("x_label") or "x"), str(curve.get("y_label") or "y")
        png = _safe_plot(plots.curve, name, x_label, y_label, curve.get("x") or [], curve.get("y") or [])
        figures.append(_figure(png, name))
    body = _table(header, rows) + (f'<div class="grid">{"".join(figures)}</div>' if figures else "")
    return _section("properties", "Properties", body)


def _tables(report: dict[str, Any]) -> str:
    tables = items(report, "tables")
    if not tables:
        return ""
    rows = []
    for t in tables:
        note = t.get("reason") or (f"worst row {t['worst_row']}" if t.get("worst_row") is not None else "")
        cells = [
            t.get("name", "?"),
            t.get("dtype", ""),
            compact(t.get("shape")),
            compact(t.get("expected_shape")),
            _num(number(t.get("max_ulp"))),
            _badge(t.get("passed")),
            note,
        ]
        rows.append((_row_class(t.get("passed")), cells))
    header = ["table", "dtype", "shape", "expected shape", "max ulp", "result", "note"]
    return _section("tables", "Tables", _table(header, rows))


def _guards(report: dict[str, Any]) -> str:
    guards = items(report, "guards")
    if not guards:
        return ""
    rows = [
        (
            _row_class(g.get("passed")),
            [
                g.get("runtime", "?"),
                g.get("case", "?"),
                _badge(g.get("passed")),
                _Safe(f'<span class="small">{_e(g.get("error") or "")}</span>'),
            ],
        )
        for g in guards
    ]
    intro = "<p>Out-of-range positions sent straight to the runtime must be refused by the graph.</p>"
    return _section("guards", "Guards", intro + _table(["runtime", "case", "result", "what the runtime said"], rows))


def _model(report: dict[str, Any]) -> str:
    rows = [("", r) for r in io_rows(report)]
    trt = trt_rows(report)
    if not rows and not trt:
        return ""
    body = _table(["", "name", "dtype", "shape"], rows) if rows else ""
    if trt:
        body += "<p>TensorRT ONNX parser, by version (<code>ropeexport check-trt</code>; not run on TensorRT):</p>"
        body += _table(["TensorRT", "verdict", "why"], [(_row_class(ok), [r[0], r[1], r[2]]) for ok, r in trt])
    return _section("model", "Model: inputs, outputs, TensorRT", body)


def _runtimes(report: dict[str, Any]) -> str:
    runtimes = items(report, "runtimes")
    if not runtimes:
        return ""
    rows = [
        (
            "skip" if r.get("status") != "verified" else "",
            [r.get("name", "?"), r.get("status", "?"), r.get("device") or r.get("reason") or ""],
        )
        for r in runtimes
    ]
    return _section("runtimes", "Runtimes", _table(["runtime", "status", "device or reason skipped"], rows))


def _coverage(report: dict[str, Any]) -> str:
    coverage = mapping(report, "coverage")
    probes = items(report, "probes")
    if not coverage and not probes:
        return ""
    rows = []
    tolerance = coverage.get("tolerance")
    if tolerance:
        reason = tolerance.get("reason") if isinstance(tolerance, dict) else None
        text = _e(tolerance_words(tolerance)) + (f'<br><span class="small">{_e(reason)}</span>' if reason else "")
        rule = "An element fails only when its error exceeds both atol and rtol × |expected|."
        text += f'<br><span class="small">{rule}</span>'
        rows.append(("", ["tolerance", _Safe(text)]))
    rows += [("", [key, compact(value)]) for key, value in coverage.items() if key != "tolerance"]
    body = _table(["what", "coverage"], rows) if rows else ""
    if probes:
        bullets = "".join(f"<li>{_e(probe_words(p))}</li>" for p in probes)
        body += f"<details><summary>{len(probes)} probes</summary><ul>{bullets}</ul></details>"
    return _section("coverage", "Coverage and tolerances", body)


def _pairs(values: dict[str, Any], per_row: int = 3) -> str:
    """Key-value pairs, ``per_row`` to a row: short values read better across than down."""
    cells = [("none" if v is None else compact(v), k) for k, v in values.items()]
    rows = []
    for start in range(0, len(cells), per_row):
        chunk = cells[start : start + per_row]
        tds = "".join(f'<th class="key">{_e(k)}</th><td>{_e(v)}</td>' for v, k in chunk)
        rows.append(f"<tr>{tds}</tr>")
    return f'<table class="pairs"><tbody>{"".join(rows)}</tbody></table>'


def _environment(report: dict[str, Any]) -> str:
    env = mapping(report, "environment")
    return _section("environment", "Environment", _pairs(env)) if env else ""


def _spec(report: dict[str, Any]) -> str:
    spec = mapping(report, "spec")
    files = mapping(report, "files")
    body = _pairs(spec) if spec else ""
    if report.get("spec_sha256"):
        body += f'<p>spec sha256 <span class="mono">{_e(report["spec_sha256"])}</span></p>'
    if files:
        rows = [("", [name, _Safe(f'<span class="mono">{_e(digest)}</span>')]) for name, digest in files.items()]
        body += _table(["file", "sha256"], rows)
    if report.get("schema"):
        body += f'<p class="small">Report schema {_e(report["schema"])}.</p>'
    return _section("spec", "Spec and files", body) if body else ""


def render_html(report: dict[str, Any]) -> str:
    """``report.html`` for a report dict (schema ``ropeexport.report/1`` or ``/2``): banner, failures, sections."""
    name = str(report.get("name") or mapping(report, "spec").get("name") or "unnamed artifact")
    word = "PASS" if report.get("passed") is True else "FAIL"
    sections = [
        _banner(report, name),
        _failures(report),
        _comparisons(report),
        _positions(report),
        _histograms(report),
        _properties(report),
        _tables(report),
        _guards(report),
        _model(report),
        _runtimes(report),
        _coverage(report),
        _environment(report),
        _spec(report),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{word}: {_e(name)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        + '<nav class="small"><a href="../index.html">&larr; every artifact of this tree (index.html)</a> &middot; '
        '<a href="report.md">report.md</a> &middot; <a href="report.json">report.json</a></nav>\n'
        + "\n".join(s for s in sections if s)
        + "\n</body>\n</html>\n"
    )
