"""Serialized results: ``report.json`` (and, as later stages land, Markdown and HTML)."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

from ropeexport.verify.core import Verification

REPORT_SCHEMA = "ropeexport.report/1"


def report_dict(
    name: str, spec: dict[str, Any], verification: Verification, versions: dict[str, str | None], files: dict[str, str]
) -> dict[str, Any]:
    """The report as a dict: ``passed``, ``comparisons`` (contract fields first), tables, runtimes, probes."""
    return {
        "schema": REPORT_SCHEMA,
        "name": name,
        "passed": verification.passed,
        "comparisons": [c.to_dict() for c in verification.comparisons],
        "tables": verification.tables,
        "guards": verification.guards,
        "runtimes": verification.runtimes,
        "coverage": verification.coverage,
        "probes": verification.probes,
        "spec": spec,
        "files": files,
        "environment": versions | {"python": platform.python_version(), "machine": platform.machine()},
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write JSON deterministically (sorted keys are not used: the order above is the reading order)."""
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
