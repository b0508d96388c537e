"""Re-verification of an existing artifact folder (``ropeexport verify DIR``).

The manifest is checked first: its schema, its fields, and every file's sha256. A missing, truncated or edited file
is bad input (SpecError), not a verification failure: the artifact is not the one that was built. Then the spec is
rebuilt from the manifest, the model is verified on this machine's runtimes, and fresh reports replace the old ones.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ropeexport.catalog import kind_for, spec_from_dict
from ropeexport.errors import SpecError
from ropeexport.graph.onnx_io import sha256
from ropeexport.inputs import loads_json, read_json
from ropeexport.pipeline import MANIFEST_SCHEMA, model_facts, versions
from ropeexport.report import report_dict, write_reports
from ropeexport.runtimes import check_runtime_names
from ropeexport.verification.core import verify_artifact

MANIFEST_FIELDS = ("schema", "name", "encoding", "artifact", "spec", "inputs", "outputs", "opset", "graph", "files")


@dataclass(frozen=True)
class VerifyResult:
    """A re-verified artifact: its folder, verdict and fresh report."""

    path: Path
    passed: bool
    report: dict[str, Any]

    @property
    def skipped(self) -> dict[str, str]:
        """Runtimes that could not run here, with the reason: ``passed`` says nothing about them (the CLI exits 3)."""
        return {r["name"]: r.get("reason", "") for r in self.report["runtimes"] if r["status"] == "skipped"}


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of an artifact folder, with its schema and fields checked; else SpecError."""
    path = folder / "manifest.json"
    if folder.is_symlink():
        raise SpecError("path", f"{str(folder)!r} is a symbolic link; give the artifact folder itself")
    if not folder.is_dir():
        raise SpecError("path", f"{str(folder)!r} is not a folder")
    if not path.exists() and not path.is_symlink():
        raise SpecError("path", f"{str(folder)!r} has no readable manifest.json: not a ropeexport artifact")
    _inside(folder, "manifest.json", "manifest.json")
    manifest = read_json(path, "manifest.json")  # regular file, sane size, strict JSON
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


def _inside(folder: Path, name: Any, field: str) -> Path:
    """``folder / name`` for a plain relative name that stays inside ``folder`` and is no link; else SpecError.

    A manifest names files by relative paths; ``../x``, an absolute path or a link would make verify read (and
    reveal, through a matching or failing hash) files the artifact does not own.
    """
    if not isinstance(name, str) or not name or name.startswith(("/", "\\")) or "\\" in name:
        raise SpecError(field, f"{name!r} is not a relative file name inside the artifact folder")
    parts = Path(name).parts
    if Path(name).is_absolute() or any(p in ("..", "") for p in parts):
        raise SpecError(field, f"{name!r} leaves the artifact folder; only names inside it are allowed")
    path = folder / name
    current = folder
    for part in parts:
        current = current / part
        if current.is_symlink():
            raise SpecError(field, f"{str(current)!r} is a symbolic link; an artifact's files are its own")
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        raise SpecError(field, f"{name!r} resolves outside the artifact folder") from None
    return path


def check_files(folder: Path, files: dict[str, str], record: str = "the manifest") -> None:
    """Every file ``record`` lists is inside the folder, no link, and has its recorded sha256; else SpecError."""
    for name, digest in files.items():
        path = _inside(folder, name, f"files.{name}")
        if not path.is_file():
            raise SpecError(f"files.{name}", f"{str(path)!r} is missing")
        if sha256(path) != digest:
            raise SpecError(f"files.{name}", f"sha256 differs from {record}: the file changed after it was built")


MAX_INITIALIZER_BYTES = 2**31  # protobuf's cap on a model; a larger claimed tensor is damage, not a table


