"""The store: every artifact folder ropeexport writes goes through here, and is read back through here.

A store is a folder (``root``: a build's ``--out`` tree, or the folder an audit's ``--out`` sits in). What it
guarantees, for every kind of artifact (encoding artifacts, blocks, decoders, audit reports, grafted models):

- **Whole or not at all.** An artifact is written into a hidden work folder ``.NAME.building.PID.X`` beside its
  place and moved in with one atomic exchange (Linux ``renameat2(RENAME_EXCHANGE)``): at every moment ``NAME`` is
  either the old artifact or the new one. kill -9 at any point leaves the old artifact (or nothing, for a first
  build) in place, plus a hidden leftover the next write into the store removes.
- **One writer per name.** ``.NAME.lock`` is held (``flock``) by the process writing NAME; a second writer of the same
  name is refused at once (InputError naming ``name``) instead of racing it. The lock also tells leftovers of dead
  writers (removable) from the work of live ones (left alone), with no reliance on process ids.
- **Same spec or refuse.** A folder at NAME must be a ropeexport artifact; one built from another spec is replaced
  only with ``replace`` (the first field that differs is named, nested fields as ``position.theta``).
- **A failed rebuild never loses a verified artifact.** A build that did not verify, into a NAME holding an artifact
  that did, leaves NAME as it was and is kept under ``_failed/NAME`` for its report (names start with a letter or
  digit, so ``_failed`` is never an artifact's). A later build of NAME clears it.
- **Hashes and manifest.** ``manifest.json`` lists every file of the folder with its sha256 (the reports aside:
  ``verify`` rewrites them); reading a folder back checks each file is inside it, no link, and unchanged.
- **Disk failures are one line.** A full or read-only disk is an ``OutputError`` saying nothing was changed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropeexport.errors import ArtifactError, InputError, OutputError, SpecError
from ropeexport.graph.onnx_io import sha256
from ropeexport.inputs import read_json, read_text
from ropeexport.specs import NAME_PATTERN

MANIFEST = "manifest.json"
MANIFEST_SCHEMA = "ropeexport.manifest/1"
REPORTS = ("report.json", "report.md", "report.html")  # rewritten by `verify`: never hashed
FAILED = "_failed"
RESERVED = ("index.json", "index.html")  # the tree's own files
# Failures of the output folder itself (full, read-only, gone): reported as one line, never as a traceback.
WRITE_ERRORS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.EIO}
# A work folder (tempfile.mkdtemp's 8-character suffix) or an old artifact set aside by a two-rename swap.
LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<what>building|old)\.(?P<pid>\d+)\.[a-z0-9_]{8}$")
LEGACY_LEFTOVER = re.compile(r"^\.building-(?P<name>.+)$")  # decoder work folders of ropeexport before the store
LOCK = re.compile(r"^\.(?P<name>.+)\.lock$")
COMMITTING = re.compile(r"^\.(?P<name>.+)\.committing$")  # a file output's commit in progress (``commit_files``)
COMMIT_SIGNATURE = "ropeexport commit 1"  # the first line of a commit marker: a file of the user's is never one
INDEX_TEMP = re.compile(r"^\.index\.(json|html)\.[a-z0-9_]{8}$")  # an index write that died (``tree``)


def check_name(name: Any, field: str = "name") -> str:
    """An artifact's folder name: 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit, and not
    one of the tree's own files (index.json, index.html); else SpecError naming ``field``.
    """  # noqa: D205
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise SpecError(field, "must be 1-100 characters of letters, digits, '.', '_' or '-', starting with a letter "
                        f"or digit, got {name!r}")  # fmt: skip
    if name.lower() in RESERVED:
        raise SpecError(field, f"{name!r} is the tree's own index file; give another name")
    return name


def flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested mapping as one level of dotted keys (``{"position": {"theta": 1}}`` -> ``{"position.theta": 1}``)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping) and value:
            out |= flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def first_difference(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """The first (sorted) dotted key whose value differs between two specs, or None when they are equal."""
    a, b = flat(old), flat(new)
    return next((k for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)), None)


# -- reading a folder back ------------------------------------------------------------------------------------------


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


def _damaged_artifact(folder: Path) -> bool:
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


def replace_reports(folder: Path, texts: Mapping[str, str]) -> None:
    """Write report files (not hashed) beside each other in a hidden scratch folder, then move each over the old one.

    A reader sees either the old report or the new one; a verify killed here leaves a ``.reports.*`` folder that the
    next verify of the folder removes.
    """
    for stale in folder.glob(".reports.*"):
        shutil.rmtree(stale, ignore_errors=True)
    try:
        with tempfile.TemporaryDirectory(dir=folder, prefix=".reports.") as scratch:
            for name, text in texts.items():
                (Path(scratch) / name).write_text(text, encoding="utf-8")
                (Path(scratch) / name).chmod(0o666 & ~_umask())
            for name in texts:
                os.replace(Path(scratch) / name, folder / name)
    except OSError as exc:
        if exc.errno in WRITE_ERRORS:
            raise OutputError("path", f"cannot write the reports into {str(folder)!r}: {exc.strerror}; the old "
                              "reports are unchanged") from None  # fmt: skip
        raise


# -- writing --------------------------------------------------------------------------------------------------------


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths atomically (Linux renameat2 RENAME_EXCHANGE); False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.renameat2
    except (OSError, AttributeError):
        return False
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False  # a kernel or file system without the flag: the caller swaps in two renames
    raise OSError(code, os.strerror(code), str(a))


def _swap_in(work: Path, target: Path) -> None:
    """Put the folder ``work`` at ``target``: atomically exchanged with an old one there (which is then removed).

    Without RENAME_EXCHANGE, the old folder is renamed aside (``.NAME.old.PID.NS``) and the new one renamed in; a
    crash between the two leaves the old folder aside, and the next writer of the store puts it back.
    """
    if not target.exists():
        work.rename(target)
        return
    if _exchange(work, target):
        shutil.rmtree(work, ignore_errors=True)  # work now holds the old artifact
        return
    aside = target.with_name(f".{target.name}.old.{os.getpid()}.{os.urandom(4).hex()}")
    target.rename(aside)
    try:
        work.rename(target)
    except BaseException:
        aside.rename(target)
        raise
    shutil.rmtree(aside, ignore_errors=True)


class _Lock:
    """``.NAME.lock`` held with flock; released by unlinking it while held (so a stale file never lingers)."""

    def __init__(self, root: Path, name: str) -> None:
        self.path = root / f".{name}.lock"
        self.fd: int | None = None

    def take(self, wait: float = 0.0) -> bool:
        """True when this process now holds the lock; False when another one holds it (for ``wait`` seconds).

        A lock path that is not a regular file (a link, a folder planted there) is an InputError naming it.
        """
        deadline = time.monotonic() + wait
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENOTDIR):
                    raise InputError("out_dir", f"{str(self.path)!r} is not a lock file of ropeexport's (a link or "
                                     "a folder): remove it") from None  # fmt: skip
                raise
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device opened without blocking
                os.close(fd)
                raise InputError("out_dir", f"{str(self.path)!r} is not a lock file of ropeexport's: remove it")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.05)
                continue
            try:  # the file we locked must still be the one at the path (a releaser may have unlinked it)
                same = os.fstat(fd).st_ino == os.stat(self.path, follow_symlinks=False).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                with contextlib.suppress(OSError):  # the pid is for the message only: a full disk must not stop it
                    os.ftruncate(fd, 0)
                    os.write(fd, f"{os.getpid()}\n".encode())
                return True
            os.close(fd)

    def owner(self) -> str:
        """The pid the holder wrote, for the message (best effort)."""
        try:
            return self.path.read_text().strip() or "?"
        except OSError:
            return "?"

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self.fd)
        self.fd = None


@dataclass
class Committed:
    """Where a draft went: ``path`` (NAME, or ``_failed/NAME`` for a failed rebuild) and ``kept``, the verified
    artifact left in place at NAME (None when the draft took NAME).
    """  # noqa: D205

    path: Path
    kept: Path | None = None


@dataclass
class Draft:
    """An artifact being written: ``path`` is its work folder. ``commit`` moves it into place."""

    store: Store
    name: str
    path: Path
    committed: Committed | None = field(default=None, init=False)

    @property
    def target(self) -> Path:
        """Where the artifact goes."""
        return self.store.root / self.name

    def hash_files(self) -> dict[str, str]:
        """{file: sha256} of every file in the work folder (reports and the manifest aside), sorted by name."""
        out = {}
        for path in sorted(self.path.rglob("*")):
            relative = path.relative_to(self.path).as_posix()
            if path.is_file() and relative not in (*REPORTS, MANIFEST):
                out[relative] = sha256(path)
        return out

    def commit_files(self, names: list[str]) -> Committed:
        """Move files of the work folder into the root, the last of ``names`` last: an output that is a file (a
        grafted model), whose appearance says it is there (a model after its external data file).

        A marker ``.NAME.committing`` lists the files while they move; a crash between two moves leaves it, and the
        next writer of the store removes the files that arrived (the last one never did).
        """  # noqa: D205
        root = self.store.root
        assert all(n == self.name or n.startswith(self.name + ".") for n in names), names  # NAME and its companions
        marker = root / f".{self.name}.committing"
        marker.write_text("".join(f"{line}\n" for line in (COMMIT_SIGNATURE, *names)))
        mask = _umask()
        for name in names:
            (self.path / name).chmod(0o666 & ~mask)
        for name in names:
            os.replace(self.path / name, root / name)
        marker.unlink()
        self.committed = Committed(root / names[-1])
        return self.committed

    def commit(self, manifest: Mapping[str, Any], passed: bool, guard_verified: bool = True) -> Committed:
        """Write manifest.json (``manifest`` plus schema, name and every file's sha256), then move the folder in.

        ``passed``: whether the artifact verified. A failed one does not replace a verified artifact at NAME: it
        goes to ``_failed/NAME`` instead (module doc), unless ``guard_verified`` is False (a report folder, which is
        replaced whatever it says).
        """
        from ropeexport.report import write_json

        record = {"schema": MANIFEST_SCHEMA, "name": self.name} | dict(manifest)
        record["files"] = self.hash_files()
        write_json(self.path / MANIFEST, record)
        mask = _umask()
        self.path.chmod(0o777 & ~mask)  # mkdtemp made it private; an artifact folder is as readable as any other
        for path in self.path.rglob("*"):  # and so is every file in it (onnx writes external data 0600)
            if path.is_file():
                path.chmod(0o666 & ~mask)
        self.store.room_for_the_index()
        failed = self.store.failed_place(self.name)  # checked: a real folder of ours, never a link out of the tree
        if guard_verified and not passed and is_verified(self.target):
            failed.parent.mkdir(exist_ok=True)
            _swap_in(self.path, failed)
            self.committed = Committed(failed, kept=self.target)
        else:
            _swap_in(self.path, self.target)
            if failed.exists():  # a failed rebuild kept earlier: this build of NAME supersedes it
                shutil.rmtree(failed, ignore_errors=True)
                with contextlib.suppress(OSError):
                    failed.parent.rmdir()  # only when empty
            self.committed = Committed(self.target)
        return self.committed


Owned = Callable[[Path], bool]  # a writer's test for a folder of its own that predates manifests
# How long a writer waits for its name's lock before saying another process writes it: a cleaner of leftovers holds
# a free name's lock for as long as it takes to remove a dead build's work folder (a writer of the name holds it for
# the whole build: refused, not waited for).
CLEANER_WAIT = 3.0
INDEX_MARGIN = 256 * 2**10  # an index entry is about 2 KiB; the margin leaves room for many and for the HTML


@dataclass(frozen=True)
class Store:
    """The folder artifacts are written into (module doc)."""

    root: Path

    def check_root(self) -> None:
        """The root is a folder or can be made one (no file or dangling link on its way); else SpecError."""
        for folder in (self.root, *self.root.parents):
            if folder.is_symlink() and not folder.exists():
                raise SpecError("out_dir", f"{str(folder)!r} is a link to nothing; give a folder")
            if folder.exists():
                if not folder.is_dir():
                    raise SpecError("out_dir", f"{str(folder)!r} exists and is not a folder")
                return

    def target(self, name: str, field: str = "name") -> Path:
        """``root/name`` for a valid name (an error names ``field``: the flag the name came from)."""
        return self.root / check_name(name, field)

    def failed_place(self, name: str) -> Path:
        """``root/_failed/NAME``, where a failed rebuild is kept; SpecError when ``_failed`` or ``_failed/NAME`` is a
        link or not a folder (a build must never remove or write through them).
        """  # noqa: D205
        failed = self.root / FAILED
        for path in (failed, failed / name):
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                raise SpecError("out_dir", f"{str(path)!r} is not ropeexport's folder of failed rebuilds (a link or "
                                "a file): remove it")  # fmt: skip
        return failed / name

    def check(
        self,
        name: str,
        spec: Mapping[str, Any] | None = None,
        replace: bool = False,
        ours: Owned | None = None,
        field: str = "name",
        identity: Mapping[str, Any] | None = None,
    ) -> Path:
        """``root/name``, refusing a folder there that is not ropeexport's (an artifact, a damaged one, or by
        ``ours`` a folder its writer recognises as its own), or (unless ``replace``) one built from another spec than
        ``spec`` (a dict as ``spec.to_dict()`` gives) or another ``identity`` (what else the kind records at the top
        of the manifest: a decoder's weights); the same again is a rebuild. A damaged artifact is replaced with
        ``replace`` only.
        """  # noqa: D205
        self.check_root()
        target = self.target(name, field)
        self.failed_place(name)
        if target.is_symlink():
            raise SpecError("out_dir", f"{str(target)!r} is a symbolic link; ropeexport replaces only its own "
                            "folders")  # fmt: skip
        if target.exists() and not is_artifact(target) and not (ours is not None and ours(target)):
            if not _damaged_artifact(target):
                raise SpecError("out_dir", f"{str(target)!r} exists and is not a ropeexport artifact; choose another "
                                f"`out_dir` or `{field}`")  # fmt: skip
            if not replace:
                raise SpecError(field, f"{str(target)!r} holds a damaged ropeexport artifact (its manifest.json does "
                                "not read as one); give `replace` to build it again")  # fmt: skip
            return target
        if spec is not None and not replace and target.exists():
            manifest = read_object(target / MANIFEST, MANIFEST) or {}
            stored = manifest.get("spec")
            there: dict[str, Any] = {"spec": stored if isinstance(stored, dict) else {}}
            now: dict[str, Any] = {"spec": dict(spec)}
            for key, value in (identity or {}).items():
                if key in manifest:  # earlier versions did not record it: their same spec is a rebuild, as then
                    there[key], now[key] = manifest[key], value
            differs = first_difference(there, now)
            if differs is not None:
                was, new = flat(there).get(differs), flat(now).get(differs)
                shown = differs.removeprefix("spec.")
                raise SpecError(field, f"{str(target)!r} holds an artifact built from another spec ({shown}: {was!r} "
                                f"there, {new!r} now); give `replace` to replace it, or another `{field}` or "
                                "`out_dir`")  # fmt: skip
        return target

    def clean(self, holding: str | None = None, only: str | None = None) -> list[str]:
        """Remove what writers that died (kill -9, power loss) left in the root; the names removed.

        A work folder, an aside folder, a commit marker or a lock file of NAME is a leftover when no process holds
        NAME's lock (or this process does: ``holding``). An old artifact set aside by a two-rename swap whose NAME
        is gone is put back, never removed. ``only``: look at NAME's leftovers alone (a folder that is not a
        ropeexport tree, such as an audit's or a graft's output folder: nothing else in it is ours to judge).
        """
        if not self.root.is_dir():
            return []
        by_name: dict[str, list[Path]] = {}
        temps: list[Path] = []
        for path in self.root.iterdir():
            match = (LOCK.match(path.name) or LEFTOVER.match(path.name) or LEGACY_LEFTOVER.match(path.name)
                     or COMMITTING.match(path.name))  # fmt: skip
            if match is not None and (only is None or match.group("name") == only):
                by_name.setdefault(match.group("name"), []).append(path)
            elif only is None and INDEX_TEMP.match(path.name):
                temps.append(path)
        removed = []
        for name, paths in sorted(by_name.items()):
            lock = None
            if name != holding:
                lock = _Lock(self.root, name)
                try:
                    if not lock.take():
                        continue  # a live writer of NAME: its work is not a leftover
                except InputError:
                    continue  # NAME's lock path is not a lock file: its writer refuses it in one line, not us
            try:
                for path in sorted(paths, key=lambda p: p.name):
                    removed += self._clean_one(name, path)
            finally:
                if lock is not None:
                    lock.release()
        if temps:
            with self.index_lock():  # an index write in progress holds it: what is left is a dead write's
                for path in temps:
                    if path.is_file() and not path.is_symlink():
                        path.unlink(missing_ok=True)
                        removed.append(path.name)
        return removed

    def _clean_one(self, name: str, path: Path) -> list[str]:
        if LOCK.match(path.name):
            return []  # released (unlinked) with the lock itself
        if COMMITTING.match(path.name):
            return self._unfinished_commit(name, path) if path.is_file() and not path.is_symlink() else []
        if path.is_symlink() or not path.is_dir():
            return []
        match = LEFTOVER.match(path.name)
        if match is None and not ((path / MANIFEST).exists() or (path / "decoder.json").exists()):
            return []  # a ".building-NAME" folder that is not an earlier ropeexport's decoder work: not ours
        if match is not None and match.group("what") == "old":
            if not (self.root / name).exists() and is_artifact(path):
                path.rename(self.root / name)  # a swap died between its two renames: the artifact goes back
            return []  # an aside folder is removed only by the swap that made it (it may be the only copy)
        shutil.rmtree(path, ignore_errors=True)
        return [] if path.exists() else [path.name]

    def _unfinished_commit(self, name: str, marker: Path) -> list[str]:
        """The files a ``commit_files`` that died had moved in before its last one: removed (module doc)."""
        lines = read_text_safely(marker).splitlines()
        if not lines or lines[0] != COMMIT_SIGNATURE:
            return []  # not a marker ropeexport wrote: left as it is
        removed = []
        names = lines[1:]
        if names and not (self.root / names[-1]).exists():
            for line in names:
                if line == name or (line.startswith(name + ".") and "/" not in line and "\0" not in line):
                    path = self.root / line
                    if path.is_file() and not path.is_symlink():
                        path.unlink()
                        removed.append(line)
        marker.unlink(missing_ok=True)
        return removed

    @contextlib.contextmanager
    def index_lock(self, wait: float = 120.0) -> Iterator[None]:
        """The tree's index lock (``.index.lock``), waited for: index rewrites one at a time, each from the folders
        present then, so none drops another's artifact.
        """  # noqa: D205
        lock = _Lock(self.root, "index")
        if not lock.take(wait=wait):
            raise OutputError("out_dir", f"another ropeexport process kept {str(lock.path)!r} for {wait:.0f} s: the "
                              "index was not rewritten; run 'ropeexport verify' on the tree to index it")  # fmt: skip
        try:
            yield
        finally:
            lock.release()

    @contextlib.contextmanager
    def reading(self, name: str) -> Iterator[None]:
        """NAME's lock held while an artifact is verified again (its reports rewritten): no writer replaces the
        folder meanwhile, and two verifications of it do not run at once.
        """  # noqa: D205
        lock = _Lock(self.root, name)
        try:
            taken = lock.take(wait=CLEANER_WAIT)
        except OSError as exc:
            if exc.errno in WRITE_ERRORS:
                raise OutputError("path", f"cannot write the reports into {str(self.root / name)!r}: "
                                  f"{exc.strerror}") from None  # fmt: skip
            raise
        if not taken:
            raise InputError("path", f"another ropeexport process (pid {lock.owner()}) is writing or verifying "
                             f"{str(self.root / name)!r} now; wait for it to finish")  # fmt: skip
        try:
            yield
        finally:
            lock.release()

    def room_for_the_index(self) -> None:
        """Raise ENOSPC unless the tree can still hold a rewritten index once this artifact lands.

        The index is rewritten after the artifact moves in; on a disk that the artifact just filled, that would leave a
        folder the index does not list. Checking first keeps the two in step (nothing lands without room for both).
        """
        current = sum((self.root / n).stat().st_size for n in RESERVED if (self.root / n).is_file())
        if shutil.disk_usage(self.root).free < 2 * current + INDEX_MARGIN:
            raise OSError(errno.ENOSPC, "No space left on device (no room to index the artifact)")

    @contextlib.contextmanager
    def draft(
        self,
        name: str,
        spec: Mapping[str, Any] | None = None,
        replace: bool = False,
        ours: Owned | None = None,
        field: str = "name",
        tree: bool = True,
        identity: Mapping[str, Any] | None = None,
    ) -> Iterator[Draft]:
        """A work folder for artifact ``name``, locked against other writers of it (module doc).

        Checks the target (``check``; ``field`` is what a bad name is called), cleans leftovers (every name's in a
        ``tree``; else NAME's alone: an audit's or a graft's output folder may be anybody's), yields the draft; the
        caller writes its files and calls ``commit``. Leaving without a commit (an error, Ctrl-C) removes the work
        folder and any folder the draft created; a full or read-only disk becomes an OutputError saying nothing was
        changed.
        """
        self.check(name, spec, replace, ours, field, identity)
        created = [p for p in (self.root, *self.root.parents) if not p.exists()]  # removed again on failure
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            lock = _Lock(self.root, name)
            taken = lock.take(wait=CLEANER_WAIT)
        except OSError as exc:
            self._unmake(created)
            raise OutputError("out_dir", f"cannot write into {str(self.root)!r}: {exc.strerror or exc}") from None
        if not taken:
            raise InputError(field, f"another ropeexport process (pid {lock.owner()}) is writing "
                             f"{str(self.root / name)!r} now; wait for it to finish, or give another `{field}`")
        work: Path | None = None
        draft: Draft | None = None
        try:
            self.clean(holding=name, only=None if tree else name)
            self.check(name, spec, replace, ours, field, identity)  # again, under the lock: a writer just finished
            work = Path(tempfile.mkdtemp(prefix=f".{name}.building.{os.getpid()}.", dir=self.root))
            draft = Draft(self, name, work)
            yield draft
            if draft.committed is None:
                raise RuntimeError(f"the draft of {name!r} was left without a commit")
        except OSError as exc:
            if exc.errno in WRITE_ERRORS:
                # The disk, not the input: one line, and the store as it was (the work folder is gone, an old
                # artifact of the same name is still in place).
                raise OutputError("out_dir", f"cannot write {str(self.root)!r}: {exc.strerror}; nothing was "
                                  "changed") from None  # fmt: skip
            raise
        finally:
            done = draft is not None and draft.committed is not None
            if work is not None and work.exists():  # not committed, or what a commit left: an exchanged old folder
                shutil.rmtree(work, ignore_errors=True)  # already removed, or the emptied folder of commit_files
            lock.release()
            if not done:
                self._unmake(created)

    @staticmethod
    def _unmake(created: list[Path]) -> None:
        """Remove the folders a failed draft created (innermost first), only while still empty."""
        for folder in created:
            with contextlib.suppress(OSError):
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()

