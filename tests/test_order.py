"""The suite's longest-first order: ``tests/conftest.py``'s ``longest_first`` and ``tools/test_durations.py``, which
measures what it orders by (docs/how-to/test-suite.md)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import DURATIONS, longest_first
from tests.toolmod import tool

pytestmark = pytest.mark.fast  # pure functions on made-up test ids

ROOT = Path(__file__).resolve().parents[1]
DURATIONS_TOOL = tool("test_durations")

# (id, test ids in collection order, {file: seconds}, the order expected)
ORDERS = [
    ("longest-first", ["a.py::x", "b.py::x", "c.py::x"], {"a.py": 1, "b.py": 9, "c.py": 5},
     ["b.py::x", "c.py::x", "a.py::x"]),
    ("a-file-keeps-its-order", ["a.py::x", "a.py::y", "b.py::z", "a.py::w"], {"a.py": 9, "b.py": 1},
     ["a.py::x", "a.py::y", "a.py::w", "b.py::z"]),
    ("unmeasured-first", ["a.py::x", "new.py::x", "b.py::x"], {"a.py": 1, "b.py": 9},
     ["new.py::x", "b.py::x", "a.py::x"]),
    ("ties-keep-collection-order", ["b.py::x", "a.py::x"], {"a.py": 2, "b.py": 2}, ["b.py::x", "a.py::x"]),
    ("nothing-measured", ["b.py::x", "a.py::x", "b.py::y"], {}, ["b.py::x", "b.py::y", "a.py::x"]),
]


@pytest.mark.parametrize(("ids", "seconds", "expected"), [c[1:] for c in ORDERS], ids=[c[0] for c in ORDERS])
def test_files_run_longest_first(ids: list[str], seconds: dict[str, float], expected: list[str]) -> None:
    items = [SimpleNamespace(nodeid=i) for i in ids]
    longest_first(items, seconds)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == expected


REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_order" name="a" time="1.5"/>
<testcase classname="tests.test_order" name="b" time="2.25"/>
<testcase classname="tests.decoder.test_decoder.TestSomething" name="c" time="7"/>
<testcase classname="tests.gone" name="d" time="100"/>
</testsuite></testsuites>"""


def test_the_durations_are_summed_per_file(tmp_path: Path) -> None:
    (tmp_path / "tests" / "decoder").mkdir(parents=True)
    for name in ("tests/test_order.py", "tests/decoder/test_decoder.py"):
        (tmp_path / name).write_text("")
    report = tmp_path / "suite.xml"
    report.write_text(REPORT)
    # a class's tests count in its module; a test whose file is gone is left out
    expected = {"tests/decoder/test_decoder.py": 7.0, "tests/test_order.py": 3.75}
    assert DURATIONS_TOOL.file_seconds(report, tmp_path) == expected
    assert DURATIONS_TOOL.file_of("tests.gone", tmp_path) is None


def test_the_committed_durations_name_files_that_exist() -> None:
    """A renamed or removed file left in tests/durations.json would order nothing: the record is refreshed instead."""
    recorded = json.loads(DURATIONS.read_text())
    assert recorded["note"] and recorded["seconds"]
    missing = [path for path in recorded["seconds"] if not (ROOT / path).is_file()]
    assert not missing, f"tests/durations.json names files that are gone: {missing}; rerun tools/test_durations.py"
