from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from ropeexport.report.markdown import md, render_markdown
from ropeexport.report.views import EncodingReport
from ropeexport.report.words import cosine, number, worst_location
from tests.report.sample_report import HOSTILE, built_rope_report, degraded_reports, sample_report

UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def cells(line: str) -> list[str]:
    """The cells of a GFM table row, split where a pipe is not escaped."""
    return [c.strip() for c in UNESCAPED_PIPE.split(line.strip())[1:-1]]


def table_after(text: str, heading: str) -> list[list[str]]:
    """Header and body rows of the first table after ``heading`` (separator row left out)."""
    lines = text.splitlines()
    start = lines.index(heading)
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            rows.append(cells(line))
        elif rows:
            break
    return [rows[0], *rows[2:]] if rows else []


def assert_tables_well_formed(text: str) -> None:
    """Every table row has as many cells as its header: no string broke a row."""
    width = None
    for line in text.splitlines():
        if not line.startswith("|"):
            width = None
            continue
        n = len(cells(line))
        width = width or n
        assert n == width, line


@pytest.fixture
def real_report() -> dict[str, Any]:
    return copy.deepcopy(built_rope_report())


# (input, Markdown): text that would be markup or end a table row is escaped.
ESCAPES = [
    ("query_out", "query_out"),  # intraword underscore: never emphasis, left readable
    ("_x_", "\\_x\\_"),
    ("a|b", "a\\|b"),
    ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
    ("sweep[0..2047]", "sweep\\[0..2047\\]"),
    ("*bold* `code` ~x~ #1", "\\*bold\\* \\`code\\` \\~x\\~ \\#1"),
    ("line 1\nline 2\r\n", "line 1 line 2"),
    ("a\\|b", "a\\\\\\|b"),
    ("R&D", "R&amp;D"),
]


@pytest.mark.parametrize(("text", "expected"), ESCAPES)
def test_md_escapes(text: str, expected: str) -> None:
    assert md(text) == expected


NUMBERS = [
    (None, "n/a"),
    (0.0, "0"),
    (2.384185791015625e-07, "2.38e-07"),
    (1e-05, "1e-05"),
    (268928, "268,928"),
    (float("inf"), "inf"),
    (True, "yes"),
    ("inf", "inf"),
]


@pytest.mark.parametrize(("value", "expected"), NUMBERS)
def test_number(value: Any, expected: str) -> None:
    assert number(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"), [(1.0, "1"), (1 - 3e-14, "1 - 3.0e-14"), (0.5, "0.500000"), (None, "n/a")]
)
def test_cosine(value: Any, expected: str) -> None:
    assert cosine(value) == expected


WORST = [
    (
        {"probe": "sweep", "batch": 0, "head": 1, "position": 5, "channel": 2},
        "probe sweep, batch 0, head 1, position 5, ",
    ),
    ({"probe": "decode", "query_position": 9, "key_position": 2}, "probe decode, query 9, key 2, distance 7"),
    ({"probe": "decode", "error": "RuntimeError: boom"}, "probe decode: RuntimeError: boom"),
    ({}, ""),
    (None, ""),
]


@pytest.mark.parametrize(("worst", "start"), WORST)
def test_worst_location_in_words(worst: Any, start: str) -> None:
    assert worst_location(worst).startswith(start)


def test_passing_report_verdict_first_and_no_failures() -> None:
    report = sample_report(passed=True)
    text = render_markdown(report)
    assert text.splitlines()[0] == "# ✅ PASS: rope-half-default-fp32-fused"
    assert "## What failed" not in text and "❌" not in text
    rows = table_after(text, "## Comparisons")
    assert len(rows) - 1 == len(EncodingReport(report).comparisons)
    assert rows[0][-2:] == ["worst at", "result"]
    assert rows[1][:3] == ["eager", "ort", "query_out"] and rows[1][-1] == "✅ PASS"
    assert "probe sweep\\[0..2047\\], batch 0, head 1, position 1510, channel 22" in rows[1]
    assert "Every comparison: atol 1e-05, rtol 1e-05" in text  # a shared tolerance is said once, not per row
    for heading in ("## Error by position", "## Properties", "## Tables", "## Guards", "## Runtimes"):
        assert heading in text
    assert "| long-term decay | ℹ️ info |" in text
    assert "| tensorrt | skipped | TensorRT is not installed (pip install tensorrt) |" in text
    assert_tables_well_formed(text)


