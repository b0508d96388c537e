"""Independent jobs fanned out: one after the other in this process, or one Ray task each on a cluster (``--ray``).

ropeexport schedules nothing itself: with an address, each job is a Ray task (https://docs.ray.io), retried by Ray
when its worker dies (``RETRIES`` times: a killed or crashed worker process, not an exception the job raised), and
each result comes back to the calling process, the driver, which writes it (through the store): a worker never
writes a report, so a worker killed mid-job leaves nothing half-written, and a driver killed mid-run loses only the
jobs not yet handed back. Without an address Ray is not imported at all: it is an optional extra
(``pip install -e ".[cluster]"``).

Addresses (``ADDRESSES``): ``local`` starts a Ray instance on this machine for the run and stops it after; ``auto``
joins the cluster already running here (``ray start --head``); ``HOST:PORT`` a head node's GCS; ``ray://HOST:PORT``
a cluster through Ray Client. A remote address is tried with a plain TCP connection first (``CONNECT_SECONDS``): Ray's
own connect waits minutes on an address nothing answers at. A process that is connected to Ray already (the caller
ran ``ray.init``) uses that connection whatever the address, and leaves it open. A connection made here leaves the
process as it found it: ``ray.init``'s own SIGTERM handler and the variables it sets are undone after ``ray.shutdown``.

A local instance's workers get this process's BLAS thread count (``blas_threads``): Ray would give each one thread,
and a float64 matmul's last bits follow the thread count. A decoder's float64 truth runs on one BLAS thread wherever
it is computed (``numerics.one_blas_thread``), so its bits do not depend on either; the count still holds for the
rest of a worker's numpy work, which a cluster's workers do with Ray's setting.

Every job must be a function importable by name on the workers (ropeexport installed there, its paths readable
there: shared storage), and its item and result plain picklable data.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ropeexport.errors import FieldError, SpecError

T = TypeVar("T")
R = TypeVar("R")

ADDRESSES = ("local", "auto", "HOST:PORT", "ray://HOST:PORT")
EXTRA = 'the cluster extra: pip install -c constraints.txt -e ".[cluster]"'
# Ray's own retries of a task whose worker died (its default is 3 as well; said here so the docs and tests can).
RETRIES = 3
# How long a remote address may take to accept a TCP connection before it is called unreachable: the bad-input
# line must come within 30 s (issue 44), and a head node on a network answers in milliseconds.
CONNECT_SECONDS = 10.0
_HOST_PORT = re.compile(r"^(?:ray://)?(?P<host>[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:]+\]):(?P<port>[0-9]{1,5})$")


@dataclass(frozen=True)
class Address:
    """A parsed ``--ray`` address: ``kind`` is ``local``, ``auto``, ``gcs`` (HOST:PORT) or ``client`` (ray://)."""

    text: str
    kind: str
    host: str = ""
    port: int = 0


def parse_address(text: str, field: str = "ray") -> Address:
    """``text`` as an ``Address``; SpecError naming ``field`` and the forms allowed (``ADDRESSES``)."""
    if text in ("local", "auto"):
        return Address(text, text)
    match = _HOST_PORT.match(text) if isinstance(text, str) else None
    if match is None or not 0 < int(match["port"]) < 65536:
        raise SpecError(field, f"{text!r} is not a Ray address; allowed: {', '.join(ADDRESSES)} (port 1-65535)")
    kind = "client" if text.startswith("ray://") else "gcs"
    return Address(text, kind, match["host"].strip("[]"), int(match["port"]))


def ray_module(field: str = "ray") -> Any:
    """The ``ray`` module, imported now (never at ropeexport's import); SpecError naming the extra when absent."""
    try:
        import ray
    except ImportError:
        raise SpecError(field, f"needs Ray, which is not installed here: install {EXTRA}") from None
    return ray


def unreachable(address: Address, seconds: float = CONNECT_SECONDS) -> str | None:
    """Why nothing answers at a remote address (a TCP connection refused, timed out, a name that does not resolve),
    or None when something accepts the connection (or the address is not remote).
    """  # noqa: D205
    if address.kind not in ("gcs", "client"):
        return None
    try:
        with socket.create_connection((address.host, address.port), timeout=seconds):
            return None
    except TimeoutError:
        return f"no answer within {seconds:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)


def blas_threads() -> dict[str, str]:
    """The thread counts of this process's BLAS (numpy's OpenBLAS: its variables as set here, else every CPU this
    process may use, OpenBLAS's own default), for the workers of a local Ray instance. Ray gives each worker one thread
    per CPU its task asked for (OMP_NUM_THREADS=1), and a float64 matmul's last bits follow the thread count (the
    reduction splits with it: measured on a decoder's truth, 1e-16 relative): with these, a run on local Ray writes
    the bytes a run without it writes.
    """  # noqa: D205
    count = str(len(os.sched_getaffinity(0)))
    return {name: os.environ.get(name, count) for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


@contextlib.contextmanager
def connected(address: Address, field: str = "ray") -> Iterator[Any]:
    """The ``ray`` module connected to ``address`` (module doc); a local instance started here is stopped on the
    way out. SpecError naming ``field`` when Ray is absent or the address does not answer.
    """  # noqa: D205
    ray = ray_module(field)
    why = unreachable(address)
    if why is not None:
        raise SpecError(field, f"cannot reach a Ray cluster at {address.text!r}: {why}")
    if ray.is_initialized():  # the caller connected already: its connection, kept open
        yield ray
        return
    target = {"local": "local", "auto": "auto"}.get(address.kind, address.text)
    settings: dict[str, Any] = {}
    if address.kind == "local":  # this machine's workers compute as this process would (module doc: BLAS threads)
        settings["runtime_env"] = {"env_vars": blas_threads()}
    handlers, environ = _signal_handlers(), dict(os.environ)
    try:
        ray.init(address=target, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                 **settings)  # fmt: skip
    except (ConnectionError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        _put_back(handlers, environ, set(os.environ) | set(environ))
        raise SpecError(field, f"cannot connect to Ray at {address.text!r}: {first}") from None
    set_by_init = {k for k in set(os.environ) | set(environ) if os.environ.get(k) != environ.get(k)}
    try:
        yield ray
    finally:
        ray.shutdown()
        # ray.init installs its own SIGTERM handler and sets RAY_* variables and PYTHONBREAKPOINT; ray.shutdown leaves
        # them, so a caller that goes on (a Python API user, a test run) would have lost its own handler for good
        _put_back(handlers, environ, set_by_init)


def _signal_handlers() -> dict[int, Any]:
    """The process's SIGINT and SIGTERM handlers (none off the main thread: handlers belong to it)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}


def _put_back(handlers: dict[int, Any], environ: dict[str, str], names: set[str]) -> None:
    """``handlers`` installed again; the variables ``names`` as ``environ`` had them (absent where it lacked them)."""
    for signum, handler in handlers.items():
        if handler is not None:  # None: a handler not installed from Python, which cannot be put back from here
            signal.signal(signum, handler)
    for name in names:
        if name in environ:
            os.environ[name] = environ[name]
        else:
            os.environ.pop(name, None)


@dataclass(frozen=True)
class _Raised:
    """A FieldError a job raised, carried back as plain fields (its class's own ``__init__`` may not unpickle)."""

    kind: type[FieldError]
    field: str
    message: str

    def again(self) -> FieldError:
        error = self.kind.__new__(self.kind)
        FieldError.__init__(error, self.field, self.message)
        return error


def _guarded(call: Callable[[Any], Any], item: Any) -> Any:
    """A job as a Ray task runs it: a FieldError comes back as data, raised again in the driver."""
    try:
        return call(item)
    except FieldError as exc:
        return _Raised(type(exc), exc.field, exc.message)


@dataclass(frozen=True)
class Lost(Generic[T]):
    """A job Ray gave up on (its worker died ``RETRIES`` + 1 times, or the cluster went away): the item and why."""

    item: T
    reason: str


def fan_out(
    call: Callable[[T], R],
    items: Sequence[T],
    ray: str | None,
    on_result: Callable[[int, R], None] | None = None,
    on_lost: Callable[[Lost[T]], R] | None = None,
    field: str = "ray",
) -> list[R]:
    """``[call(item) for item in items]``: in this process when ``ray`` is None (Ray not imported), else one Ray task
    per item on the cluster at ``ray`` (module doc). ``on_result(index, result)`` is called in this process as each
    job comes back (in the order they finish on a cluster): where the driver writes it. A job whose worker died more
    than ``RETRIES`` times becomes ``on_lost(Lost)``'s result (default: a RuntimeError naming it). A FieldError a
    job raises is raised here, as it would be without Ray (the jobs still running are cancelled).
    """  # noqa: D205
    told = on_result or (lambda index, result: None)
    if ray is None:
        out = []
        for index, item in enumerate(items):
            result = call(item)
            told(index, result)
            out.append(result)
        return out
    address = parse_address(ray, field)
    with connected(address, field) as module:
        task = module.remote(max_retries=RETRIES, retry_exceptions=False)(_guarded)
        pending = {task.remote(call, item): index for index, item in enumerate(items)}
        results: dict[int, R] = {}
        try:
            _gather(module, pending, items, results, told, on_lost)
        finally:
            for ref in pending:  # what an error left running: a cluster's workers are not ours to keep busy
                with contextlib.suppress(Exception):
                    module.cancel(ref, force=True)
        return [results[i] for i in range(len(items))]


def _gather(module: Any, pending: dict[Any, int], items: Sequence[T], results: dict[int, R],
            told: Callable[[int, R], None], on_lost: Callable[[Lost[T]], R] | None) -> None:  # fmt: skip
    """Each task's result as it finishes, handed to ``told`` (``fan_out``); ``pending`` emptied as they come."""
    while pending:
        done, _ = module.wait(list(pending), num_returns=1)
        for ref in done:
            index = pending.pop(ref)
            try:
                value = module.get(ref)
            except (module.exceptions.WorkerCrashedError, module.exceptions.NodeDiedError,
                    module.exceptions.ObjectLostError) as exc:  # fmt: skip
                lost = Lost(items[index], f"{type(exc).__name__} after {RETRIES} retries")
                if on_lost is None:
                    raise RuntimeError(f"Ray lost the job of item {index}: {lost.reason}") from None
                value = on_lost(lost)
            if isinstance(value, _Raised):
                raise value.again()
            told(index, value)
            results[index] = value
