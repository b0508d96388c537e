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

This module is the writer (``Store``, ``Draft``: names checked, drafts swapped in). Its parts: ``ropeexport.locks``
(the per-name and index locks), ``ropeexport.leftovers`` (what dead writers left, recognised and removed) and
``ropeexport.manifest`` (a folder read back: manifest, files inside, hashes; its names are importable from here too).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropeexport import leftovers
from ropeexport.errors import InputError, OutputError, SpecError
from ropeexport.graph.onnx_io import sha256
from ropeexport.leftovers import COMMIT_SIGNATURE
from ropeexport.locks import NameLock, index_lock
from ropeexport.manifest import (
    MANIFEST,
    MANIFEST_SCHEMA,
    REPORTS,
    check_files,
    inside,
    is_artifact,
    is_damaged_artifact,
    is_verified,
    read_artifact_json,
    read_manifest,
    read_object,
    read_text_safely,
)
from ropeexport.specs import NAME_PATTERN

# The store's names, and the reading-back names (``ropeexport.manifest``) importers of the store have always found
# here.
__all__ = [
    "CLEANER_WAIT",
    "FAILED",
    "MANIFEST",
    "MANIFEST_SCHEMA",
    "RESERVED",
    "REPORTS",
    "WRITE_ERRORS",
    "Committed",
    "Draft",
    "Store",
    "check_files",
    "check_name",
    "first_difference",
    "flat",
    "inside",
    "is_artifact",
    "is_verified",
    "read_artifact_json",
    "read_manifest",
    "read_object",
    "read_text_safely",
    "replace_reports",
]

FAILED = "_failed"
RESERVED = ("index.json", "index.html")  # the tree's own files
# Failures of the output folder itself (full, read-only, gone): reported as one line, never as a traceback.
WRITE_ERRORS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.EIO}


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


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write JSON in the mapping's own (reading) order: manifest.json, report.json."""
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


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
            if not is_damaged_artifact(target):
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
        """Remove what writers that died left in the root (``ropeexport.leftovers``); the names removed.

        ``holding``: the name this process holds the lock of (its leftovers are removed too); ``only``: look at
        NAME's leftovers alone (a folder that is not a ropeexport tree, such as an audit's or a graft's output
        folder: nothing else in it is ours to judge).
        """
        return leftovers.clean(self.root, holding, only)

    def index_lock(self, wait: float = 120.0) -> contextlib.AbstractContextManager[None]:
        """The tree's index lock, waited for (``locks.index_lock``)."""
        return index_lock(self.root, wait)

    @contextlib.contextmanager
    def reading(self, name: str) -> Iterator[None]:
        """NAME's lock held while an artifact is verified again (its reports rewritten): no writer replaces the
        folder meanwhile, and two verifications of it do not run at once.
        """  # noqa: D205
        lock = NameLock(self.root, name)
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
            lock = NameLock(self.root, name)
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

