"""``report.md``: the summary of a report a reviewer reads in a pull request.

The verdict comes first, then what failed, then the report's sections (``sections.py``) in the order a reviewer
checks them. This module only writes them as Markdown: every string from the report is escaped, the figures are left
to report.html.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import Any

from ropeexport.report.blocks import (
    Blank,
    Block,
    Bullets,
    Cell,
    Definitions,
    Pairs,
    Paragraph,
    Section,
    Table,
)
from ropeexport.report.sections import banner, sections

_MD_PUNCTUATION = re.compile(r"([\\`*\[\]|~#])")
_MD_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")  # intraword `_` never starts emphasis
_MARKS = {"PASS": "✅ PASS", "FAIL": "❌ FAIL", "info": "ℹ️ info"}


def md(value: Any) -> str:
    """Text safe anywhere in Markdown, table cells included.

    Newlines become spaces (they would end a table row); ``& < >`` become entities, so ``<script>`` is shown, never
    parsed as HTML; Markdown punctuation, ``|`` included, is backslash-escaped.
    """
    text = " ".join(str(value).split())
    text = html.escape(text, quote=False)
    text = _MD_PUNCTUATION.sub(r"\\\1", text)
    return _MD_UNDERSCORE.sub(r"\\_", text)


def _cell(cell: Cell) -> str:
    if cell.kind == "verdict":
        return md(_MARKS.get(cell.text, _MARKS["info"]))
    return md(cell.words("markdown"))


def _table(header: Iterable[str], rows: Iterable[list[Cell]]) -> list[str]:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    return lines + [""]


def _paragraph(block: Paragraph) -> str:
    parts = []
    for span in block.spans:
        if span.kind == "fixed":
            parts.append(span.text)
        elif span.kind == "code":
            parts.append(f"`{span.text}`")
        else:
            parts.append(md(span.text))
    return "".join(parts)


def _definitions(block: Definitions) -> list[str]:
    lines = []
    for entry in block.items:
        lines.append(
            f"- **{md(entry.term)}**{entry.separator}{md(entry.text)}" + "".join(f": {md(n)}" for n in entry.notes)
        )
        if entry.footnote is not None:
            lines.append("  " + md(entry.footnote.words("markdown")))
    return lines + [""]


def _block(block: Block) -> list[str]:
    """A part's lines, an empty line after it; figures (report.html's) give none."""
    if isinstance(block, Paragraph):
        return [_paragraph(block), ""] if block.only in (None, "markdown") else []
    if isinstance(block, Table):
        header, rows = block.shown("markdown")
        return _table(header, [cells for _, cells in rows])
    if isinstance(block, Bullets):
        bullets = [f"- {md(item)}" for item in block.items]
        if block.summary:
            return [f"<details><summary>{md(block.summary)}</summary>", "", *bullets, "", "</details>", ""]
        return [*bullets, ""]
    if isinstance(block, Definitions):
        return _definitions(block)
    if isinstance(block, Pairs):
        return [", ".join(f"{md(key)}{block.separator}{md(value.words('markdown'))}" for key, value in block.items), ""]
    if isinstance(block, Blank):
        return [""]
    return []


def _section(section: Section) -> list[str]:
    if section.only not in (None, "markdown"):
        return []
    heading = section.heading("markdown")
    lines = [f"## {heading}", ""] if heading else []
    for block in section.blocks:
        lines += _block(block)
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    """``report.md`` for a report dict (schema ``ropeexport.report/1`` or ``/2``): verdict first, failures next."""
    top = banner(report)
    word = "PASS" if top.passed else "FAIL"
    lines = [f"# {'✅' if top.passed else '❌'} {word}: {md(top.name)}", ""]
    if top.summary:
        lines += [md(top.summary), ""]
    for section in sections(report):
        lines += _section(section)
    return "\n".join(lines).rstrip("\n") + "\n"
