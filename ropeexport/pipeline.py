"""The build pipeline: spec -> export -> runtime -> verify -> report, written atomically into ``DIR/NAME``.

Stages meet only through files and plain values: export writes ``model.onnx``; verification opens it through a
runner, never through the export code.
"""

from __future__ import annotations

import errno
import importlib.metadata
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from ropeexport.errors import SpecError
from ropeexport.graph.onnx_io import save_model, sha256
from ropeexport.inputs import read_json
from ropeexport.kinds import ArtifactKind
from ropeexport.report import report_dict, write_json, write_reports
from ropeexport.runtimes import check_runtime_names
from ropeexport.runtimes.base import NUMPY_OF_ONNX
from ropeexport.trt import trt_compat
from ropeexport.verification.core import Verification, verify_artifact
from ropeexport.verification.polygraphy_files import save_polygraphy_reference
from ropeexport.version import __version__

MANIFEST_SCHEMA = "ropeexport.manifest/1"
# Failures of the output folder itself (full, read-only, gone): reported as one line, never as a traceback.
WRITE_ERRORS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.EIO}


@dataclass(frozen=True)
class BuildResult:
    """One built artifact: where it is, whether it verified, and its report."""

    name: str
    path: Path
    passed: bool
    report: dict[str, Any]
    seconds: float

    @property
    def skipped(self) -> dict[str, str]:
        """Runtimes that could not run here, with the reason: ``passed`` says nothing about them (the CLI exits 3)."""
        return {r["name"]: r.get("reason", "") for r in self.report["runtimes"] if r["status"] == "skipped"}


def versions() -> dict[str, str | None]:
    """Versions of ropeexport and the libraries an artifact depends on (None where not installed)."""
    out: dict[str, str | None] = {"ropeexport": __version__}
    for package in ("torch", "onnx", "onnxruntime", "onnxruntime-gpu", "numpy", "tensorrt"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = None
    return out


def _io(values: Any) -> list[dict[str, Any]]:
    out = []
    for vi in values:
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in tt.shape.dim]
        out.append({"name": vi.name, "dtype": str(NUMPY_OF_ONNX[tt.elem_type]), "shape": dims})
    return out


def model_facts(model: onnx.ModelProto) -> dict[str, Any]:
    """Inputs and outputs (name, dtype, shape with symbolic dims), opset, and the TensorRT verdict per version."""
    return {
        "inputs": _io(model.graph.input),
        "outputs": _io(model.graph.output),
        "opset": next(o.version for o in model.opset_import if o.domain == ""),
        "trt_compat": trt_compat(model),
    }


def manifest_dict(spec: Any, model: onnx.ModelProto, files: dict[str, str]) -> dict[str, Any]:
    """The manifest: spec, inputs/outputs with symbolic dims, opset, graph style, versions, file hashes."""
    facts = model_facts(model)
    return {
        "schema": MANIFEST_SCHEMA,
        "name": spec.name,
        "encoding": spec.encoding,
        "artifact": spec.artifact,
        "spec": spec.to_dict(),
        "inputs": facts["inputs"],
        "outputs": facts["outputs"],
        "opset": facts["opset"],
        "graph": spec.graph,
        "versions": versions(),
        "files": files,
        "trt_compat": facts["trt_compat"],
    }


def check_target(out_dir: Path, name: str, spec: dict[str, Any] | None = None, replace: bool = False) -> Path:
    """``DIR/NAME``, refusing to replace a folder that is not a ropeexport artifact.

    Unless ``replace``, an artifact built from a spec other than ``spec`` (a dict as ``spec.to_dict()`` gives) is
    refused too; the same spec again is a rebuild and replaces silently.
    """
    target = out_dir / name
    for folder in (out_dir, *out_dir.parents):
        if folder.exists():
            if not folder.is_dir():
                raise SpecError("out_dir", f"{str(folder)!r} exists and is not a folder")
            break
    if target.exists() and not is_artifact(target):
        raise SpecError(
            "out_dir", f"{str(target)!r} exists and is not a ropeexport artifact; choose another `out_dir` or `name`"
        )
    if spec is not None and not replace and target.exists():
        old = _built_spec(target)
        differ = [k for k in sorted(set(old) | set(spec)) if old.get(k) != spec.get(k)]
        if differ:
            key = differ[0]
            raise SpecError(
                "name",
                f"{str(target)!r} holds an artifact built from another spec ({key}: {old.get(key)!r} there, "
                f"{spec.get(key)!r} now); give `replace` to replace it, or another `name` or `out_dir`",
            )
    return target


def _built_spec(folder: Path) -> dict[str, Any]:
    """The spec recorded in an artifact's manifest ({} when unreadable: then any new spec differs)."""
    try:
        manifest = read_json(folder / "manifest.json", "manifest.json")
    except SpecError:
        return {}
    spec = manifest.get("spec") if isinstance(manifest, dict) else None
    return spec if isinstance(spec, dict) else {}


def is_artifact(folder: Path) -> bool:
    """A folder holding a ropeexport manifest.json (its schema says so: another tool's manifest does not count)."""
    try:
        manifest = read_json(folder / "manifest.json", "manifest.json")  # never opens a FIFO
    except SpecError:
        return False
    return isinstance(manifest, dict) and manifest.get("schema") == MANIFEST_SCHEMA


