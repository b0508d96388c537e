"""``verify TREE`` stopped and run again (``ropeexport.journal``), without Ray: the rerun keeps what the stopped run
verified when nothing it depends on changed, and verifies it again when something did; a finished run leaves no
journal. (Killed drivers, on Ray: ``test_fanout.py``.)
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import ropeexport as rx
from ropeexport.journal import JOURNAL


class Stop(Exception):
    """Raised by the first run's ``on_done``: the run stops once its first artifact has landed."""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("tree") / "tree"
    for heads in (2, 3):
        rx.build(rx.spec("alibi", num_heads=heads, head_dim=4, max_positions=16), tree)
    return tree


def _edit_report(tree: Path, name: str) -> None:
    (tree / name / "report.json").write_text((tree / name / "report.json").read_text() + " ")


# (what changes between the stopped run and the rerun, the rerun's runtimes, whether the stopped run's artifact is kept)
CHANGES: list[tuple[str, Callable[[Path, str], None] | None, list[str] | None, bool]] = [
    ("nothing", None, None, True),
    ("its report edited", _edit_report, None, False),
    ("other runtimes", None, ["ort", "onnx-reference"], False),
]


@pytest.mark.parametrize(("change", "runtimes", "kept"), [c[1:] for c in CHANGES], ids=[c[0] for c in CHANGES])
def test_a_stopped_tree_verify_is_resumed_only_where_nothing_changed(change: Callable[[Path, str], None] | None,
                                                                     runtimes: list[str] | None, kept: bool,
                                                                     built: Path, tmp_path: Path) -> None:  # fmt: skip
    tree = tmp_path / "tree"
    shutil.copytree(built, tree)
    landed: list[str] = []

    def stop(result: rx.VerifyResult, seconds: float) -> None:
        landed.append(result.path.name)
        raise Stop

    with pytest.raises(Stop):
        rx.verify(tree, on_done=stop)
    (first,) = landed
    assert list(json.loads((tree / JOURNAL).read_text())["done"]) == [first]
    if change is not None:
        change(tree, first)
    results = rx.verify(tree, runtimes=runtimes)
    assert [r.path.name for r in results if r.resumed] == ([first] if kept else [])
    assert all(r.passed for r in results) and len(results) == 2
    assert not (tree / JOURNAL).exists()  # finished: the next verify verifies every artifact
