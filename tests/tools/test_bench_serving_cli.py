"""tools/bench_serving.py's command line without running a benchmark: ``--entries`` and the reuse of what is
computed, not timed (the float64 truth, the dynamo export) from a kept ``--work`` folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.toolmod import tool

BENCH = tool("bench_serving")  # puts tools/ on sys.path and imports tools/serving, whose cli module is:
cli = sys.modules["serving.cli"]


def test_an_unknown_entry_is_refused_naming_the_allowed_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        BENCH.main(["--out", "/tmp/never-written", "--entries", "ours-gqa", "ours-gpa"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--entries: 'ours-gpa' is not an entry" in error and "og-builder-int4" in error


def _fake_run(calls: list[Any]) -> Any:
    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        job = json.loads(Path(argv[argv.index("--job") + 1]).read_text())
        Path(job["result"]).write_text(json.dumps({"ran": len(calls)}))
        return subprocess.CompletedProcess(argv, 0, "", "")

    return run


# (reuse, the job the second call gives, processes run in all): a result is read back only when asked and only for
# the very job that wrote it
REUSE = [(True, {"n": 1}, 1), (True, {"n": 2}, 2), (False, {"n": 1}, 2)]


@pytest.mark.parametrize(("reuse", "second", "runs"), REUSE)
def test_a_result_is_reused_only_for_the_same_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reuse: bool, second: dict[str, int], runs: int
) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(cli.subprocess, "run", _fake_run(calls))
    first = cli.worker("truth", {"n": 1}, tmp_path, "small", reuse=reuse)
    again = cli.worker("truth", second, tmp_path, "small", reuse=reuse)
    assert first == {"ran": 1} and len(calls) == runs
    assert again == {"ran": runs}
    assert all(argv[0] == sys.executable for argv in calls)
