"""The one pipeline every artifact kind is built and verified by: spec -> files -> verification -> report -> store.

A kind (``Kind``: encoding artifacts, blocks from a checkpoint layer, decoders) supplies the stages that differ:
what it writes and how it verifies (``build`` / ``verify``), how its report reads (``render``), its line in the
tree's index (``entry``) and how two of its reports compare (``diff``). Everything else is here once: the store's
atomic write, the manifest and its hashes, the reports, the results. Stages meet only through files and plain
values: a kind's ``build`` writes ``model.onnx`` and verification opens it through a runner, never through the
export code.
"""

from __future__ import annotations

import importlib.metadata
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ropeexport.report import failed_page, write_reports
from ropeexport.report.diff_result import ReportDiff
from ropeexport.report.views import DecoderReport, EncodingReport
from ropeexport.results import JsonObject
from ropeexport.store import Store, read_object, replace_reports
from ropeexport.version import __version__


class Stage(Protocol):
    """``stage(name)``: a stage started; ``stage(name, done, total)``: ``done`` of its ``total`` steps finished."""

    def __call__(self, stage: str, done: int | None = None, total: int | None = None, /) -> None:
        """Told as the build or the verification reaches ``stage``."""


Renderer = Callable[[dict[str, Any]], str]


def versions() -> dict[str, str | None]:
    """Versions of ropeexport and the libraries an artifact depends on (None where not installed)."""
    out: dict[str, str | None] = {"ropeexport": __version__}
    for package in ("torch", "onnx", "onnxruntime", "onnxruntime-gpu", "numpy", "tensorrt"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = None
    return out


@dataclass
class Outcome:
    """What a kind's ``build`` or ``verify`` stage returns: the verdict, report.json's content, and (from ``build``)
    the kind's manifest fields (the store adds schema, name and the files' hashes).
    """  # noqa: D205

    passed: bool
    report: dict[str, Any]
    manifest: dict[str, Any] = field(default_factory=dict)


class Kind(Protocol):
    """One kind of artifact folder: the stages that differ between kinds (module doc).

    ``build(spec, folder, stage)`` writes the artifact's files (model, extras; not the reports) into ``folder`` and
    returns its Outcome; ``verify(spec, folder, manifest)`` runs the artifact in ``folder`` again. ``spec_of`` rebuilds
    the spec a manifest records, after checking the folder's model against it (ArtifactError on damage).
    """

    name: str

    def owns(self, manifest: Mapping[str, Any]) -> bool:
        """True for a manifest of this kind's artifacts."""
        ...

    def identity(self, spec: Any) -> dict[str, object]:
        """What besides the spec makes an artifact this one (a decoder's weights: the checkpoint read), recorded at
        the top of its manifest and compared by the store before a rebuild replaces it.
        """  # noqa: D205
        ...

    def spec_of(self, folder: Path, manifest: Mapping[str, Any]) -> Any:
        """The spec the folder was built from, checked against its (hashed) model."""
        ...

    def build(self, spec: Any, folder: Path, stage: Stage) -> Outcome:
        """Write and verify the artifact of ``spec`` into ``folder``."""
        ...

    def verify(self, spec: Any, folder: Path, manifest: Mapping[str, Any], stage: Stage) -> Outcome:
        """Verify the artifact in ``folder`` again on this machine."""
        ...

    def renderers(self) -> dict[str, Renderer]:
        """{file name: render(report) -> text} of the human-readable reports (report.md, report.html)."""
        ...

    def entry(self, folder: Path, out: Path, manifest: Mapping[str, Any], report: Mapping[str, Any]) -> dict[str, Any]:
        """The folder's line in the tree's index (``tree.index_dict``'s fields)."""
        ...

    def owns_report(self, report: Mapping[str, Any]) -> bool:
        """True for a report.json of this kind."""
        ...

    def check_report(self, report: dict[str, Any], which: str) -> dict[str, Any]:
        """The report with the fields ``diff`` reads checked (ArtifactError naming ``which`` on damage)."""
        ...

    def diff_fields(self, report: Mapping[str, Any]) -> set[str]:
        """The names ``diff --across`` may take for this kind's reports."""
        ...

    def diff(self, old: dict[str, Any], new: dict[str, Any], max_growth: float, across: list[str]) -> ReportDiff:
        """NEW against OLD: rows, regressions, notes."""
        ...


class _Verified:
    """What a build's and a verification's results share: truth as the verdict, and the runtimes skipped."""

    passed: bool
    report: JsonObject

    def __bool__(self) -> bool:
        return self.passed

    @property
    def encoding_report(self) -> EncodingReport:
        """``report`` read through its typed view (``report.views``): an encoding artifact's (ArtifactError on a
        decoder's).
        """  # noqa: D205
        return EncodingReport(self.report)

    @property
    def decoder_report(self) -> DecoderReport:
        """``report`` read through its typed view (``report.views``): a decoder's (ArtifactError on another's)."""
        return DecoderReport(self.report)

    @property
    def skipped(self) -> dict[str, str]:
        """Runtimes that could not run here, with the reason: ``passed`` says nothing about them (the CLI exits 3)."""
        return {r["name"]: r.get("reason", "") for r in self.report.get("runtimes", []) if r["status"] == "skipped"}


@dataclass(frozen=True)
class BuildResult(_Verified):
    """One built artifact: where it is, whether it verified, and its report (report.json's content).

    ``kept``: when this build failed verification and ``name`` held a verified artifact, that artifact stays in place
    at ``kept`` and this build went to ``path`` = ``OUT/_failed/NAME`` (``store`` module doc); else None.
    """

    name: str
    path: Path
    passed: bool
    report: JsonObject
    seconds: float
    kept: Path | None = None

    def to_dict(self) -> dict[str, object]:
        """The result as plain data: name, path, passed, kept, seconds and the report."""
        return {"name": self.name, "path": str(self.path), "passed": self.passed,
                "kept": None if self.kept is None else str(self.kept), "seconds": self.seconds,
                "report": self.report}  # fmt: skip


@dataclass(frozen=True)
class VerifyResult(_Verified):
    """A re-verified artifact: its folder, verdict, fresh report, and ``stored``, the report it replaced."""

    path: Path
    passed: bool
    report: JsonObject
    stored: JsonObject = field(default_factory=dict)
    seconds: float = 0.0
    resumed: bool = False  # verified by an earlier run of a tree that stopped (``journal``): its report kept

    def to_dict(self) -> dict[str, object]:
        """The result as plain data: path, passed, seconds and the fresh report (and ``resumed``, when it was)."""
        return {"path": str(self.path), "passed": self.passed, "seconds": self.seconds, "report": self.report,
                **({"resumed": True} if self.resumed else {})}  # fmt: skip


def _quiet(*_: Any) -> None:
    pass


def build(
    kind: Kind,
    spec: Any,
    out_dir: str | Path,
    replace: bool = False,
    origin: Mapping[str, Any] | None = None,
    sources: Mapping[str, str] | None = None,
    stage: Stage | None = None,
) -> BuildResult:
    """Build, verify and report ``spec`` into ``out_dir/spec.name`` through the store (whole or not at all).

    ``origin`` (what asked for the artifact: a preset, a config file, a checkpoint) and ``sources`` (the config key
    each spec field came from) go into the manifest's ``build`` record. ``stage`` is told each stage as it starts.
    ``replace``: replace an artifact of the same name built from another spec (else SpecError naming the field).
    """
    start = time.perf_counter()
    stage = stage or _quiet
    store = Store(Path(out_dir))
    identity = kind.identity(spec)
    with store.draft(spec.name, spec.to_dict(), replace, identity=identity) as draft:
        outcome = kind.build(spec, draft.path, stage)
        stage("report")
        write_reports(draft.path, with_layers(outcome.report, origin), kind.renderers())
        record = dict(outcome.manifest) | identity
        record["build"] = {"origin": dict(origin or {}), "sources": dict(sources or {}),
                           "seconds": round(time.perf_counter() - start, 3)} | record.get("build", {})  # fmt: skip
        committed = draft.commit(record, outcome.passed)
    return BuildResult(spec.name, committed.path, outcome.passed, outcome.report, time.perf_counter() - start,
                       committed.kept)  # fmt: skip


def reverify(
    kind: Kind, folder: Path, manifest: Mapping[str, Any], spec: Any, stage: Stage | None = None
) -> VerifyResult:
    """Verify an artifact folder again and replace its reports; the result keeps the report it replaced.

    The folder is checked already: its hashes (``store.read_manifest``, ``check_files``) and ``spec``, what
    ``kind.spec_of`` rebuilt from the manifest and checked against the model. The two halves apart: ``check_again``
    (what a Ray task runs, ``ropeexport.fanout``) and ``store_outcome`` (what the process that holds the folder's
    lock writes).
    """
    start = time.perf_counter()
    stored = stored_report(folder)
    outcome = check_again(kind, folder, manifest, spec, stage)
    return store_outcome(kind, folder, outcome, stored, time.perf_counter() - start)


def check_again(kind: Kind, folder: Path, manifest: Mapping[str, Any], spec: Any,
                stage: Stage | None = None) -> Outcome:  # fmt: skip
    """The artifact in ``folder`` verified again (``kind.verify``), its report given the layers its build recorded;
    nothing written.
    """  # noqa: D205
    outcome = kind.verify(spec, folder, manifest, stage or _quiet)
    build = manifest.get("build")
    with_layers(outcome.report, build.get("origin") if isinstance(build, Mapping) else None)
    return outcome


def store_outcome(kind: Kind, folder: Path, outcome: Outcome, stored: dict[str, Any], seconds: float) -> VerifyResult:
    """``outcome``'s reports written over the folder's (``store.replace_reports``); the result keeps ``stored``."""
    texts = {"report.json": _json_text(outcome.report)} | {
        name: _rendered(render, outcome.report, name) for name, render in kind.renderers().items()
    }
    replace_reports(folder, texts)
    return VerifyResult(folder, outcome.passed, outcome.report, stored, round(seconds, 2))


LAYER_KEYS = ("model_type", "layer_types", "layers", "no_rope_layers")


def with_layers(report: dict[str, Any], origin: Mapping[str, Any] | None) -> dict[str, Any]:
    """``report`` with ``layers``: which layers of the model its config describes use this artifact's encoding (and
    which use none), when the request said (``requests.from_hf_config``); the reports' headline says it.
    """  # noqa: D205
    if isinstance(origin, Mapping) and origin.get("layers"):
        report["layers"] = {k: origin[k] for k in LAYER_KEYS if k in origin}
    return report


def stored_report(folder: Path) -> dict[str, Any]:
    """The folder's report.json as stored ({} when it does not read)."""
    return read_object(folder / "report.json", "report.json") or {}


def _json_text(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"


def _rendered(render: Renderer, report: dict[str, Any], name: str) -> str:
    try:
        return render(report)
    except Exception as exc:  # noqa: BLE001 - a renderer that fails must not cost the verdict (report.json has it)
        return failed_page(report, name, exc)
