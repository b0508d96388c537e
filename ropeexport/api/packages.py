"""Serving packages of a built decoder for engines other than ONNX Runtime: ``rx.package`` and ``rx.verify_package``.

``package(decoder, out, engine="transformers.js")`` writes the folder transformers.js loads as it is
(``decoder.transformersjs``) at ``out``, through the store (``ropeexport.store``): whole or not at all, ``out``
either absent or a package written before (replaced when it came from the same decoder, or with ``replace``).
kill -9 at any moment leaves the package that was there (or nothing); a package whose check fails does not replace a
package that passed: it is kept apart at ``_failed/NAME`` beside ``out`` (``PackageResult.kept`` names the one left).
Its ``manifest.json`` ties it to the decoder: the decoder's name, folder, model sha256 and spec, and every file of
the package with its own sha256. The decoder's greedy tokens on two prompts go into ``reference.json``, and the
package is checked against them (``decoder.transformersjs_check``); report.json holds the verdict.

``verify_package(folder)`` checks the manifest and every file's hash, then runs the same check again.
Bad input (not a decoder folder, edited files, an architecture or dtype transformers.js cannot load, an ``out`` that
is something else) is an InputError naming the field; nothing is written.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropeexport.decoder.kind import check_folder
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.decoder.transformersjs import (
    ARTIFACT,
    ENGINE,
    ENGINES,
    loaded_as,
    model_file,
    refusal,
    text_only,
    why_loaded_as,
    write_package,
)
from ropeexport.decoder.transformersjs_check import REFERENCE, check, ort_greedy, reference_record
from ropeexport.errors import ArtifactError, InputError, SpecError, renamed
from ropeexport.graph.onnx_io import sha256
from ropeexport.manifest import check_files, is_artifact, read_artifact_json, read_manifest, read_object
from ropeexport.results import JsonObject
from ropeexport.store import MANIFEST, Store, replace_reports, write_json
from ropeexport.version import __version__


@dataclass(frozen=True)
class PackageResult:
    """A package written or verified again: its folder, the verdict, report.json's content (``engines``: each engine
    that ran or why it did not), and the seconds it took.
    """  # noqa: D205

    path: Path
    passed: bool
    report: JsonObject
    seconds: float = 0.0
    skipped: dict[str, str] = field(default_factory=dict)  # engine -> why it did not run here
    kept: Path | None = None  # a failed rebuild: the package that passed, left in place (``path`` is _failed/NAME)

    def __bool__(self) -> bool:
        return self.passed

    def to_dict(self) -> dict[str, object]:
        """The result as plain data."""
        return {"path": str(self.path), "passed": self.passed, "seconds": self.seconds, "report": self.report}


def _skipped(report: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("reason", "") for e in report["engines"] if e["status"] == "skipped"}


def _is_package(folder: Path) -> bool:
    """True for a folder holding a package's manifest (a rebuild replaces it): its artifact, spec and file list, as
    ``package`` writes them (a manifest.json of somebody else's that only says the artifact's name is not one).
    """  # noqa: D205
    manifest = read_object(folder / MANIFEST, MANIFEST)
    return (manifest is not None and manifest.get("artifact") == ARTIFACT and isinstance(manifest.get("spec"), dict)
            and isinstance(manifest.get("files"), dict))  # fmt: skip


def package(decoder: str | Path, out: str | Path, engine: str = ENGINE, replace: bool = False) -> PackageResult:
    """Write and check the ``engine`` package of the decoder folder ``decoder`` at ``out`` (module doc)."""
    start = time.perf_counter()
    if engine not in ENGINES:
        raise SpecError("for", f"must be one of {', '.join(ENGINES)}, got {engine!r}")
    decoder, out = Path(decoder), Path(out)
    try:
        record, spec = check_folder(decoder)  # the decoder's hashes and spec checked
    except InputError as error:  # it names the folder as "path": here it is DECODER
        raise renamed(error, "decoder" if error.field == "path" else error.field) from None
    why = refusal(spec)
    if why is not None:
        raise SpecError("decoder", f"{spec.name}: {why}")
    if out.exists() and not out.is_symlink() and not _is_package(out) and is_artifact(out):
        raise SpecError("out", f"{str(out)!r} holds another ropeexport artifact, not a {ENGINE} package")
    if out.exists() and not out.is_symlink() and not _is_package(out) and not is_artifact(out):
        raise SpecError("out", f"{str(out)!r} exists and is not a {ENGINE} package; give a new folder")
    decoder_model = decoder / "model.onnx"
    source = {"name": spec.name, "path": str(decoder.resolve()), "model_sha256": sha256(decoder_model)}
    store = Store(out.parent)
    with store.draft(out.name, {"decoder": source["model_sha256"], "engine": engine}, replace, ours=_is_package,
                     field="out", tree=False) as draft:  # fmt: skip
        names = write_package(decoder, spec, record, draft.path)
        runs = ort_greedy(decoder_model, spec)  # the decoder's own tokens
        reference = reference_record(runs)
        write_json(draft.path / REFERENCE, reference)
        report = _report(draft.path, spec, source, reference, start)
        write_json(draft.path / "report.json", report)
        manifest = {"artifact": ARTIFACT, "engine": engine, "ropeexport": __version__,
                    "spec": {"decoder": source["model_sha256"], "engine": engine}, "decoder": source | {
                        "spec": spec.to_dict()}, "package_files": [*names, REFERENCE],
                    "model_type": _model_type(spec)}  # fmt: skip
        # a package that failed its check never replaces one that passed (the store keeps it at _failed/NAME)
        committed = draft.commit(manifest, report["passed"])
    return PackageResult(committed.path, report["passed"], report, round(time.perf_counter() - start, 2),
                         _skipped(report), committed.kept)  # fmt: skip


def _model_type(spec: DecoderSpec) -> dict[str, str | None]:
    """The manifest's and report's ``model_type``: the decoder's own, the one config.json says, why they differ (or
    None), and what a multi-axis (Qwen-VL) text decoder's package cannot do (``text_only``, or None).
    """  # noqa: D205
    return {"decoder": spec.model_type, "config": loaded_as(spec), "why": why_loaded_as(spec),
            "text_only": text_only(spec)}


def _report(
    folder: Path, spec: DecoderSpec, source: dict[str, Any], reference: dict[str, Any], start: float
) -> JsonObject:
    """report.json: the package's check (``transformersjs_check.check``) with what it was checked against."""
    verdict = check(folder, folder / model_file(spec), spec, reference["prompts"])
    return {"schema": "ropeexport.package-report/1", "artifact": ARTIFACT, "engine": ENGINE, "decoder": source,
            "model": model_file(spec), "model_type": _model_type(spec), **verdict,
            "seconds": round(time.perf_counter() - start, 2)}  # fmt: skip


