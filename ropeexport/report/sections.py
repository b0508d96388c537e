"""The sections of a report, built once from ``report.json`` for both ``report.md`` and ``report.html``.

What failed comes first, then every section in the order a reviewer checks it: comparisons, error by position (and
the error histograms, a page of figures only report.html has), properties, tables, guards, model, runtimes, coverage
and tolerances, environment, spec. This module decides which sections exist, their titles, their tables' columns
and rows and their notes; the writers only render them (``blocks.py`` says how each part reads in either page).
"""

from __future__ import annotations

import math
from typing import Any

from ropeexport.report.blocks import (
    Banner,
    Blank,
    Block,
    Bullets,
    Cell,
    Column,
    CurvePlot,
    Definition,
    Definitions,
    Grid,
    HistogramPlot,
    LinePlot,
    Pairs,
    Paragraph,
    Row,
    Section,
    Series,
    Span,
    Table,
    cell,
    paragraph,
)
from ropeexport.report.words import (
    compact,
    comparison_label,
    cosine,
    error,
    failing_items,
    floats,
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

POSITION_CAPTION = (
    "Each line is one comparison's worst absolute error in each bin; the dotted line is atol. An element may err by "
    "max(atol, rtol × |expected|), so a line above atol can still pass where values are large: the next plot divides "
    "each error by its own allowance."
)
SHARE_CAPTION = (
    "Each bin's worst error divided by what that element may err by, max(atol, rtol × |expected|): the tolerance "
    "envelope is the dashed line at 1, and a point above it is a failing element."
)
HISTOGRAM_CAPTION = (
    "Elements by absolute error; exact zeros in grey on the left. The dotted line is atol: elements right of it still "
    "pass where rtol × |expected| allows them (the share-of-allowance plot above says where)."
)
TOLERANCE_RULE = Cell(
    "An element fails only when its error exceeds both atol and rtol × |expected|.",
    markdown="(an element fails only when its error exceeds both atol and rtol × |expected|)",
)


def banner(report: dict[str, Any]) -> Banner:
    """The verdict (a report that does not say it passed did not), the artifact's name and the headline."""
    name = str(report.get("name") or mapping(report, "spec").get("name") or "unnamed artifact")
    return Banner(report.get("passed") is True, name, headline(report))


def sections(report: dict[str, Any]) -> list[Section]:
    """Every section the report has, in reading order; a section without content is left out."""
    built = (
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
    )
    return [section for section in built if section is not None]


def _num(text: str) -> Cell:
    return Cell(text, "num")


def _verdict(passed: Any) -> Cell:
    return Cell(verdict(passed), "verdict")


def _state(passed: Any) -> str:
    return "fail" if passed is False else ""


def _failures(report: dict[str, Any]) -> Section | None:
    failures = failing_items(report)
    if not failures and report.get("passed") is not True:
        failures = ["The report does not say it passed, and names no failing check."]
    if not failures:
        return None
    return Section("What failed", "failures", (Bullets(tuple(failures)),), css="failures")


def _comparisons(report: dict[str, Any]) -> Section:
    comparisons = items(report, "comparisons")
    if not comparisons:
        return Section("Comparisons", "comparisons", (paragraph("No comparisons were recorded."),))
    shared = shared_tolerance(comparisons)
    names = ["reference", "runtime", "output", "max abs", "of allowed", "mean abs", "p99 abs", "max rel", "p99 rel"]
    names += ["max ulp", "cosine", "failures / elements"] + ([] if shared else ["atol / rtol"]) + ["worst at", "result"]
    html_only = {"mean abs", "max rel", "p99 rel"}  # report.md keeps to the numbers a reviewer reads first
    columns = tuple(Column(name, "html" if name in html_only else None) for name in names)
    rows = []
    for c in comparisons:
        worst = c.get("worst")
        values = worst_values(worst) if c.get("max_abs") != 0 else ""
        cells = [
            Cell(str(c.get("reference", "?"))),
            Cell(str(c.get("runtime", "?"))),
            Cell(str(c.get("output", "?")), "name"),
        ]
        cells += [_num(error(c.get("max_abs"))), _num(share(c.get("max_ratio")))]
        cells += [_num(error(c.get(m))) for m in ("mean_abs", "p99_abs", "max_rel", "p99_rel")]
        cells += [_num(number(c.get("max_ulp")))]
        cells += [_num(cosine(c.get("cosine"))), _num(f"{number(c.get('failures'))} / {number(c.get('elements'))}")]
        cells += [] if shared else [_num(f"{number(c.get('atol'))} / {number(c.get('rtol'))}")]
        cells.append(Cell(worst_location(worst, c.get("max_abs")), "where", (values,) if values else ()))
        rows.append(Row((*cells, _verdict(c.get("passed"))), _state(c.get("passed"))))
    intro: tuple[Block, ...] = (paragraph(tolerance_sentence(shared)),) if shared else ()
    return Section("Comparisons", "comparisons", (*intro, Table(columns, tuple(rows))))


def _atol_of(report: dict[str, Any], curve: dict[str, Any]) -> list[float]:
    """The atol of the comparison a curve belongs to; else the report's tolerance."""
    key = (curve.get("reference"), curve.get("runtime"), curve.get("output"))
    for c in items(report, "comparisons"):
        if (c.get("reference"), c.get("runtime"), c.get("output")) == key and c.get("atol") is not None:
            return floats([c["atol"]])
    tolerance = mapping(report, "coverage").get("tolerance")
    return floats([tolerance.get("atol")]) if isinstance(tolerance, dict) else []


def _position_plots(report: dict[str, Any], curves: list[dict[str, Any]]) -> list[Block]:
    """Per axis: the worst absolute error, and its share of the allowance where the curves carry it."""
    by_axis: dict[str, list[dict[str, Any]]] = {}
    for curve in curves:
        by_axis.setdefault(str(curve.get("axis") or "position"), []).append(curve)
    out: list[Block] = []
    for axis, group in by_axis.items():
        widths = sorted({str(c.get("bin_width")) for c in group if c.get("bin_width") is not None})
        label = axis + (f" (bins of {', '.join(widths)})" if widths and widths != ["1"] else "")
        lines = tuple(Series(comparison_label(c), c.get("x") or [], c.get("max_abs") or []) for c in group)
        atols = tuple(sorted({a for c in group for a in _atol_of(report, c)}))
        out.append(LinePlot(False, lines, label, atols, f"worst absolute error against {axis}", POSITION_CAPTION))
        if any(c.get("max_ratio") for c in group):
            ratios = tuple(Series(comparison_label(c), c.get("x") or [], c.get("max_ratio") or []) for c in group)
            alt = f"worst error as a share of its allowance against {axis}"
            out.append(LinePlot(True, ratios, label, (), alt, SHARE_CAPTION))
    return out


def _positions(report: dict[str, Any]) -> Section | None:
    curves = items(report, "positions")
    if not curves:
        return None
    columns = (
        *(Column(name, "markdown") for name in ("reference", "runtime", "output")),
        Column("comparison", "html"),
        Column("curve"),
        Column("worst bin"),
        Column("max abs"),
        Column("of allowed", "html"),
    )
    rows = []
    for curve in curves:
        where, worst = position_summary(curve)
        bins = len(curve["x"]) if isinstance(curve.get("x"), list) else 0
        ratios = [r for r in floats(curve.get("max_ratio")) if math.isfinite(r)]
        cells = [Cell(str(curve.get(key, "?"))) for key in ("reference", "runtime", "output")]
        cells += [Cell(comparison_label(curve)), Cell(f"{bins} bins of {number(curve.get('bin_width'))}"), Cell(where)]
        cells += [_num(worst), _num(share(max(ratios)) if ratios else "n/a")]
        rows.append(Row(tuple(cells)))
    blocks = (
        paragraph("The curves are plotted in report.html.", only="markdown"),
        *_position_plots(report, curves),
        Table(columns, tuple(rows)),
    )
    return Section("Error by position", "positions", blocks)


def _histograms(report: dict[str, Any]) -> Section | None:
    figures: list[HistogramPlot | Paragraph] = []
    for c in items(report, "comparisons"):
        histogram = c.get("histogram")
        if not isinstance(histogram, dict):
            continue
        label = comparison_label(c)
        edges, counts = histogram.get("edges_log10") or [], histogram.get("counts") or []
        figures.append(
            HistogramPlot(label, edges, counts, histogram.get("zeros"), c.get("atol"), f"error histogram, {label}")
        )
    if not figures:
        return None
    blocks = (paragraph(HISTOGRAM_CAPTION, style="small"), Grid(tuple(figures)))
    return Section("Error histograms", "histograms", blocks, only="html")


def _has_points(curve: dict[str, Any]) -> bool:
    xs, ys = floats(curve.get("x")), floats(curve.get("y"))
    return any(math.isfinite(a) and math.isfinite(b) for a, b in zip(xs, ys, strict=False))


def _properties(report: dict[str, Any]) -> Section | None:
    props = items(report, "properties")
    if not props:
        return None
    by_runtime = any(p.get("runtime") for p in props)
    columns = ((Column("runtime"),) if by_runtime else ()) + (Column("property"), Column("result"), Column("summary"))
    rows = []
    for p in props:
        summary = str(p.get("summary") or "")
        cells = [Cell(str(p.get("runtime") or ""))] if by_runtime else []
        cells += [Cell(str(p.get("name", "?"))), _verdict(p.get("passed"))]
        # report.md has no figures: it points to the page that has the curve.
        cells.append(cell(summary, markdown=summary + (" (curve in report.html)" if p.get("curve") else "")))
        rows.append(Row(tuple(cells), _state(p.get("passed"))))
    figures: list[CurvePlot | Paragraph] = []
    for p in props:
        curve = p.get("curve")
        if not isinstance(curve, dict):
            continue
        name = str(p.get("name") or "curve") + (f" ({p['runtime']})" if p.get("runtime") else "")
        if not _has_points(curve):
            figures.append(paragraph(f"{name}: the curve has no finite points to plot.", style="small"))
            continue
        x_label, y_label = str(curve.get("x_label") or "x"), str(curve.get("y_label") or "y")
        figures.append(CurvePlot(name, x_label, y_label, curve.get("x") or [], curve.get("y") or [], name))
    blocks: tuple[Block, ...] = (Table(columns, tuple(rows)),) + ((Grid(tuple(figures)),) if figures else ())
    return Section("Properties", "properties", blocks)


def _tables(report: dict[str, Any]) -> Section | None:
    tables = items(report, "tables")
    if not tables:
        return None
    rows = []
    for t in tables:
        note = t.get("reason") or (f"worst row {t['worst_row']}" if t.get("worst_row") is not None else "")
        cells = (Cell(str(t.get("name", "?"))), Cell(str(t.get("dtype", ""))), Cell(compact(t.get("shape"))),
                 Cell(compact(t.get("expected_shape"))), _num(number(t.get("max_ulp"))), _verdict(t.get("passed")),
                 Cell(str(note)))  # fmt: skip
        rows.append(Row(cells, _state(t.get("passed"))))
    names = ("table", "dtype", "shape", "expected shape", "max ulp", "result", "note")
    return Section("Tables", "tables", (Table(tuple(Column(n) for n in names), tuple(rows)),))


def _guards(report: dict[str, Any]) -> Section | None:
    guards = items(report, "guards")
    if not guards:
        return None
    rows = tuple(
        Row(
            (
                Cell(str(g.get("runtime", "?"))),
                Cell(str(g.get("case", "?"))),
                _verdict(g.get("passed")),
                Cell(str(g.get("error") or ""), "small"),
            ),
            _state(g.get("passed")),
        )
        for g in guards
    )
    columns = tuple(Column(name) for name in ("runtime", "case", "result", "what the runtime said"))
    intro = paragraph("Out-of-range positions sent straight to the runtime must be refused by the graph.")
    return Section("Guards", "guards", (intro, Table(columns, rows)))


def _model(report: dict[str, Any]) -> Section | None:
    io = io_rows(report)
    trt = trt_rows(report)
    if not io and not trt:
        return None
    blocks: list[Block] = []
    if io:
        columns = tuple(Column(name) for name in ("", "name", "dtype", "shape"))
        blocks.append(Table(columns, tuple(Row(tuple(Cell(text) for text in row)) for row in io)))
        blocks.append(Blank())  # report.md has always had two empty lines here: kept so that its bytes do not change
    if trt:
        words = "TensorRT ONNX parser, by version ("
        spans = (Span(words, "fixed"), Span("ropeexport check-trt", "code"), Span("; not run on TensorRT):", "fixed"))
        blocks.append(Paragraph(spans))
        rows = tuple(
            Row((Cell(version), cell(parses, markdown=("✅ " if ok else "❌ ") + parses), Cell(why)), _state(ok))
            for ok, (version, parses, why) in trt
        )
        blocks.append(Table(tuple(Column(name) for name in ("TensorRT", "verdict", "why")), rows))
    return Section("Model: inputs, outputs, TensorRT", "model", tuple(blocks), short_title="Model")


def _runtimes(report: dict[str, Any]) -> Section | None:
    runtimes = items(report, "runtimes")
    if not runtimes:
        return None
    rows = tuple(
        Row(
            (
                Cell(str(r.get("name", "?"))),
                Cell(str(r.get("status", "?"))),
                Cell(str(r.get("device") or r.get("reason") or "")),
            ),
            "skip" if r.get("status") != "verified" else "",
        )
        for r in runtimes
    )
    columns = tuple(Column(name) for name in ("runtime", "status", "device or reason skipped"))
    return Section("Runtimes", "runtimes", (Table(columns, rows),))


def _coverage(report: dict[str, Any]) -> Section | None:
    coverage = mapping(report, "coverage")
    probes = items(report, "probes")
    if not coverage and not probes:
        return None
    entries = []
    tolerance = coverage.get("tolerance")
    if tolerance:
        reason = tolerance.get("reason") if isinstance(tolerance, dict) else None
        notes = (str(reason),) if reason else ()
        # The tolerance's words open with their own label (the dtype), so report.md sets no colon after the term.
        entries.append(Definition("tolerance", tolerance_words(tolerance), notes, TOLERANCE_RULE, separator=" "))
    entries += [Definition(str(key), compact(value)) for key, value in coverage.items() if key != "tolerance"]
    blocks: list[Block] = [Definitions(("what", "coverage"), tuple(entries))]
    if probes:
        blocks.append(Bullets(tuple(probe_words(p) for p in probes), summary=f"{len(probes)} probes"))
    return Section("Coverage and tolerances", "coverage", tuple(blocks))


def _environment(report: dict[str, Any]) -> Section | None:
    env = mapping(report, "environment")
    if not env:
        return None
    pairs = tuple(
        (str(k), cell("none" if v is None else compact(v), markdown="none" if v is None else str(v)))
        for k, v in env.items()
    )
    return Section("Environment", "environment", (Pairs(pairs, " "),))


def _spec(report: dict[str, Any]) -> Section | None:
    spec = mapping(report, "spec")
    files = mapping(report, "files")
    blocks: list[Block] = []
    if spec:
        pairs = tuple((str(k), cell("none" if v is None else compact(v), markdown=compact(v))) for k, v in spec.items())
        blocks.append(Pairs(pairs, "="))
    if report.get("spec_sha256"):
        blocks.append(Paragraph((Span("spec sha256 ", "fixed"), Span(str(report["spec_sha256"]), "mono"))))
    if files:
        rows = tuple(Row((Cell(str(name)), Cell(str(digest), "mono"))) for name, digest in files.items())
        blocks.append(Table((Column("file"), Column("sha256")), rows))
    if report.get("schema"):
        spans = (Span("Report schema ", "fixed"), Span(str(report["schema"])), Span(".", "fixed"))
        blocks.append(Paragraph(spans, style="small"))
    if not blocks:
        return None
    # The schema alone gets no heading in report.md: a line at the end of the page.
    headed = bool(spec or files or report.get("spec_sha256"))
    return Section("Spec and files", "spec", tuple(blocks), short_title="Spec", headed_in_markdown=headed)