def check_model(folder: Path, manifest: dict[str, Any]) -> onnx.ModelProto:
    """model.onnx parses, its tensors are as large as their dims say, and its external data is listed; else SpecError.

    Hashes only prove the files are the ones the manifest names: a manifest written over a damaged model would
    still match, so the model itself is read defensively before any runtime sees it.
    """
    try:
        model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and friends: the bytes are no ONNX model
        raise SpecError("model.onnx", f"is not an ONNX model ({type(exc).__name__})") from None
    if not model.HasField("graph") or not model.graph.output:
        raise SpecError("model.onnx", "has no graph (or no outputs): not a ropeexport artifact")
    for tensor in model.graph.initializer:
        dims = list(tensor.dims)
        if any(d < 0 for d in dims):
            raise SpecError("model.onnx", f"initializer {tensor.name!r} has negative dims {dims}")
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize if tensor.data_type else 0
        size = itemsize * int(np.prod(dims, dtype=np.float64)) if dims else itemsize
        if size > MAX_INITIALIZER_BYTES:
            raise SpecError("model.onnx", f"initializer {tensor.name!r} claims {dims}: {size:.3g} bytes, over 2 GiB")
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            where = f"model.onnx external data of {tensor.name!r}"
            _inside(folder, location, where)
            if location not in manifest["files"]:
                raise SpecError(where, f"{location!r} is not listed (and hashed) in the manifest's files")
        elif tensor.HasField("raw_data") and len(tensor.raw_data) != size:
            raise SpecError(
                "model.onnx",
                f"initializer {tensor.name!r}: dims {dims} need {size} bytes, it holds {len(tensor.raw_data)}",
            )
    return model


def check_spec(folder: Path, manifest: dict[str, Any], model: onnx.ModelProto | None = None) -> None:
    """The manifest's spec (not hashed) must equal the spec embedded in the model (hashed), field by field."""
    model = model or check_model(folder, manifest)
    meta = {p.key: p.value for p in model.metadata_props}
    if "ropeexport.spec" not in meta:
        raise SpecError("model.onnx", "carries no ropeexport.spec metadata: not a ropeexport artifact")
    embedded = loads_json(meta["ropeexport.spec"], "model.onnx ropeexport.spec metadata")
    if not isinstance(embedded, dict):
        raise SpecError("model.onnx", "ropeexport.spec metadata must be a table of fields")
    declared = meta.get("ropeexport.max_positions", "")
    if not declared.isdigit() or int(declared) != embedded.get("max_positions"):
        raise SpecError(
            "model.onnx",
            f"ropeexport.max_positions metadata {declared!r} is not the spec's max_positions "
            f"{embedded.get('max_positions')!r}",
        )
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
    check_spec(folder, manifest, check_model(folder, manifest))
    return manifest


def verify_folder(
    folder: str | Path,
    runtimes: list[str] | None = None,
    atol: dict[str, float] | None = None,
    rtol: dict[str, float] | None = None,
    manifest: dict[str, Any] | None = None,
) -> VerifyResult:
    """Check hashes, verify the artifact again on this machine, and replace its reports.

    ``manifest``: what ``check_folder`` already returned for this folder (a tree checks every folder first). A
    decoder's folder is re-verified by ``decoder.reverify`` (``api.verify`` picks it).
    """
    folder = Path(folder)
    manifest = manifest or check_folder(folder)
    runtimes = check_runtime_names(runtimes or ["ort"])
    spec = spec_from_dict(manifest["spec"], "manifest.json spec")
    origin = manifest.get("build", {}).get("origin", {})
    kind = kind_for(spec)
    if isinstance(origin, dict) and "checkpoint" in origin and "layer" in origin:  # a checkpoint layer's block
        from ropeexport.decoder.layer import kind_for_origin

        kind = kind_for_origin(spec, origin)
    verification = verify_artifact(spec, kind, folder / "model.onnx", runtimes, atol=atol, rtol=rtol)
    facts = model_facts(onnx.load(str(folder / "model.onnx"), load_external_data=False))
    report = report_dict(spec, verification, versions(), manifest["files"], facts)
    # Reports are written beside each other in a temporary folder, then moved over the old ones.
    with tempfile.TemporaryDirectory(dir=folder, prefix=".reports.") as scratch:
        for name in write_reports(Path(scratch), report):
            os.replace(Path(scratch) / name, folder / name)
    return VerifyResult(folder, verification.passed, report)
