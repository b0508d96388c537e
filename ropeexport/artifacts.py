"""Every kind of artifact folder, listed once: the only module that knows them all (as ``catalog`` knows the families).

A kind (``pipeline.Kind``) is claimed by its manifest: the first kind in ``kinds()`` whose ``owns(manifest)`` is true
(a checkpoint layer's block before the encoding artifacts, which claim every manifest that is not a decoder's). The
tree's index, ``verify`` and ``diff`` ask here, never "is this a decoder?" themselves. Adding a kind is its module and
one line in ``kinds``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropeexport.audits.optimizer import check
from ropeexport.decoder.kind import DecoderKind
from ropeexport.decoder.layer import LayerBlockKind
from ropeexport.encoding import EncodingKind
from ropeexport.errors import ArtifactError
from ropeexport.pipeline import Kind, Outcome, check_again
from ropeexport.store import (
    FAILED,
    MANIFEST,
    MANIFEST_SCHEMA,
    Store,
    read_artifact_json,
    read_manifest,
    read_object,
)
from ropeexport.tree import artifact_folders as tree_folders
from ropeexport.tree import damaged_entry, index_dict, write_index_files


def kinds(**settings: Any) -> list[Kind]:
    """Every kind, in claiming order; ``settings`` go to the kinds that take them (runtimes, atol, rtol: encoding
    artifacts and blocks; runtimes, eager, on_scenario: decoders).
    """  # noqa: D205
    encoding = {k: v for k, v in settings.items() if k in ("runtimes", "atol", "rtol")}
    decoder = {k: v for k, v in settings.items() if k in ("runtimes", "eager", "on_scenario")}
    # every verify says what ONNX Runtime's optimizer did to the rotations: the audit's reading, handed down
    return [LayerBlockKind(**encoding, optimizer=check),
            DecoderKind(eager=decoder.get("eager"), on_scenario=decoder.get("on_scenario"),
                        runtimes=decoder.get("runtimes") or ["ort"], optimizer=check),
            EncodingKind(**encoding, optimizer=check)]  # fmt: skip


def kind_of(manifest: Mapping[str, Any], **settings: Any) -> Kind:
    """The kind that claims ``manifest`` (module doc); ArtifactError when none does (an audit's report folder)."""
    kind = next((k for k in kinds(**settings) if k.owns(manifest)), None)
    if kind is None:
        raise ArtifactError("manifest.json", f"artifact {manifest.get('artifact')!r} is no kind of artifact ropeexport "
                            "builds or verifies (an audit's report folder is re-made by auditing again)")  # fmt: skip
    return kind


def artifact_folders(out: Path, damaged: bool = False) -> list[Path]:
    """``tree.artifact_folders`` less the folders no kind claims (an audit's report folder in the tree): what the
    index lists and ``verify`` of a tree verifies.
    """  # noqa: D205
    kept = []
    for folder in tree_folders(out, damaged):
        manifest = read_object(folder / MANIFEST, MANIFEST)
        # Only a well-formed manifest naming another artifact (an audit's) is passed over; one whose "artifact"
        # is missing or not a string is a damaged artifact of ours, listed as such.
        if manifest is not None and manifest.get("schema") == MANIFEST_SCHEMA:
            if isinstance(manifest.get("artifact"), str) and not any(k.owns(manifest) for k in kinds()):
                continue
        kept.append(folder)
    return kept


def kind_of_report(report: Mapping[str, Any], which: str) -> Kind:
    """The kind a report.json belongs to; ArtifactError naming ``which`` (OLD or NEW) when none claims it."""
    kind = next((k for k in kinds() if k.owns_report(report)), None)
    if kind is None:
        raise ArtifactError(which, f"is not the report of an artifact ropeexport builds (schema "
                            f"{report.get('schema')!r}, artifact {report.get('artifact')!r})")  # fmt: skip
    return kind


def load_report(path: str | Path, which: str) -> tuple[Kind, dict[str, Any]]:
    """A report.json (or an artifact folder holding one), its kind, and the fields its diff reads checked; else
    ArtifactError naming OLD or NEW.

    Read strictly (``inputs.read_json``): a regular file of sane size, UTF-8, no NaN or Infinity (ropeexport writes
    neither: infinite errors are null), bounded nesting and integers.
    """  # noqa: D205
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    report = read_artifact_json(path, which)
    if not isinstance(report, dict):
        raise ArtifactError(which, f"{str(path)!r} is not a ropeexport report (a JSON object)")
    kind = kind_of_report(report, which)
    return kind, kind.check_report(report, which)


def entry(folder: Path, out: Path) -> dict[str, Any]:
    """A folder's line in the index; a damaged one (any shape of damage in files we did not just write) is listed as
    damaged, saying why, never fatal.
    """  # noqa: D205
    manifest = read_object(folder / MANIFEST, MANIFEST)
    if manifest is None or manifest.get("schema") != MANIFEST_SCHEMA:
        if (folder / "decoder.json").is_file() and not (folder / MANIFEST).exists():
            why = "a decoder written by a ropeexport before 0.2 (no manifest.json): build it again"
        else:
            why = "manifest.json is not a ropeexport manifest (damaged)"
        return damaged_entry(folder, out, why)
    report = read_object(folder / "report.json", "report.json") or {}
    try:
        line = kind_of(manifest).entry(folder, out, manifest, report)
    except Exception as exc:  # noqa: BLE001 - any shape of damage in a file we did not just write: listed, never fatal
        return damaged_entry(folder, out, f"manifest.json or report.json is damaged ({type(exc).__name__}: {exc})")
    failed = out / FAILED / folder.name
    if (failed / "report.html").is_file():  # a rebuild that failed verification, kept beside the verified artifact
        line["failed_rebuild"] = os.path.relpath(failed / "report.html", out)
    return line


def write_index(out: Path, wall_seconds: float | None = None, jobs: int | None = None) -> dict[str, Any]:
    """Write ``out/index.json`` and ``out/index.html`` for every artifact present (``tree``); return the index.

    Under the tree's index lock: two builds finishing at once each index the folders present when its turn comes,
    so the last index lists both.
    """
    out.mkdir(parents=True, exist_ok=True)
    with Store(out).index_lock():
        index = index_dict(out, [entry(f, out) for f in artifact_folders(out, damaged=True)], wall_seconds, jobs)
        write_index_files(out, index)
    return index


@dataclass(frozen=True)
class Reverify:
    """One artifact's verification as a Ray task takes it (``api.checks.verify`` with ``ray``): plain data; the
    kind and spec are made again where it runs, from the folder (on storage the workers share).
    """  # noqa: D205

    folder: Path
    runtimes: list[str]
    atol: dict[str, float]
    rtol: dict[str, float]


@dataclass(frozen=True)
class Reverified:
    """What a ``Reverify`` task hands back: the outcome (report.json's content, the verdict) and its seconds."""

    outcome: Outcome
    seconds: float


def reverify_task(job: Reverify) -> Reverified:
    """Verify ``job.folder`` again, writing nothing (``pipeline.check_again``): the caller, which holds the folder's
    lock, writes the reports.
    """  # noqa: D205
    start = time.perf_counter()
    manifest = read_manifest(job.folder)
    kind = kind_of(manifest, runtimes=job.runtimes, atol=job.atol, rtol=job.rtol, on_scenario=None)
    outcome = check_again(kind, job.folder, manifest, kind.spec_of(job.folder, manifest))
    return Reverified(outcome, time.perf_counter() - start)
