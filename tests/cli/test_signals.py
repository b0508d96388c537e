"""SIGTERM and SIGINT stop the test suite, also while a test runs the CLI in-process.

``ropeexport.cli.main`` turns a signal into exit 143 or 130 (what a real ``ropeexport`` process does,
docs/reference/exit-codes.md); under pytest it then hands the signal to the suite's own handler
(tests/conftest.py), so the run stops instead of counting one call's exit code and carrying on. Each case runs a
pytest of its own on ``tests/cli/signalled_run.py`` and signals it while its in-process build is exporting.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INNER = Path(__file__).with_name("signalled_run.py")

# (signal, what the CLI call alone would have made of it)
SIGNALS = [("SIGTERM", "exit 143"), ("SIGINT", "exit 130")]


def _python_defaults() -> None:
    # A suite run in the background of a shell without job control ignores SIGINT, and a child keeps it ignored:
    # the inner pytest is given the defaults a terminal gives.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.parametrize(("name", "swallowed"), SIGNALS, ids=[s[0] for s in SIGNALS])
def test_a_signal_during_an_in_process_cli_run_stops_the_suite(name: str, swallowed: str, tmp_path: Path) -> None:
    env = os.environ | {"ROPEEXPORT_TEST_SIGNAL_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(INNER)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_python_defaults)  # fmt: skip
    assert proc.stdout is not None
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / "reached").exists():
            assert proc.poll() is None, f"the inner suite ended before its build exported: {proc.stdout.read()}"
            assert time.monotonic() < deadline, "the inner suite's build never reached its export"
            time.sleep(0.05)
        proc.send_signal(getattr(signal, name))
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    returned = tmp_path / "returned"
    assert not returned.exists(), f"the CLI call returned ({returned.read_text()}): {name} became its {swallowed}"
    assert not (tmp_path / "after").exists(), f"the suite carried on after {name}:\n{out}"
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert f"KeyboardInterrupt: {name}: the test run stops" in out, out  # the suite's handler, given the signal back
    # The build in flight unwound before the suite stopped: no work folder or lock left in its tree.
    assert sorted(p.name for p in (tmp_path / "out").glob(".*")) == []
