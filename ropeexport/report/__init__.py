"""Serialized results: ``report.json`` (schema ``ropeexport.report/2``), ``report.md`` and ``report.html``.

The JSON is the record; the Markdown (for a pull request) and the self-contained HTML (with plots) are rendered from
it alone, so ``ropeexport verify`` and ``ropeexport diff`` work on any machine from the JSON.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ropeexport.store import write_json
from ropeexport.verification.core import Verification

REPORT_SCHEMA = "ropeexport.report/2"


def spec_sha256(spec: dict[str, Any]) -> str:
    """Hash of the spec's canonical JSON: two reports of the same spec carry the same value."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def cpu_name() -> str:
    """The processor's model name (Linux /proc/cpuinfo), else what the platform module says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_name() -> str | None:
    """The first CUDA device's name, or None without a GPU (or without a CUDA build of torch)."""
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # a broken driver must not break a report
        return None


def environment(versions: dict[str, str | None]) -> dict[str, Any]:
    """Library versions plus python, CPU and GPU."""
    return versions | {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu": cpu_name(),
        "gpu": gpu_name(),
    }


def report_dict(
    spec: Any,
    verification: Verification,
    versions: dict[str, str | None],
    files: dict[str, str],
    model: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report: verdict, comparisons (contract fields first), per-position curves, properties, checks, context.

    ``model``: facts about the model file (``build.model_facts``: inputs and outputs with symbolic dims, opset,
    TensorRT verdicts per version), shown in the report so that it stands alone.
    """
    spec_fields = spec.to_dict()
    curves = [c.curve() for c in verification.comparisons]
    return {
        "schema": REPORT_SCHEMA,
        "name": spec.name,
        "encoding": spec.encoding,
        "artifact": spec.artifact,
        "passed": verification.passed,
        "comparisons": [c.to_dict() for c in verification.comparisons],
        "positions": [c for c in curves if c is not None],
        "properties": verification.properties,
        "tables": verification.tables,
        "guards": verification.guards,
        "runtimes": verification.runtimes,
        "coverage": verification.coverage,
        "probes": verification.probes,
        "spec": spec_fields,
        "spec_sha256": spec_sha256(spec_fields),
        "files": files,
        "environment": environment(versions),
        "model": model or {},
    }


def failed_page(report: dict[str, Any], name: str, exc: Exception) -> str:
    """The page written in place of a report renderer that failed: the verdict, why, and where the record is."""
    verdict = "PASS" if report.get("passed") else "FAIL"
    why = f"{type(exc).__name__}: {exc}"
    text = f"{verdict} {report.get('name')}: this page could not be rendered ({why}); see report.json\n"
    if name.endswith(".html"):
        import html

        text = f"<!doctype html><meta charset='utf-8'><pre>{html.escape(text)}</pre>"
    return text


def renderers() -> dict[str, Callable[[dict[str, Any]], str]]:
    """The encoding artifacts' report.md and report.html renderers."""
    from ropeexport.report.html import render_html
    from ropeexport.report.markdown import render_markdown

    return {"report.md": render_markdown, "report.html": render_html}


def write_reports(
    folder: Path, report: dict[str, Any], render: Mapping[str, Callable[[dict[str, Any]], str]] | None = None
) -> list[str]:
    """report.json and each rendered page (``render``: {file name: renderer}, default ``renderers()``) into
    ``folder``; returns the names written.
    """  # noqa: D205
    write_json(folder / "report.json", report)
    # The JSON is the record. A renderer that fails (a plot of values no axis can hold) must not cost the verdict:
    # the page then says what failed, and report.json still holds everything.
    pages = renderers() if render is None else render
    for name, page in pages.items():
        try:
            text = page(report)
        except Exception as exc:  # noqa: BLE001 - any renderer failure is reported in the file itself
            text = failed_page(report, name, exc)
        (folder / name).write_text(text, encoding="utf-8")
    return ["report.json", *pages]
