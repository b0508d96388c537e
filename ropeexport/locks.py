"""The locks the store takes: ``NameLock``, one per artifact name (``.NAME.lock``, flock), held by the process
writing or re-verifying NAME; and ``index_lock``, the tree's (``.index.lock``), held while an index is rewritten.

A lock is released by unlinking its file while it is held, so no stale file lingers; a lock file whose holder died is
free again (flock dies with its process), which is how the store tells a dead writer's leftovers from a live one's
work, with no reliance on process ids.
"""  # noqa: D205

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from ropeexport.errors import InputError, OutputError


class NameLock:
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
        """Let the lock go: its file unlinked while still held (no stale file lingers), then closed."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self.fd)
        self.fd = None


@contextlib.contextmanager
def index_lock(root: Path, wait: float = 120.0) -> Iterator[None]:
    """The tree's index lock (``root/.index.lock``), waited for: index rewrites one at a time, each from the folders
    present then, so none drops another's artifact; OutputError after ``wait`` seconds.
    """  # noqa: D205
    lock = NameLock(root, "index")
    if not lock.take(wait=wait):
        raise OutputError("out_dir", f"another ropeexport process kept {str(lock.path)!r} for {wait:.0f} s: the "
                          "index was not rewritten; run 'ropeexport verify' on the tree to index it")  # fmt: skip
    try:
        yield
    finally:
        lock.release()
