"""The docs' generated sections are committed whole and fresh (``tools/docs_site.py``): a page reads whole in the
repository without building the site (issue 43, item 1: 29 markers were empty until the site was built), and a
section that no longer matches what it renders from (a parser's help, a preset card, a figure's JSON) fails here,
naming the one command that rewrites it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.toolmod import tool

site = tool("docs_site")
ROOT = Path(__file__).resolve().parents[2]
PAGES = [str(p.relative_to(ROOT)) for p in site.pages()]


@pytest.mark.fast
@pytest.mark.parametrize("page", PAGES)
def test_each_generated_section_is_committed_and_fresh(page: str) -> None:
    text = (ROOT / page).read_text()
    markers = site.DIRECTIVE.findall(text)
    assert text.count(site.END) == len(markers), (
        f"{page}: {len(markers)} render markers but {text.count(site.END)} end lines: a section is not committed; "
        f"run `{site.COMMAND}` and commit the pages it rewrites"
    )
    assert site.regenerate(text, page) == text, (
        f"{page}: a generated section is stale; run `{site.COMMAND}` and commit the pages it rewrites"
    )


# (case, page text, what regenerating must make of it)
CASES = [
    ("a new marker gets its section and end line", "# T\n\n<!-- render: cli list -->\n\nafter\n",
     lambda fresh: fresh.count(site.END) == 1 and "usage: ropeexport list" in fresh and fresh.endswith("\nafter\n")),
    ("a stale section is rewritten", "<!-- render: cli list -->\n\nold text\n\n<!-- end render -->\nafter\n",
     lambda fresh: "old text" not in fresh and "usage: ropeexport list" in fresh and fresh.endswith("-->\nafter\n")),
    ("two sections, each its own", "<!-- render: cli list -->\n<!-- end render -->\nmid\n<!-- render: cli diff -->\n",
     lambda fresh: fresh.count(site.END) == 2 and fresh.index("ropeexport list") < fresh.index("mid")
     < fresh.index("ropeexport diff")),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("case", "text", "holds"), CASES, ids=[c[0] for c in CASES])
def test_regenerating_a_page(case: str, text: str, holds: object) -> None:
    fresh = site.regenerate(text, "page.md")
    assert callable(holds) and holds(fresh), fresh
    assert site.regenerate(fresh, "page.md") == fresh  # a second run changes nothing
    rendered = site.render(fresh, "page.md")  # what the site shows: no markers, the section once
    assert "<!-- render:" not in rendered and site.END not in rendered
    assert rendered == site.render(text, "page.md")


@pytest.mark.fast
def test_the_site_renders_a_committed_section_once(tmp_path: Path) -> None:
    page = (ROOT / "docs/reference/cli.md").read_text()
    rendered = site.render(page, "docs/reference/cli.md")
    assert rendered.count("usage: ropeexport build") == 1 and "<!-- render:" not in rendered


def _prose(text: str) -> str:
    """A page's own words: its generated sections (rendered from a figure already) cut out."""
    return site.SECTION.sub("", text)


OUTPUT_PAGES = sorted({site.load_figure(figure)["page"]: figure for figure, _, _ in site.OUTPUTS.values()}.items())


@pytest.mark.fast
@pytest.mark.parametrize(("page", "figure"), OUTPUT_PAGES, ids=[p for p, _ in OUTPUT_PAGES])
def test_a_tutorials_figures_are_its_recorded_runs(page: str, figure: str) -> None:
    # Every error a tutorial's words quote (2.72e-03) is one its recorded run printed (issue 43 item 11: the audit
    # tutorial said 4.62e-05 and 5.35e-07 where a user got 4.64e-05 and 4.54e-07)
    printed = "\n".join(block["output"] for block in site.load_figure(figure)["blocks"])
    quoted = set(re.findall(r"\b\d\.\d\de[+-]\d\d\b", _prose((ROOT / page).read_text())))
    assert sorted(f for f in quoted if f not in printed) == [], (
        f"{page} quotes figures its recorded run (tools/figures/{figure}.json) did not print"
    )
