"""index.html fits 1,400 px whatever its rows hold: the columns are the ones measured, every text cell may break
anywhere, figures wrap at their spaces; and, where Chromium is installed, the sample index laid out at a 1,400 px
window scrolls no wider than the window (``tools/index_width.py``, tools/figures/index-width.md).
"""  # noqa: D205

from __future__ import annotations

import re

import pytest

from ropeexport.tree import INDEX_CSS, render_index
from tests.report.sample_index import sample_index
from tests.toolmod import tool

index_width = tool("index_width")

# The columns tools/figures/index-width.md measured: another column is to be measured again before it is added.
COLUMNS = ["", "artifact", "encoding / kind", "dtype graph", "max positions", "worst |err| vs eager (share of allowed)",
           "worst |err| vs float64 (share of allowed)", "model size", "build time", "runtimes", "from"]  # fmt: skip
LONGEST_FIGURE_WORD = 16  # a figure cell's widest word ("(raised)", "9.26e-07"): what such a column needs


def _cells(page: str) -> list[tuple[str, str]]:
    """(class, text) of every body cell of the index table."""
    body = page.split('<table class="index">', 1)[1].split("</table>", 1)[0].split("<tbody>", 1)[1]
    return [(c or "", re.sub(r"<[^>]+>", "", t)) for c, t in re.findall(r'<td(?: class="([^"]*)")?>(.*?)</td>', body)]


def test_the_index_table_has_the_measured_columns_and_no_unbounded_cell() -> None:
    page = render_index(sample_index())
    header = page.split('<table class="index"><thead><tr>', 1)[1].split("</tr>", 1)[0]
    assert [h.replace("&#x27;", "'") for h in re.findall(r"<th>(.*?)</th>", header)] == COLUMNS
    # every text cell breaks anywhere (a path has no space), figures wrap at their spaces: no nowrap in the table
    assert "table.index td { overflow-wrap: anywhere; }" in INDEX_CSS
    assert "table.index td.num { white-space: normal;" in INDEX_CSS and "table.index { width: 100%; }" in INDEX_CSS
    cells = _cells(page)
    assert len(cells) == len(COLUMNS) * len(sample_index()["artifacts"])
    figures = [t for c, t in cells if c == "num"]
    assert figures and max(len(w) for t in figures for w in t.split()) <= LONGEST_FIGURE_WORD, figures


@pytest.mark.skipif(index_width.chromium() is None, reason="no chromium on PATH to lay the page out (apt-get install "
                    "-y chromium); the CSS test above still holds")  # fmt: skip
def test_the_sample_index_lays_out_within_1400_px_in_chromium() -> None:
    widths = index_width.measure(render_index(sample_index()), 1400)
    assert widths["document"] <= 1400 and widths["table"] <= 1400, widths
    assert [h for h, _ in widths["columns"]] == COLUMNS
