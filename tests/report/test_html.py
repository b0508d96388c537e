from __future__ import annotations

import base64
import copy
import re
import struct
import warnings
from html.parser import HTMLParser
from typing import Any

import matplotlib
import pytest

from ropeexport.report import plots
from ropeexport.report.html import render_html
from ropeexport.report.views import EncodingReport
from tests.report.sample_report import HOSTILE, built_rope_report, degraded_reports, sample_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "p", "section", "ul", "li", "table",
    "thead", "tbody", "tr", "th", "td", "span", "br", "figure", "figcaption", "img", "div", "details", "summary",
    "nav", "a", "code",
}  # fmt: skip
LINKS = {"../index.html", "report.md", "report.json"}  # a report links to its tree's index and its siblings only
NETWORK = re.compile(r"""(?:src|href|action|poster|srcset)\s*=\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?//""", re.IGNORECASE)


class Page(HTMLParser):
    """Tags, attributes and images of a rendered page, plus whether every opened element was closed."""

    VOID = {"meta", "br", "img"}

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.images: list[dict[str, str | None]] = []
        self.row_classes: list[str] = []
        self.text: list[str] = []
        self.open: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        attributes = dict(attrs)
        assert not any(name.startswith("on") for name in attributes), (tag, attrs)  # no event handlers
        if tag == "a":
            assert attributes.get("href") in LINKS, attrs
        if tag == "img":
            self.images.append(attributes)
        if tag == "tr":
            self.row_classes.append(attributes.get("class") or "")
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, (tag, self.open[-5:])
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def png_size(png: bytes) -> tuple[int, int]:
    assert png.startswith(PNG_SIGNATURE)
    return struct.unpack(">II", png[16:24])


def check_page(text: str) -> Page:
    """What every report.html must be: well nested, only known tags, no network, images that are real PNGs."""
    page = Page(text)
    assert page.open == []
    assert page.tags <= ALLOWED_TAGS, page.tags - ALLOWED_TAGS
    assert not NETWORK.search(text)
    assert "http://" not in text and "https://" not in text
    assert "url(" not in text and "@import" not in text
    for image in page.images:
        src = image["src"] or ""
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert png_size(png) == (int(image["width"] or 0), int(image["height"] or 0))
        assert image.get("alt")
    return page


@pytest.fixture
def real_report() -> dict[str, Any]:
    return copy.deepcopy(built_rope_report())


def test_passing_report() -> None:
    report = sample_report(passed=True)
    text = render_html(report)
    page = check_page(text)
    assert '<header class="banner pass"><h1>PASS: rope-half-default-fp32-fused</h1>' in text
    assert 'id="failures"' not in text
    # error by position (one axis), a histogram per comparison, the decay curve
    assert len(page.images) == 1 + len(EncodingReport(report).comparisons) + 1
    assert text.count("data:image/png;base64,") == len(page.images)
    assert "fail" not in page.row_classes
    assert "TensorRT is not installed (pip install tensorrt)" in text
    assert '<span class="badge info">info</span>' in text  # long-term decay: measured, not judged


def test_failing_report_highlights_failures() -> None:
    report = sample_report(passed=False)
    text = render_html(report)
    page = check_page(text)
    assert '<header class="banner fail">' in text
    assert text.index('id="failures"') < text.index('id="comparisons"')
    failures = text[text.index('id="failures"') : text.index("</section>", text.index('id="failures"'))]
    assert failures.count("<li>") == 5
    # failing rows: two comparisons, a property, a table, a guard
    assert page.row_classes.count("fail") == 5
    assert page.row_classes.count("skip") == 1  # tensorrt
    assert "n/a" in text
    # error by position, three histograms (the comparison that raised has none); the decay curve lost its y
    assert len(page.images) == 1 + 3
    assert "long-term decay: the curve has no finite points to plot." in text


def test_hostile_strings_are_escaped() -> None:
    text = render_html(sample_report(passed=False))
    check_page(text)
    assert "<script" not in text.lower()
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt; a|b"
    # name (title, banner), output, error, table, guard, property, runtime, tolerance, environment, spec, file name
    assert text.count(escaped) >= 12
    assert HOSTILE not in text


@pytest.mark.parametrize(("case", "report"), degraded_reports(), ids=[case for case, _ in degraded_reports()])
def test_degraded_reports_render(case: str, report: dict[str, Any]) -> None:
    if case.startswith("without-"):  # histograms do not depend on the top-level keys: drawn once, in the other cases
        for c in report.get("comparisons") or []:
            c.pop("histogram", None)
    text = render_html(report)
    check_page(text)
    if report.get("passed") is not True:
        assert '<header class="banner fail">' in text


def test_real_report(real_report: dict[str, Any]) -> None:
    text = render_html(real_report)
    page = check_page(text)
    report = EncodingReport(real_report)
    assert f"<h1>PASS: {report.name}</h1>" in text
    assert text.count('<span class="badge pass">PASS</span>') >= len(report.comparisons)
    # Error by position, and its share of the allowance (the tolerance envelope as y = 1) where the curves carry it.
    curves = report.positions
    plotted = bool(curves) + any(c.max_ratio for c in curves)
    plotted += sum(not c.lacks("histogram") for c in report.comparisons)
    plotted += sum(p.curve is not None for p in report.properties)
    assert len(page.images) == plotted
    if report.schema == "ropeexport.report/2":
        assert plotted >= 1 + len(report.comparisons)  # error by position and every histogram


# ---- plots ----


