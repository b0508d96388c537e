"""``report.html``: one self-contained file with the report's sections and its plots.

Nothing is fetched: the style sheet is inline, there is no script, and the plots (``plots.py``) are PNG data URIs.
Every string that comes from the report (names, spec values, error messages, reasons) goes through ``html.escape``:
a runtime's error message or a user's ``--name`` may hold markup. The sections and their words are those of
``report.md``, both built by ``sections.py``; this module only writes them as markup, failing rows highlighted.
"""

from __future__ import annotations

import base64
import struct
import warnings
from collections.abc import Callable
from html import escape
from typing import Any

from ropeexport.report import plots
from ropeexport.report.blocks import (
    Banner,
    Block,
    Bullets,
    Cell,
    CurvePlot,
    Definitions,
    Grid,
    HistogramPlot,
    LinePlot,
    Pairs,
    Paragraph,
    Section,
    Table,
)
from ropeexport.report.sections import banner, sections

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

_TD_CLASSES = ("num", "name", "where")  # cell kinds that are a class of the cell itself
_SPAN_CLASSES = ("small", "mono")  # cell kinds that wrap the text in a span of that class


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _notes(notes: tuple[str, ...]) -> str:
    return "".join(f'<br><span class="small">{_e(note)}</span>' for note in notes)


def _cell(cell: Cell) -> str:
    if cell.kind == "verdict":
        return f'<td><span class="badge {cell.text.lower()}">{_e(cell.text)}</span></td>'
    text = _e(cell.text) + _notes(cell.notes)
    if cell.kind in _SPAN_CLASSES:
        return f'<td><span class="{cell.kind}">{text}</span></td>'
    return f'<td class="{cell.kind}">{text}</td>' if cell.kind in _TD_CLASSES else f"<td>{text}</td>"


def _table(header: list[str], rows: list[tuple[str, list[Cell]]]) -> str:
    """A table; each row is (css class, cells)."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = [
        (f'<tr class="{css}">' if css else "<tr>") + "".join(_cell(c) for c in cells) + "</tr>" for css, cells in rows
    ]
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _png_size(png: bytes) -> tuple[int, int]:
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk follows the 8-byte signature
    return width, height


def safe_plot(make: Callable[..., bytes], *args: Any) -> bytes:
    """``make(*args)``'s PNG, or empty bytes when matplotlib cannot draw the values (the figure is then left out).

    What matplotlib or numpy warn while drawing stays here: a figure is written in the middle of a build, and a
    warning about axis limits or a glyph would be printed on the user's stderr with no bearing on the verdict (the
    figure says below its axes what it could not draw).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return make(*args)
    except Exception:  # noqa: BLE001 - a plot must never cost the report
        return b""


def figure_html(png: bytes, alt: str, caption: str = "") -> str:
    """A figure of report.html: the PNG inline (a data URI) with its alt text and caption, or a note when empty."""
    if not png:
        return f'<p class="note">Plot left out: {_e(alt)} could not be drawn from these values.</p>'
    width, height = _png_size(png)
    data = base64.b64encode(png).decode("ascii")
    img = f'<img alt="{_e(alt)}" width="{width}" height="{height}" src="data:image/png;base64,{data}">'
    return f"<figure>{img}" + (f"<figcaption>{_e(caption)}</figcaption>" if caption else "") + "</figure>"


def _plot(plot: LinePlot | CurvePlot | HistogramPlot) -> str:
    if isinstance(plot, LinePlot):
        lines = [plots.Line(s.label, s.x, s.y) for s in plot.lines]
        if plot.share:
            png = safe_plot(plots.share_by_position, lines, plot.axis_label)
        else:
            png = safe_plot(plots.error_by_position, lines, plot.axis_label, list(plot.atols))
        return figure_html(png, plot.alt, plot.caption)
    if isinstance(plot, CurvePlot):
        png = safe_plot(plots.curve, plot.title, plot.x_label, plot.y_label, plot.x, plot.y)
        return figure_html(png, plot.alt)
    png = safe_plot(plots.error_histogram, plot.title, plot.edges_log10, plot.counts, plot.zeros, plot.atol)
    return figure_html(png, plot.alt)


def _paragraph(block: Paragraph) -> str:
    parts = []
    for span in block.spans:
        if span.kind == "code":
            parts.append(f"<code>{_e(span.text)}</code>")
        elif span.kind == "mono":
            parts.append(f'<span class="mono">{_e(span.text)}</span>')
        else:
            parts.append(_e(span.text))
    return (f'<p class="{block.style}">' if block.style else "<p>") + "".join(parts) + "</p>"


def _pairs(block: Pairs, per_row: int = 3) -> str:
    """Key-value pairs, ``per_row`` to a row: short values read better across than down."""
    rows = []
    for start in range(0, len(block.items), per_row):
        chunk = block.items[start : start + per_row]
        tds = "".join(f'<th class="key">{_e(k)}</th><td>{_e(v.text)}</td>' for k, v in chunk)
        rows.append(f"<tr>{tds}</tr>")
    return f'<table class="pairs"><tbody>{"".join(rows)}</tbody></table>'


def _definitions(block: Definitions) -> str:
    if not block.items:
        return ""
    rows = []
    for entry in block.items:
        notes = entry.notes + ((entry.footnote.text,) if entry.footnote is not None else ())
        rows.append(("", [Cell(entry.term), Cell(entry.text, notes=notes)]))
    return _table(list(block.header), rows)


def _block(block: Block) -> str:
    if isinstance(block, Paragraph):
        return _paragraph(block) if block.only in (None, "html") else ""
    if isinstance(block, Table):
        return _table(*block.shown("html"))
    if isinstance(block, Bullets):
        bullets = "<ul>" + "".join(f"<li>{_e(item)}</li>" for item in block.items) + "</ul>"
        return f"<details><summary>{_e(block.summary)}</summary>{bullets}</details>" if block.summary else bullets
    if isinstance(block, Definitions):
        return _definitions(block)
    if isinstance(block, Pairs):
        return _pairs(block)
    if isinstance(block, Grid):
        return '<div class="grid">' + "".join(_block(item) for item in block.items) + "</div>"
    if isinstance(block, LinePlot | CurvePlot | HistogramPlot):
        return _plot(block)
    return ""  # Blank: report.md's spacing


def _section(section: Section) -> str:
    if section.only not in (None, "html"):
        return ""
    css = f' class="{section.css}"' if section.css else ""
    body = "".join(_block(block) for block in section.blocks)
    return f'<section{css} id="{section.anchor}"><h2>{_e(section.title)}</h2>{body}</section>'


def _banner(top: Banner) -> str:
    word = "PASS" if top.passed else "FAIL"
    return (
        f'<header class="banner {word.lower()}"><h1>{word}: {_e(top.name)}</h1>'
        + (f"<p>{_e(top.summary)}</p>" if top.summary else "")
        + "</header>"
    )


def render_html(report: dict[str, Any]) -> str:
    """``report.html`` for a report dict (schema ``ropeexport.report/1`` or ``/2``): banner, failures, sections."""
    top = banner(report)
    word = "PASS" if top.passed else "FAIL"
    parts = [_banner(top), *(_section(section) for section in sections(report))]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{word}: {_e(top.name)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        + '<nav class="small"><a href="../index.html">&larr; every artifact of this tree (index.html)</a> &middot; '
        '<a href="report.md">report.md</a> &middot; <a href="report.json">report.json</a></nav>\n'
        + "\n".join(part for part in parts if part)
        + "\n</body>\n</html>\n"
    )