def test_failing_report_calls_out_failures_before_the_tables() -> None:
    report = sample_report(passed=False)
    text = render_markdown(report)
    lines = text.splitlines()
    assert lines[0].startswith("# ❌ FAIL: rope ")
    failed = lines.index("## What failed")
    assert failed < lines.index("## Comparisons")
    bullets = [line for line in lines[failed + 1 : lines.index("## Comparisons")] if line.startswith("- ")]
    assert len(bullets) == 5  # one comparison over tolerance, one that raised, a table, a guard, a property
    assert bullets[0].startswith("- float64 vs ort: query_out: 1,234 of 268,928 elements beyond atol 1e-05")
    assert "position 2047" in bullets[0] and "actual 1.5, expected 1.19" in bullets[0]
    assert "the runtime raised on probe decode: RuntimeError:" in bullets[1]
    rows = table_after(text, "## Comparisons")
    assert len(rows) - 1 == len(EncodingReport(report).comparisons)
    raised = rows[4]
    assert raised[3:7] == ["n/a"] * 4 and raised[-1] == "❌ FAIL"  # null metrics, not a crash or a zero
    assert "| norm preservation | ❌ FAIL |" in text


def test_hostile_strings_are_escaped_everywhere() -> None:
    text = render_markdown(sample_report(passed=False))
    assert "<script" not in text.lower()
    assert md(HOSTILE) == "&lt;script&gt;alert(1)&lt;/script&gt; a\\|b"
    assert md(HOSTILE) in text
    assert "a|b" not in text  # every pipe from the report is escaped
    assert text.count("&lt;script&gt;") >= 9  # name, output, error, table, guard, property, runtime, tolerance, env...
    assert_tables_well_formed(text)


@pytest.mark.parametrize(("case", "report"), degraded_reports(), ids=[case for case, _ in degraded_reports()])
def test_degraded_reports_render(case: str, report: dict[str, Any]) -> None:
    text = render_markdown(report)
    assert text.startswith("# ")
    assert_tables_well_formed(text)
    if report.get("passed") is not True:
        assert text.splitlines()[0].startswith("# ❌ FAIL")


def test_missing_verdict_is_a_fail_with_a_reason() -> None:
    text = render_markdown({"name": "x"})
    assert text.startswith("# ❌ FAIL: x")
    assert "The report does not say it passed" in text


def test_real_report(real_report: dict[str, Any]) -> None:
    text = render_markdown(real_report)
    report = EncodingReport(real_report)
    assert text.splitlines()[0] == f"# ✅ PASS: {md(report.name)}"
    rows = table_after(text, "## Comparisons")
    assert len(rows) - 1 == len(report.comparisons) == 4  # {eager, float64} x {query_out, key_out}
    assert all(row[-1] == "✅ PASS" for row in rows[1:])
    assert "## Tables" in text and "## Guards" in text and "## Environment" in text
    assert_tables_well_formed(text)


def test_one_runtime_error_is_one_failure_naming_every_comparison_it_stopped() -> None:
    report = sample_report(passed=False)
    for c in report["comparisons"]:
        c.update(passed=False, max_abs=None, worst={"probe": "end", "error": "InvalidArgument: out of range"})
    text = render_markdown(report)
    bullets = [line for line in text.splitlines() if "the runtime raised" in line]
    assert len(bullets) == 1
    assert bullets[0].startswith("- eager vs ort: query_out, eager vs ort: key_out, float64 vs ort: query_out, ")
    assert bullets[0].endswith("the runtime raised on probe end: InvalidArgument: out of range.")
