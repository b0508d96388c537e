"""What a tree's verification has done so far, so that a rerun after a stopped run skips it (issue 44).

``verify TREE`` (with ``--ray`` or without) keeps ``TREE/.verify-run.json`` while it runs: the run's settings (the
runtimes, the tolerances, the versions of ropeexport and of the libraries an artifact's verdict depends on) and, as
each artifact's fresh reports land, its folder's name, its verdict and the sha256 of the report.json written. A run
that finishes removes the file: the next ``verify`` verifies every artifact again (what verify is for). A run stopped
before the end (its driver killed, the machine gone) leaves it, and a rerun with the same settings takes each artifact
listed there whose report.json still hashes the same as done: its stored report is its result (``resumed``), nothing
run again. Other settings, or a report changed since, and the artifact is verified again.

The file is written by the one process that holds every folder's lock (the driver), replaced whole (a temporary
name, then renamed), so a killed driver leaves the previous version, never half of one; an entry is added only after
its folder's reports are written.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ropeexport.pipeline import versions

JOURNAL = ".verify-run.json"
SCHEMA = "ropeexport.verify-run/1"
SCRATCH = ".verify-run.tmp-"  # the journal's next version, before it is renamed


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class Journal:
    """A tree's verify run (module doc): ``done(folder)`` is the verdict a stopped run with these settings recorded
    for it (None: verify it); ``record(folder, passed)`` after its reports are written; ``finish()`` at the end.
    """  # noqa: D205

    def __init__(self, tree: Path, runtimes: list[str], atol: Mapping[str, float], rtol: Mapping[str, float]) -> None:
        self.path = tree / JOURNAL
        self.settings: dict[str, Any] = json.loads(json.dumps(
            {"runtimes": list(runtimes), "atol": dict(atol), "rtol": dict(rtol), "versions": versions()}))  # fmt: skip
        self.entries: dict[str, dict[str, Any]] = {}
        for stale in tree.glob(f"{SCRATCH}*"):  # a version a killed driver did not get to rename
            stale.unlink(missing_ok=True)
        try:
            stored = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            stored = None
        if isinstance(stored, dict) and stored.get("schema") == SCHEMA and stored.get("settings") == self.settings:
            done = stored.get("done")
            self.entries = {k: v for k, v in done.items() if isinstance(v, dict)} if isinstance(done, dict) else {}

    def done(self, folder: Path) -> bool | None:
        """The verdict recorded for ``folder`` when its report.json is still the one recorded, else None."""
        entry = self.entries.get(folder.name)
        if entry is None or not isinstance(entry.get("passed"), bool):
            return None
        return entry["passed"] if _digest(folder / "report.json") == entry.get("report_sha256") else None

    def record(self, folder: Path, passed: bool) -> None:
        """``folder``'s fresh reports are written: its verdict and report.json's hash kept (the file replaced)."""
        self.entries[folder.name] = {"passed": passed, "report_sha256": _digest(folder / "report.json")}
        text = json.dumps({"schema": SCHEMA, "settings": self.settings, "done": self.entries}, indent=1) + "\n"
        with tempfile.NamedTemporaryFile("w", dir=self.path.parent, prefix=SCRATCH, delete=False,
                                         encoding="utf-8") as scratch:  # fmt: skip
            scratch.write(text)
        os.replace(scratch.name, self.path)

    def finish(self) -> None:
        """The run verified every artifact: nothing left to resume."""
        self.path.unlink(missing_ok=True)
