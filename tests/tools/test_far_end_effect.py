"""tools/far_end_effect.py's command line without measuring: a context it cannot run is one line, exit 2, nothing
written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.toolmod import tool

FAR = tool("far_end_effect")

# (--positions, why it is refused)
REFUSED = [("1000", "not a power of two"), ("2048", "under 4096")]


@pytest.mark.fast
@pytest.mark.parametrize(("positions", "why"), REFUSED, ids=["not-a-power-of-two", "under-4096"])
def test_a_context_it_cannot_run_is_one_line_and_exit_2(positions: str, why: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    out = tmp_path / "far.json"
    assert FAR.main(["--work", str(tmp_path / "work"), "--out", str(out), "--positions", positions]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --positions: must be a power of two of at least 4096, got {positions}"], err
    assert not out.exists() and not (tmp_path / "work").exists()
