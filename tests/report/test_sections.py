"""Both writers show the sections of ``sections(report)``, in its order: none can be added to one writer only."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from html import unescape
from typing import Any

import pytest

from ropeexport.report.blocks import Medium, Section
from ropeexport.report.html import render_html
from ropeexport.report.markdown import render_markdown
from ropeexport.report.sections import sections
from tests.cases import tiered
from tests.report.sample_report import built_rope_report, degraded_reports, minimal_report, sample_report

# (case, report): every sample the report tests render; the built one is made (once) when its case runs.
CASES: list[tuple[str, Callable[[], dict[str, Any]]]] = [
    ("passed", lambda: sample_report(passed=True)),
    ("failed", lambda: sample_report(passed=False)),
    ("minimal", minimal_report),
    ("no-verdict", lambda: {"name": "x"}),
    *((case, lambda report=report: copy.deepcopy(report)) for case, report in degraded_reports()),
    ("built", lambda: copy.deepcopy(built_rope_report())),
]

# Where report.md's heading differs from report.html's, on purpose: a shorter one, or none (a page of figures).
MARKDOWN_HEADINGS = {"model": "Model", "spec": "Spec", "histograms": None}


def markdown_headings(text: str) -> list[str]:
    return [line[3:] for line in text.splitlines() if line.startswith("## ")]


def html_headings(text: str) -> list[str]:
    return [unescape(title) for title in re.findall(r"<h2>(.*?)</h2>", text)]


def html_anchors(text: str) -> list[str]:
    return re.findall(r'<section(?: class="[^"]*")? id="([^"]+)">', text)


def headings(built: list[Section], medium: Medium) -> list[str]:
    return [h for h in (s.heading(medium) for s in built) if h is not None]


# Fast tier: a passed, a failed and a minimal report; CI renders every degraded one too.
@pytest.mark.parametrize(("case", "make"), tiered(CASES, lambda c: c[0] in ("passed", "failed", "minimal")),
                         ids=[case for case, _ in CASES])  # fmt: skip
def test_both_writers_show_the_sections_in_order(case: str, make: Callable[[], dict[str, Any]]) -> None:
    report = make()
    built = sections(copy.deepcopy(report))
    assert built, case  # at least the comparisons (or the note that there are none)
    markdown, page = render_markdown(copy.deepcopy(report)), render_html(copy.deepcopy(report))
    assert markdown_headings(markdown) == headings(built, "markdown")
    assert html_headings(page) == headings(built, "html") == [s.title for s in built if s.only != "markdown"]
    assert html_anchors(page) == [s.anchor for s in built if s.only != "markdown"]


@pytest.mark.parametrize(("case", "make"), CASES, ids=[case for case, _ in CASES])
def test_headings_differ_only_where_declared(case: str, make: Callable[[], dict[str, Any]]) -> None:
    report = make()
    for section in sections(report):
        heading = section.heading("markdown")
        if section.anchor == "spec" and heading is None:
            assert report.get("schema")  # the schema line alone, at the end of report.md: no heading
        else:
            assert heading == MARKDOWN_HEADINGS.get(section.anchor, section.title), (case, section.anchor)
