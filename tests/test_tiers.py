"""The test tiers (docs/how-to/test-suite.md): ``pytest -m fast`` is large enough to mean something, and
tests/conftest.py refuses a fast test that is also slow or builds a whole decoder before anything runs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOOR = 600  # issue 38: the fast tier holds at least this many tests


def _collect(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=folder, capture_output=True, text=True, timeout=300)  # fmt: skip


def test_the_fast_tier_holds_at_least_600_tests() -> None:
    proc = _collect(ROOT, "-m", "fast")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    found = re.search(r"^(\d+)/\d+ tests collected", proc.stdout, re.M)
    assert found, proc.stdout[-500:]
    assert int(found.group(1)) >= FLOOR, f"{found.group(1)} fast tests, under the floor of {FLOOR}"


# (id, a planted test module, the fault the run is refused with; None: collected)
PLANTED = [
    ("fast-alone", "@pytest.mark.fast\ndef test_x():\n    pass\n", None),
    ("fast-and-slow", "@pytest.mark.fast\n@pytest.mark.slow\ndef test_x():\n    pass\n", "marked both fast and slow"),
    ("fast-with-a-decoder", "@pytest.mark.fast\ndef test_x(seeded_decoder):\n    pass\n",
     "marked fast but builds a whole decoder (seeded_decoder)"),
    ("fast-through-a-module-fixture",
     "@pytest.fixture(scope='module')\ndef built(tiny_checkpoint):\n    return tiny_checkpoint('llama')\n\n\n"
     "@pytest.mark.fast\ndef test_x(built):\n    pass\n", "marked fast but builds a whole decoder (tiny_checkpoint)"),
    ("slow-with-a-decoder", "@pytest.mark.slow\ndef test_x(seeded_decoder):\n    pass\n", None),
]  # fmt: skip


@pytest.mark.parametrize(("module", "fault"), [p[1:] for p in PLANTED], ids=[p[0] for p in PLANTED])
def test_the_suite_refuses_a_fast_test_that_breaks_the_tier(module: str, fault: str | None, tmp_path: Path) -> None:
    # The suite's own conftest in a folder of its own: the planted module is the only test it sees.
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "test_planted.py").write_text("import pytest\n\n\n" + module)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    fast: fast tier\n    slow: slow tier\n")
    proc = _collect(tmp_path)
    if fault is None:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "test_planted.py::test_x" in proc.stdout
    else:
        assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
        assert f"test_planted.py::test_x: {fault}" in proc.stderr, proc.stderr