def test_plots_have_fixed_sizes_and_are_deterministic() -> None:
    lines = [plots.Line("a", list(range(100)), [1e-7 * (1 + i % 7) for i in range(100)])]
    first = plots.error_by_position(lines, "position", [1e-5])
    assert first == plots.error_by_position(lines, "position", [1e-5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "constrained_layout not applied": a long label squeezed the axes out
        wide = plots.error_by_position([plots.Line("b" * 200, [0, 1e9], [1e-30, 1e30])], "x" * 300, [1e-5])
    assert png_size(first) == png_size(wide) == (960, 380)
    histogram = plots.error_histogram("t", [-9, -8, -7], [3, 4], zeros=2, atol=1e-5)
    assert png_size(histogram) == png_size(plots.error_histogram("t", [], [])) == (360, 290)
    assert png_size(plots.curve("t", "x", "y", [0, 1], [1, 0])) == (640, 340)


def test_plots_leave_no_global_state() -> None:
    backend = matplotlib.get_backend()
    params = dict(matplotlib.rcParams)
    with matplotlib.rc_context({"font.size": 30, "axes.grid": False}):
        styled = plots.curve("t", "x", "y", [0, 1, 2], [1, 0.5, 0.2])
    assert styled == plots.curve("t", "x", "y", [0, 1, 2], [1, 0.5, 0.2])  # a user's style does not leak in
    plots.error_histogram("t", [-9, -8, -7], [3, 4], zeros=2, atol=1e-5)
    plots.error_by_position([plots.Line("a", [0, 1], [1e-7, 0.0])], "position", [1e-5])
    assert matplotlib.get_backend() == backend
    assert dict(matplotlib.rcParams) == params
    if "matplotlib.pyplot" in __import__("sys").modules:
        import matplotlib.pyplot as plt

        assert plt.get_fignums() == []


def _decoder_figure(errors: list[float]) -> bytes:
    from ropeexport.decoder.report import error_figure

    calls = [{"positions": [0, i], "float64": {"rel": e}, "stale_cache": False, "passed": e <= 1e-4, "index": i}
             for i, e in enumerate(errors)]  # fmt: skip
    scenario = {"name": "decode", "passed": all(c["passed"] for c in calls), "calls": calls}
    return error_figure({"tolerance": {"rel": 1e-4}, "scenarios": [scenario]})


# Errors a failing build can store, through each per-position figure: the smallest double (a third of it is 0, which
# matplotlib refused on the user's stderr as "Attempt to set non-positive ylim on a log-scaled axis"; issue 43 item
# 10) and one past what its log ticker draws (numpy's overflow warnings and an OverflowError that left the figure out)
EXTREME_ERRORS = [5e-324, 1e300]
FIGURES = {
    "decoder error_figure": _decoder_figure,
    "error_by_position": lambda e: plots.error_by_position([plots.Line("a", list(range(len(e))), e)], "p", [1e-5]),
    "share_by_position": lambda e: plots.share_by_position([plots.Line("a", list(range(len(e))), e)], "p"),
}


@pytest.mark.fast
@pytest.mark.parametrize("error", EXTREME_ERRORS, ids=str)
@pytest.mark.parametrize("figure", FIGURES)
def test_a_figure_of_extreme_errors_is_drawn_without_a_warning(figure: str, error: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning here is printed on the stderr of the build that draws it
        png = FIGURES[figure]([1e-6, error])
    assert png.startswith(PNG_SIGNATURE)


HISTOGRAMS = [
    pytest.param([-9.0, -8.0, -7.0], [3, 4], 0, ([-9.0, -8.0, -7.0], [3.0, 4.0], 0.0), id="k-counts"),
    pytest.param([-9.0, -8.0], [1, 3, 2], 0, ([-10.0, -9.0, -8.0, -7.0], [1.0, 3.0, 2.0], 0.0), id="under-overflow"),
    pytest.param(["-inf", -9.0, -8.0], [5, 3], 0, ([-9.0, -8.0], [3.0], 5.0), id="zeros-first-bin"),
    pytest.param([-9.0, -8.0], [None, 2], 0, ([-9.0, -8.0], [0.0], 0.0), id="null-count"),
    pytest.param([], [], 0, ([], [], 0.0), id="empty"),
]


@pytest.mark.parametrize(("edges", "counts", "zeros", "expected"), HISTOGRAMS)
def test_histogram_layouts(edges: list[Any], counts: list[Any], zeros: int, expected: tuple[Any, ...]) -> None:
    assert plots.histogram_bins(edges, counts) == expected


def test_index_links_only_to_its_own_folders(tmp_path) -> None:
    from ropeexport.tree import render_index

    entry = {
        "name": "javascript:alert(1)",
        "path": "javascript:alert(1)",
        "report": "javascript:alert(1)/report.html",
        "passed": True,
        "encoding": "alibi",
        "artifact": "bias",
        "dtype": "fp32",
        "graph": "fused",
        "max_positions": 8,
        "worst_max_abs": {"float64": 0.5},
        "worst_ratio": {"float64": 0.12},
        "bytes": {"model": 1, "folder": 1},
        "build_seconds": 1.0,
        "runtimes": [],
        "origin": {},
    }
    index = {"artifacts": [entry], "versions": {}, "path": str(tmp_path), "passed": 1, "failed": 0, "created": "now"}
    index["last_build"] = {"wall_seconds": None, "jobs": None}
    text = render_index(index)
    hrefs = re.findall(r'href="([^"]*)"', text)
    assert hrefs and all(h.startswith("./") and ":" not in h.split("/")[1] for h in hrefs), hrefs
    assert "5.00e-01 (0.12 of allowed)" in text  # the error next to its share of the allowance
