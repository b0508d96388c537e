"""A decoder's report.md / report.html rows (``decoder.report``): the verdict cell of a call judged against a routing
its near ties allow names each flip, an indexer's with the key it took in and the key it left out.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

import pytest

from ropeexport.decoder.report import write_html, write_markdown

ROUTER = {"layer": 1, "row": 0, "slot": 39, "margin": 1.5e-3}
INDEXER = {"layer": 1, "row": 0, "slot": 68, "margin": 7.7e-4, "key_in": 22, "key_out": 17}  # fp16 deepseek_v32's

# (case, the call's flips and fields, the verdict cell)
CELLS: list[tuple[str, dict[str, Any], str]] = [
    ("none", {}, "ok"),
    ("a router's", {"routing_flips": [ROUTER]}, "ok; taken the other way: layer 1 row 0 slot 39 (margin 1.50e-03)"),
    ("an indexer's", {"routing_flips": [INDEXER]},
     "ok; taken the other way: layer 1 row 0 slot 68 indexer: key 22 in, key 17 out (margin 7.70e-04)"),
    ("both, a near tie too", {"routing_flips": [ROUTER, INDEXER], "near_ties": [0]},
     "near tie (rows [0]); taken the other way: layer 1 row 0 slot 39 (margin 1.50e-03); layer 1 row 0 slot 68 "
     "indexer: key 22 in, key 17 out (margin 7.70e-04)"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "call", "cell"), CELLS, ids=[c[0] for c in CELLS])
def test_a_calls_flips_are_named_in_its_verdict(case: str, call: dict[str, Any], cell: str,
                                                seeded_decoder: Path) -> None:  # fmt: skip
    report = json.loads((seeded_decoder / "report.json").read_text())  # a passing decoder's, its first call given
    first = report["scenarios"][0]["calls"][0]  # the flips (a dense decoder has none of its own)
    assert first["passed"] and not first["near_ties"] and not first["stale_cache"] and "routing_flips" not in first
    first.update(call)
    rows = [line for line in write_markdown(report).splitlines() if line.startswith(f"| {first['index']} | ")]
    assert rows and rows[0].endswith(f"| {cell} |"), rows
    assert escape(cell.split("; ")[-1]) in write_html(report)  # report.html: the same words, escaped
