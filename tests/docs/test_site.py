"""The docs site builds with warnings as errors, README is the door to every page, and every figure says where it was
measured. ``mkdocs build --strict`` fails on a broken link or anchor, a page missing from the nav, or a generated part
(``tools/docs_site.py``) that cannot be rendered.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.pages import KNOWN_INFO, ROOT, all_blocks
from tests.toolmod import tool

site = tool("docs_site")

README_LIMIT = 10 * 1024  # bytes: the door, not the house


def _nav_pages() -> list[str]:
    """The pages mkdocs.yml's nav lists (``- Title: page.md`` or ``- page.md`` lines below ``nav:``)."""
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:\n", 1)[1]
    return re.findall(r"^\s+- (?:[^:\n]+: )?(\S+\.md)$", nav, re.M)


def test_mkdocs_build_strict_passes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    for page in _nav_pages():  # every page was written, and no directive was left unrendered
        html = tmp_path / "site" / (page.removesuffix("index.md").removesuffix(".md") + "/index.html").lstrip("/")
        if page == "index.md":
            html = tmp_path / "site" / "index.html"
        assert html.is_file(), page
        assert "<!-- render:" not in html.read_text(), page


def test_every_docs_page_is_in_the_nav() -> None:
    on_disk = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(_nav_pages()) == on_disk


def test_readme_is_small_and_links_every_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= README_LIMIT, f"README is {len(readme.encode())} bytes; the limit is {README_LIMIT}"
    linked = set(re.findall(r"\]\((docs/[^)#]+\.md)", readme))
    assert {f"docs/{p}" for p in _nav_pages()} <= linked, sorted({f"docs/{p}" for p in _nav_pages()} - linked)
    for path in linked:
        assert (ROOT / path).is_file(), path


def test_every_block_says_what_it_is() -> None:
    # An unlabelled fence is neither run nor checked: every block names its language.
    unknown = [f"{b.page}:{b.line} {b.info!r}" for b in all_blocks() if b.info not in KNOWN_INFO]
    assert not unknown, unknown


@pytest.mark.parametrize("name", sorted(site.FIGURE_RENDERERS))
def test_every_figure_says_where_it_was_measured(name: str) -> None:
    text = site.render(f"<!-- render: figure {name} -->")
    assert "*Measured on:" in text or "*Machine and load:" in text, text[:300]
    assert "|" in text or "passed" in text  # a table (or the suite's summary line), not an empty section


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "tools" / "figures").glob("*.md")))
def test_every_tool_written_figure_renders_with_its_machine(name: str) -> None:
    text = site.render(f"<!-- render: figure-md {name} -->")
    assert text.startswith(("*Measured on:", "*Machine and load:")), text[:200]


@pytest.mark.parametrize(
    ("directive", "fragment"),
    [
        ("<!-- render: cli build -->", "usage: ropeexport build"),
        ("<!-- render: cli -->", "usage: ropeexport"),
        ("<!-- render: presets -->", "| `llama-3.1-8b` |"),
        ("<!-- render: figure build-times -->", "load average"),
    ],
)
def test_a_directive_renders_what_it_names(directive: str, fragment: str) -> None:
    assert fragment in site.render(directive)


@pytest.mark.parametrize(
    ("directive", "words"),
    [
        ("<!-- render: nonsense -->", "unknown directive 'nonsense'"),
        ("<!-- render: figure no-such-figure -->", "not one of"),
        ("<!-- render: figure-md no-such-figure -->", "does not exist"),
    ],
)
def test_a_directive_that_cannot_render_fails_the_build(directive: str, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        site.render(directive, "page.md")