def build_artifact(
    spec: Any,
    kind: ArtifactKind,
    out_dir: str | Path,
    runtimes: list[str] | None = None,
    atol: dict[str, float] | None = None,
    rtol: dict[str, float] | None = None,
    origin: dict[str, Any] | None = None,
    sources: dict[str, str] | None = None,
    stage: Callable[..., None] | None = None,
    replace: bool = False,
) -> BuildResult:
    """Export, run, verify and report one spec into ``out_dir/spec.name``; the folder appears whole or not at all.

    ``atol`` / ``rtol`` override the dtype's tolerances per output ({output or "": value}). ``origin`` (what asked
    for the artifact: a preset, a config file) and ``sources`` (the config key each spec field came from) go into the
    manifest's ``build`` record. ``stage`` is told each stage as it starts: export, reference, runtime, verify, report.
    ``replace``: replace an artifact of the same name even when it was built from another spec (else SpecError).
    """
    start = time.perf_counter()
    stage = stage or (lambda *_: None)
    out_dir = Path(out_dir)
    target = check_target(out_dir, spec.name, spec.to_dict(), replace)
    runtimes = check_runtime_names(runtimes or ["ort"])
    created = [p for p in (out_dir, *out_dir.parents) if not p.exists()]  # removed again if the build fails
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError("out_dir", f"cannot create {str(out_dir)!r}: {exc.strerror or exc}") from None
    # The PID in the name lets a later build tell a dead build's leftovers from a concurrent build's work.
    work = Path(tempfile.mkdtemp(prefix=f".{spec.name}.building.{os.getpid()}.", dir=out_dir))
    try:
        stage("export")
        model = kind.export(spec)
        names = save_model(model, work)
        files = {n: sha256(work / n) for n in names}
        verification: Verification = verify_artifact(
            spec, kind, work / "model.onnx", runtimes, atol=atol, rtol=rtol, stage=stage
        )
        stage("report")
        saved = onnx.load(str(work / "model.onnx"), load_external_data=False)
        report = report_dict(spec, verification, versions(), files, model_facts(saved))
        write_reports(work, report)
        for name in save_polygraphy_reference(spec, kind, work):  # hashed too: TensorRT is later compared against it
            files[name] = sha256(work / name)
        manifest = manifest_dict(spec, saved, files)
        engine_info = work / "model.engine.json"
        if engine_info.is_file():  # the TensorRT runner built and saved an engine (GPU hosts only)
            manifest["tensorrt"] = json.loads(engine_info.read_text())
            manifest["files"] |= {n: sha256(work / n) for n in ("model.engine", "model.engine.json")}
        manifest["build"] = {
            "origin": origin or {},
            "sources": sources or {},
            "seconds": round(time.perf_counter() - start, 3),
            "runtimes": runtimes,
        }
        write_json(work / "manifest.json", manifest)
        _room_for_the_index(out_dir)
        _replace(work, target)
    except BaseException as exc:
        shutil.rmtree(work, ignore_errors=True)
        for folder in created:  # innermost first; only folders this build made, and only when still empty
            if folder.exists() and not any(folder.iterdir()):
                folder.rmdir()
        if isinstance(exc, OSError) and exc.errno in WRITE_ERRORS:
            # The disk, not the spec: one line, and the tree as it was (the work folder is gone, an old artifact
            # of the same name is back in place).
            raise SpecError("out_dir", f"cannot write {str(out_dir)!r}: {exc.strerror}; nothing was changed") from None
        raise
    return BuildResult(spec.name, target, verification.passed, report, time.perf_counter() - start)


INDEX_MARGIN = 256 * 2**10  # an index entry is about 2 KiB; the margin leaves room for many and for the HTML


def _room_for_the_index(out_dir: Path) -> None:
    """Raise ENOSPC unless the tree can still hold a rewritten index once this artifact lands.

    The index is rewritten after the artifact moves in; on a disk that the artifact just filled, that would leave a
    folder the index does not list. Checking first keeps the two in step (nothing lands without room for both).
    """
    current = sum((out_dir / n).stat().st_size for n in ("index.json", "index.html") if (out_dir / n).is_file())
    if shutil.disk_usage(out_dir).free < 2 * current + INDEX_MARGIN:
        raise OSError(errno.ENOSPC, "No space left on device (no room to index the artifact)")


def _replace(work: Path, target: Path) -> None:
    """Move the finished folder into place; an older artifact of the same name is swapped out, then removed.

    If the new folder cannot be moved in, the old one is moved back: a failed rebuild never loses the artifact the
    tree had.
    """
    umask = os.umask(0)
    os.umask(umask)
    work.chmod(0o777 & ~umask)  # mkdtemp made it private; an artifact folder is as readable as any other
    for path in work.rglob("*"):  # and so is every file in it (onnx writes external data 0600)
        if path.is_file():
            path.chmod(0o666 & ~umask)
    if target.exists():
        old = target.with_name(f".{target.name}.old.{os.getpid()}.{time.time_ns()}")
        target.rename(old)
        try:
            work.rename(target)
        except BaseException:
            old.rename(target)
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        work.rename(target)


def clean_leftovers(out_dir: Path) -> list[str]:
    """Remove the hidden work folders of builds that died (kill -9, power loss) in ``out_dir``; their names.

    A work folder is ``.NAME.building.PID.RANDOM`` (or ``.NAME.old.PID.NS`` during a swap); one whose PID is still a
    running process may belong to a concurrent build and is left alone.
    """
    removed = []
    if not out_dir.is_dir():
        return removed
    for path in out_dir.iterdir():
        match = LEFTOVER.match(path.name)
        if not match or path.is_symlink() or not path.is_dir() or _alive(int(match.group("pid"))):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(path.name)
    return removed


LEFTOVER = re.compile(r"^\..+\.(?:building|old)\.(?P<pid>\d+)\.[^/]+$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True
