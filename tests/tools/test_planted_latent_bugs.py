"""tools/figures/planted-latent-bugs.json (docs/status/peers.md's table) against the planted bugs the tests hold.

A planted bug added to ``tests/audits/test_audit_latent.py`` (``PLANTED``), or one whose findings change, leaves the
rendered table stale until ``python tools/planted_latent_bugs.py`` is run again: this names the difference.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.audits.test_audit_latent import PLANTED

FIGURE = Path(__file__).resolve().parents[2] / "tools" / "figures" / "planted-latent-bugs.json"


def test_the_figures_planted_rows_are_the_planted_bugs_with_their_findings() -> None:
    rows = json.loads(FIGURE.read_text())["planted"]
    figure = [(r["case"], r["model"], sorted(f["name"] for f in r["findings"]), r["named"]) for r in rows]
    held = [(b.case, b.name, sorted(b.findings), True) for b in PLANTED]
    assert figure == held, "rerun python tools/planted_latent_bugs.py (docs/status/peers.md renders its table)"
