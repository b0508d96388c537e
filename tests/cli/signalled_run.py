"""A CLI build run in-process that a signal lands in, and a test after it.

Run only by ``tests/cli/test_signals.py``, in a pytest of its own: the name does not start with ``test_``, so the
suite never collects it. ``ROPEEXPORT_TEST_SIGNAL_DIR`` is the folder the outer test watches: ``reached`` appears
once the build is exporting (the signal is sent then), ``returned`` when the CLI call came back (the signal became
one call's exit code), ``after`` when the next test ran (the suite carried on).
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest

from tests.clirun import run

# Run alone (no folder to watch) it has nothing to report to.
pytestmark = pytest.mark.skipif("ROPEEXPORT_TEST_SIGNAL_DIR" not in os.environ,
                                reason="run by tests/cli/test_signals.py, which names the folder it watches")
WATCHED = Path(os.environ.get("ROPEEXPORT_TEST_SIGNAL_DIR", "."))


def test_an_in_process_build_waits_for_the_signal(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from ropeexport.catalog import recipe_for, recipes
    from ropeexport.families.rope.spec import RopeSpec

    kind = recipe_for(RopeSpec())

    def export(spec: RopeSpec) -> object:
        (WATCHED / "reached").write_text("exporting, inside the build's work folder")
        time.sleep(600)  # the signal lands here
        return kind.export(spec)

    monkeypatch.setitem(recipes(), ("rope", "rope"), dataclasses.replace(kind, export=export))
    small = ["--head-dim", "16", "--num-heads", "2", "--max-positions", "64", "--quiet"]
    code, _, err = run(["build", *small, "--out", str(WATCHED / "out")], capsys)
    (WATCHED / "returned").write_text(f"exit {code}: {err}")


def test_the_next_test_never_runs() -> None:
    (WATCHED / "after").write_text("ran")
