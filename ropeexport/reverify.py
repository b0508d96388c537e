"""Re-verification of an existing artifact folder (``ropeexport verify DIR``).

The manifest is checked first: its schema, its fields, and every file's sha256. A missing, truncated or edited file
is bad input (SpecError), not a verification failure: the artifact is not the one that was built. Then the spec is
rebuilt from the manifest, the model is verified on this machine's runtimes, and fresh reports replace the old ones.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from ropeexport.build import MANIFEST_SCHEMA, model_facts, versions
from ropeexport.errors import SpecError
from ropeexport.export.onnx_io import sha256
from ropeexport.report import report_dict, write_reports
from ropeexport.runtimes import check_runtime_names
from ropeexport.spec import spec_from_dict
from ropeexport.verify.core import verify_artifact

MANIFEST_FIELDS = ("schema", "name", "encoding", "artifact", "spec", "inputs", "outputs", "opset", "graph", "files")


@dataclass(frozen=True)
class VerifyResult:
    """A re-verified artifact: its folder, verdict and fresh report."""

    path: Path
    passed: bool
    report: dict[str, Any]


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of an artifact folder, with its schema and fields checked; else SpecError."""
    path = folder / "manifest.json"
    if not folder.is_dir():
        raise SpecError("DIR", f"{str(folder)!r} is not a folder")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        raise SpecError("DIR", f"{str(folder)!r} has no readable manifest.json: not a ropeexport artifact") from None
    except UnicodeDecodeError:
        raise SpecError("manifest.json", "is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise SpecError("manifest.json", f"is not valid JSON: {exc}") from None
    if not isinstance(manifest, dict):
        raise SpecError("manifest.json", "must be a JSON object")
    if manifest.get("schema") != MANIFEST_SCHEMA:
        raise SpecError("manifest.json", f"schema {manifest.get('schema')!r} is not {MANIFEST_SCHEMA!r}")
    missing = [f for f in MANIFEST_FIELDS if f not in manifest]
    if missing:
        raise SpecError("manifest.json", f"missing field(s) {', '.join(missing)}")
    if not isinstance(manifest["files"], dict) or "model.onnx" not in manifest["files"]:
        raise SpecError("manifest.json", "files must map each model file to its sha256, model.onnx included")
    return manifest


def check_files(folder: Path, files: dict[str, str]) -> None:
    """Every file the manifest lists exists with its recorded sha256; else SpecError naming the file."""
    for name, digest in files.items():
        path = folder / name
        if not path.is_file():
            raise SpecError(f"files.{name}", f"{str(path)!r} is missing")
        if sha256(path) != digest:
            raise SpecError(f"files.{name}", "sha256 differs from the manifest: the file changed after it was built")


def check_spec(folder: Path, manifest: dict[str, Any]) -> None:
    """The manifest's spec (not hashed) must equal the spec embedded in the model (hashed), field by field."""
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    meta = {p.key: p.value for p in model.metadata_props}
    try:
        embedded = json.loads(meta["ropeexport.spec"])
    except (KeyError, json.JSONDecodeError):
        raise SpecError("model.onnx", "carries no ropeexport.spec metadata: not a ropeexport artifact") from None
    spec = manifest["spec"]
    if not isinstance(spec, dict):
        raise SpecError("manifest.json", "spec must be a table of fields")
    for key in sorted(set(spec) | set(embedded)):
        if spec.get(key) != embedded.get(key):
            raise SpecError(
                f"manifest.json spec.{key}", f"is {spec.get(key)!r} but the model was built with {embedded.get(key)!r}"
            )
    for key in ("name", "encoding", "artifact"):
        if manifest[key] != embedded.get(key):
            raise SpecError(
                f"manifest.json {key}", f"is {manifest[key]!r} but the model's spec says {embedded.get(key)!r}"
            )


def check_folder(folder: Path) -> dict[str, Any]:
    """The manifest of an artifact folder whose files all match their hashes and spec; else SpecError."""
    manifest = read_manifest(folder)
    check_files(folder, manifest["files"])
    check_spec(folder, manifest)
    return manifest


def verify_folder(
    folder: str | Path,
    runtimes: list[str] | None = None,
    atol: dict[str, float] | None = None,
    rtol: dict[str, float] | None = None,
    manifest: dict[str, Any] | None = None,
) -> VerifyResult:
    """Check hashes, verify the artifact again on this machine, and replace its reports.

    ``manifest``: what ``check_folder`` already returned for this folder (a tree checks every folder first).
    """
    folder = Path(folder)
    manifest = manifest or check_folder(folder)
    runtimes = check_runtime_names(runtimes or ["ort"])
    spec = spec_from_dict(manifest["spec"], "manifest.json spec")
    verification = verify_artifact(spec, folder / "model.onnx", runtimes, atol=atol, rtol=rtol)
    facts = model_facts(onnx.load(str(folder / "model.onnx"), load_external_data=False))
    report = report_dict(spec, verification, versions(), manifest["files"], facts)
    # Reports are written beside each other in a temporary folder, then moved over the old ones.
    with tempfile.TemporaryDirectory(dir=folder, prefix=".reports.") as scratch:
        for name in write_reports(Path(scratch), report):
            os.replace(Path(scratch) / name, folder / name)
    return VerifyResult(folder, verification.passed, report)
