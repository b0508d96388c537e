"""What writers that died (kill -9, power loss) leave in a store's root, recognised by name and removed by the next
writer (``Store.clean``): a work folder ``.NAME.building.PID.X``, an old artifact set aside by a two-rename swap
``.NAME.old.PID.X`` (put back when NAME is gone, never removed), a commit marker ``.NAME.committing`` and the files
its commit had moved in before its last one, a lock file ``.NAME.lock``, a dead index write ``.index.json.X``, and
the decoder work folders of ropeexport before the store (``.building-NAME``). A name whose lock a live process holds
is left alone.
"""  # noqa: D205

from __future__ import annotations

import re
import shutil
from pathlib import Path

from ropeexport.errors import InputError
from ropeexport.locks import NameLock, index_lock
from ropeexport.manifest import MANIFEST, is_artifact, read_text_safely

# A work folder (tempfile.mkdtemp's 8-character suffix) or an old artifact set aside by a two-rename swap.
LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<what>building|old)\.(?P<pid>\d+)\.[a-z0-9_]{8}$")
LEGACY_LEFTOVER = re.compile(r"^\.building-(?P<name>.+)$")  # decoder work folders of ropeexport before the store
LOCK = re.compile(r"^\.(?P<name>.+)\.lock$")
COMMITTING = re.compile(r"^\.(?P<name>.+)\.committing$")  # a file output's commit in progress (``commit_files``)
COMMIT_SIGNATURE = "ropeexport commit 1"  # the first line of a commit marker: a file of the user's is never one
INDEX_TEMP = re.compile(r"^\.index\.(json|html)\.[a-z0-9_]{8}$")  # an index write that died (``tree``)


def clean(root: Path, holding: str | None = None, only: str | None = None) -> list[str]:
    """Remove what writers that died (kill -9, power loss) left in ``root``; the names removed.

    A work folder, an aside folder, a commit marker or a lock file of NAME is a leftover when no process holds
    NAME's lock (or this process does: ``holding``). An old artifact set aside by a two-rename swap whose NAME
    is gone is put back, never removed. ``only``: look at NAME's leftovers alone (a folder that is not a
    ropeexport tree, such as an audit's or a graft's output folder: nothing else in it is ours to judge).
    """
    if not root.is_dir():
        return []
    by_name: dict[str, list[Path]] = {}
    temps: list[Path] = []
    for path in root.iterdir():
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
            lock = NameLock(root, name)
            try:
                if not lock.take():
                    continue  # a live writer of NAME: its work is not a leftover
            except InputError:
                continue  # NAME's lock path is not a lock file: its writer refuses it in one line, not us
        try:
            for path in sorted(paths, key=lambda p: p.name):
                removed += _clean_one(root, name, path)
        finally:
            if lock is not None:
                lock.release()
    if temps:
        with index_lock(root):  # an index write in progress holds it: what is left is a dead write's
            for path in temps:
                if path.is_file() and not path.is_symlink():
                    path.unlink(missing_ok=True)
                    removed.append(path.name)
    return removed

def _clean_one(root: Path, name: str, path: Path) -> list[str]:
    if LOCK.match(path.name):
        return []  # released (unlinked) with the lock itself
    if COMMITTING.match(path.name):
        return _unfinished_commit(root, name, path) if path.is_file() and not path.is_symlink() else []
    if path.is_symlink() or not path.is_dir():
        return []
    match = LEFTOVER.match(path.name)
    if match is None and not ((path / MANIFEST).exists() or (path / "decoder.json").exists()):
        return []  # a ".building-NAME" folder that is not an earlier ropeexport's decoder work: not ours
    if match is not None and match.group("what") == "old":
        if not (root / name).exists() and is_artifact(path):
            path.rename(root / name)  # a swap died between its two renames: the artifact goes back
        return []  # an aside folder is removed only by the swap that made it (it may be the only copy)
    shutil.rmtree(path, ignore_errors=True)
    return [] if path.exists() else [path.name]

def _unfinished_commit(root: Path, name: str, marker: Path) -> list[str]:
    """The files a ``commit_files`` that died had moved in before its last one: removed (module doc)."""
    lines = read_text_safely(marker).splitlines()
    if not lines or lines[0] != COMMIT_SIGNATURE:
        return []  # not a marker ropeexport wrote: left as it is
    removed = []
    names = lines[1:]
    if names and not (root / names[-1]).exists():
        for line in names:
            if line == name or (line.startswith(name + ".") and "/" not in line and "\0" not in line):
                path = root / line
                if path.is_file() and not path.is_symlink():
                    path.unlink()
                    removed.append(line)
    marker.unlink(missing_ok=True)
    return removed
