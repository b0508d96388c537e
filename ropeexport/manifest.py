"""An artifact folder read back: its manifest.json (schema, common fields, every file's sha256), the files it lists
(inside the folder, no link, unchanged), and the small JSON and text files of ours read safely (a FIFO or a device is
never opened). What ``verify``, the index and the store's checks read; the store (``ropeexport.store``) writes.
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ropeexport.errors import ArtifactError, InputError
from ropeexport.graph.onnx_io import sha256
from ropeexport.inputs import read_json, read_text

MANIFEST = "manifest.json"
MANIFEST_SCHEMA = "ropeexport.manifest/1"
REPORTS = ("report.json", "report.md", "report.html")  # rewritten by `verify`: never hashed


def read_object(path: Path, field: str) -> dict[str, Any] | None:
    """A JSON object from a regular file (a FIFO or device is never opened); None for anything else."""
    try:
        data = read_json(path, field)
    except InputError:
        return None
    return data if isinstance(data, dict) else None


def read_artifact_json(path: Path, field: str) -> Any:
    """A JSON file of an artifact (``inputs.read_json``: a regular file of sane size, strict JSON); ArtifactError
    when it does not read: the artifact is damaged, the input is not wrong.
    """  # noqa: D205
    try:
        return read_json(path, field)
    except InputError as exc:
        raise ArtifactError(exc.field, exc.message) from None


def is_damaged_artifact(folder: Path) -> bool:
    """A folder (no link) ropeexport wrote whose manifest does not read as one: what the index lists as damaged."""
    return folder.is_dir() and not folder.is_symlink() and any(
        (folder / name).exists() or (folder / name).is_symlink() for name in (MANIFEST, "decoder.json")
    )


def read_text_safely(path: Path) -> str:
    """A small text file of ours ("" when it does not read as one: a FIFO is never opened)."""
    try:
        return read_text(path, path.name, max_bytes=2**16)
    except InputError:
        return ""


def is_artifact(folder: Path) -> bool:
    """A folder (no link) holding a ropeexport manifest.json (its schema says so: another tool's does not count)."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    manifest = read_object(folder / MANIFEST, MANIFEST)
    return manifest is not None and manifest.get("schema") == MANIFEST_SCHEMA


def is_verified(folder: Path) -> bool:
    """An artifact whose last verification passed (its report.json says so)."""
    report = read_object(folder / "report.json", "report.json")
    return is_artifact(folder) and report is not None and report.get("passed") is True


def inside(folder: Path, name: Any, field: str) -> Path:
    """``folder / name`` for a plain relative name that stays inside ``folder`` and is no link; else ArtifactError.

    A manifest names files by relative paths; ``../x``, an absolute path or a link would make verify read (and
    reveal, through a matching or failing hash) files the artifact does not own.
    """
    if not isinstance(name, str) or not name or name.startswith(("/", "\\")) or "\\" in name or "\0" in name:
        raise ArtifactError(field, f"{name!r} is not a relative file name inside the artifact folder")
    parts = Path(name).parts
    if Path(name).is_absolute() or any(p in ("..", "") for p in parts):
        raise ArtifactError(field, f"{name!r} leaves the artifact folder; only names inside it are allowed")
    current = folder
    for part in parts:
        current = current / part
        if current.is_symlink():
            raise ArtifactError(field, f"{str(current)!r} is a symbolic link; an artifact's files are its own")
    path = folder / name
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        raise ArtifactError(field, f"{name!r} resolves outside the artifact folder") from None
    return path


def read_manifest(folder: Path, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The manifest of an artifact folder with its schema, common fields and ``required`` ones; else ArtifactError."""
    if folder.is_symlink():
        raise ArtifactError("path", f"{str(folder)!r} is a symbolic link; give the artifact folder itself")
    if not folder.is_dir():
        raise ArtifactError("path", f"{str(folder)!r} is not a folder")
    path = folder / MANIFEST
    if not path.exists() and not path.is_symlink():
        raise ArtifactError("path", f"{str(folder)!r} has no readable manifest.json: not a ropeexport artifact (or "
                            "written by a ropeexport before 0.2 that kept none: build it again)")  # fmt: skip
    inside(folder, MANIFEST, MANIFEST)
    manifest = read_artifact_json(path, MANIFEST)
    if not isinstance(manifest, dict):
        raise ArtifactError(MANIFEST, "must be a JSON object")
    if manifest.get("schema") != MANIFEST_SCHEMA:
        raise ArtifactError(MANIFEST, f"schema {manifest.get('schema')!r} is not {MANIFEST_SCHEMA!r}")
    missing = [f for f in ("schema", "name", "artifact", "spec", "files", *required) if f not in manifest]
    if missing:
        raise ArtifactError(MANIFEST, f"missing field(s) {', '.join(missing)}")
    files = manifest["files"]
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise ArtifactError(MANIFEST, "files must map each file to its sha256")
    if not isinstance(manifest["spec"], dict):
        raise ArtifactError(MANIFEST, "spec must be a table of fields")
    return manifest


def check_files(folder: Path, files: Mapping[str, str], record: str = "the manifest") -> None:
    """Every file ``record`` lists is inside the folder, no link, and has its recorded sha256; else ArtifactError."""
    for name, digest in files.items():
        path = inside(folder, name, f"files.{name}")
        if not path.is_file():
            raise ArtifactError(f"files.{name}", f"{str(path)!r} is missing")
        if sha256(path) != digest:
            raise ArtifactError(f"files.{name}", f"sha256 differs from {record}: the file changed after it was built")