def verify_package(folder: str | Path) -> PackageResult:
    """The package at ``folder`` checked again (module doc); its report.json replaced."""
    start = time.perf_counter()
    folder = Path(folder)
    manifest = read_manifest(folder, ("decoder", "engine"))
    if manifest.get("artifact") != ARTIFACT:
        raise ArtifactError("path", f"{str(folder)!r} is not a {ENGINE} package (it holds a "
                            f"{manifest.get('artifact')} artifact)")  # fmt: skip
    check_files(folder, manifest["files"])
    decoder = manifest["decoder"]
    if not isinstance(decoder, dict) or not isinstance(decoder.get("spec"), dict):
        raise ArtifactError(MANIFEST, "decoder must record the decoder's spec")
    spec = DecoderSpec.from_dict(decoder["spec"])
    reference = read_artifact_json(folder / REFERENCE, REFERENCE)
    if not isinstance(reference, dict) or not isinstance(reference.get("prompts"), list):
        raise ArtifactError(REFERENCE, "must hold the decoder's prompts and tokens")
    source = {k: decoder.get(k) for k in ("name", "path", "model_sha256")}
    with Store(folder.parent).reading(folder.name):
        report = _report(folder, spec, source, reference, start)
        replace_reports(folder, {"report.json": json.dumps(report, indent=2) + "\n"})  # the old one or the new
    return PackageResult(folder, report["passed"], report, round(time.perf_counter() - start, 2), _skipped(report))
