"""The parts a report's sections are made of: paragraphs, tables, lists and figures, as data for both writers.

``sections.py`` builds them from ``report.json`` once; ``markdown.py`` writes them as text and ``html.py`` as escaped
markup with the figures drawn by ``plots.py``. Text in them is plain: each writer escapes it for its format. A part
that only one page shows says so (``only``), and where report.md words a thing differently from report.html the part
carries both, so the two pages differ only where the data says they do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

Medium: TypeAlias = Literal["markdown", "html"]

# What a span of a paragraph is: "" report text (escaped in both pages); "fixed" our own words, written into Markdown
# as they are (they may end in a space, which Markdown escaping would drop); "code" a command; "mono" a digest.
SpanKind: TypeAlias = Literal["", "fixed", "code", "mono"]

# How a table cell is shown in report.html: "num" right-aligned, "name" and "where" may wrap, "small" and "mono" in a
# span of that class, "verdict" a PASS / FAIL / info badge (its text is the word). report.md writes the text (a
# verdict with its mark), so a kind changes the look only, never the words.
CellKind: TypeAlias = Literal["", "num", "name", "where", "small", "mono", "verdict"]


@dataclass(frozen=True)
class Span:
    """A run of a paragraph's text and what it is."""

    text: str
    kind: SpanKind = ""


@dataclass(frozen=True)
class Paragraph:
    """A paragraph; ``style`` is its CSS class in report.html (``small``), ``only`` the one page that shows it."""

    spans: tuple[Span, ...]
    style: str = ""
    only: Medium | None = None


def paragraph(text: str, style: str = "", only: Medium | None = None) -> Paragraph:
    """A paragraph of one run of text."""
    return Paragraph((Span(text),), style, only)


@dataclass(frozen=True)
class Cell:
    """A table cell: its text, how report.html shows it, smaller lines under it there, and report.md's own text.

    ``markdown`` is None where report.md says what report.html says.
    """

    text: str
    kind: CellKind = ""
    notes: tuple[str, ...] = ()
    markdown: str | None = None

    def words(self, medium: Medium) -> str:
        """The cell's text in one page (report.html's notes not included)."""
        return self.markdown if medium == "markdown" and self.markdown is not None else self.text


def cell(text: str, kind: CellKind = "", notes: tuple[str, ...] = (), markdown: str | None = None) -> Cell:
    """A cell whose ``markdown`` is kept only where it differs from ``text`` (so the data shows real differences)."""
    return Cell(text, kind, notes, None if markdown == text else markdown)


@dataclass(frozen=True)
class Column:
    """A table column: its header and the one page that shows it (report.html has room for more numbers)."""

    header: str
    only: Medium | None = None


@dataclass(frozen=True)
class Row:
    """A table row: one cell per column; ``state`` ``fail`` or ``skip`` highlights it in report.html."""

    cells: tuple[Cell, ...]
    state: str = ""


@dataclass(frozen=True)
class Table:
    """A table: its columns and rows."""

    columns: tuple[Column, ...]
    rows: tuple[Row, ...]

    def shown(self, medium: Medium) -> tuple[list[str], list[tuple[str, list[Cell]]]]:
        """(headers, [(row state, cells)]) of the columns one page shows."""
        keep = [i for i, column in enumerate(self.columns) if column.only in (None, medium)]
        headers = [self.columns[i].header for i in keep]
        return headers, [(row.state, [row.cells[i] for i in keep]) for row in self.rows]


@dataclass(frozen=True)
class Bullets:
    """A bulleted list; with a ``summary`` it is folded away under that line."""

    items: tuple[str, ...]
    summary: str = ""


@dataclass(frozen=True)
class Definition:
    """An entry of a definition list: a term, its text, notes on it, and a rule that goes with it.

    report.md writes ``**term**{separator}text: note`` and the footnote on a line of its own (its ``markdown`` words);
    report.html writes a row of two cells, the notes and the footnote as smaller lines under the text.
    """

    term: str
    text: str
    notes: tuple[str, ...] = ()
    footnote: Cell | None = None
    separator: str = ": "


@dataclass(frozen=True)
class Definitions:
    """A definition list: bullets in report.md, a table under ``header`` in report.html."""

    header: tuple[str, str]
    items: tuple[Definition, ...]


@dataclass(frozen=True)
class Pairs:
    """Short key-value pairs: one line in report.md (``key{separator}value, ...``), a grid in report.html."""

    items: tuple[tuple[str, Cell], ...]
    separator: str


@dataclass(frozen=True)
class Blank:
    """One more empty line in report.md; nothing in report.html."""


@dataclass(frozen=True)
class Series:
    """One line of a plot: a label and its points (straight from report.json: any value may be null or text)."""

    label: str
    x: Sequence[Any]
    y: Sequence[Any]


@dataclass(frozen=True)
class LinePlot:
    """Worst error against position, one line per comparison: absolute with ``atols`` marked, or as a share."""

    share: bool
    lines: tuple[Series, ...]
    axis_label: str
    atols: tuple[float, ...]
    alt: str
    caption: str = ""


@dataclass(frozen=True)
class CurvePlot:
    """A property's curve."""

    title: str
    x_label: str
    y_label: str
    x: Sequence[Any]
    y: Sequence[Any]
    alt: str


@dataclass(frozen=True)
class HistogramPlot:
    """A comparison's elements by error, with its atol."""

    title: str
    edges_log10: Sequence[Any]
    counts: Sequence[Any]
    zeros: Any
    atol: Any
    alt: str


Plot: TypeAlias = LinePlot | CurvePlot | HistogramPlot


@dataclass(frozen=True)
class Grid:
    """Figures (and notes on figures that could not be drawn) side by side in report.html; report.md has none."""

    items: tuple[Plot | Paragraph, ...]


Block: TypeAlias = Paragraph | Table | Bullets | Definitions | Pairs | Blank | Grid | Plot


@dataclass(frozen=True)
class Section:
    """A section of the report: its title and anchor, its parts in order, and how report.md heads it.

    ``short_title``: report.md's heading where it is shorter than the page's; ``headed_in_markdown`` False: report.md
    writes the parts under no heading of their own; ``only``: the one page that has the section; ``css``: its class in
    report.html.
    """

    title: str
    anchor: str
    blocks: tuple[Block, ...]
    short_title: str | None = None
    headed_in_markdown: bool = True
    only: Medium | None = None
    css: str = ""

    def heading(self, medium: Medium) -> str | None:
        """The section's heading in one page; None where that page has no heading for it."""
        if self.only not in (None, medium):
            return None
        if medium == "html":
            return self.title
        return (self.short_title or self.title) if self.headed_in_markdown else None


@dataclass(frozen=True)
class Banner:
    """What the report's first lines say: the verdict, the artifact's name and what was checked."""

    passed: bool
    name: str
    summary: str
