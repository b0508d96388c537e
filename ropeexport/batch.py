"""Building many artifacts: in this process or in ``jobs`` worker processes, reporting each stage as it starts.

Each artifact is still built by ``pipeline.build`` (atomic: its folder appears whole or not at all).
Workers are spawned, not forked (torch and ONNX Runtime hold threads), and each gets an equal share of the cores.
Stage events travel back through a queue as ``(name, stage)``; ``on_stage`` and ``on_done`` run in the calling process.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ropeexport.catalog import spec_from_dict
from ropeexport.encoding import EncodingKind
from ropeexport.pipeline import BuildResult, Stage, build


class OnStage(Protocol):
    """``on_stage(artifact name, stage, done, total)``: ``done`` / ``total`` count a stage's steps (probes) where it
    has them (None where it has none).
    """  # noqa: D205

    def __call__(self, name: str, stage: str, done: int | None = None, total: int | None = None, /) -> None:
        """Told in the calling process, as the worker building ``name`` reaches ``stage``."""


OnDone = Callable[[BuildResult], None]


@dataclass(frozen=True)
class Job:
    """One artifact to build: its validated spec as a dict, and the provenance recorded in its manifest."""

    spec: dict[str, Any]
    origin: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The artifact's folder name."""
        return str(self.spec["name"])


@dataclass(frozen=True)
class Settings:
    """What every job in a batch shares."""

    out: Path
    runtimes: list[str]
    atol: dict[str, float] = field(default_factory=dict)
    rtol: dict[str, float] = field(default_factory=dict)
    replace: bool = False  # replace an artifact of the same name built from another spec


def _build(job: Job, settings: Settings, stage: Stage) -> BuildResult:
    kind = EncodingKind(settings.runtimes, settings.atol, settings.rtol)
    return build(kind, spec_from_dict(job.spec), settings.out, settings.replace, job.origin, job.sources, stage)


_events: Any = None  # the worker's end of the stage queue


def _init_worker(events: Any, threads: int) -> None:
    global _events
    _events = events
    import torch

    torch.set_num_threads(threads)


def _work(job: Job, settings: Settings) -> BuildResult:
    return _build(job, settings, lambda *event: _events.put((job.name, *event)))


def build_all(
    jobs: Sequence[Job],
    settings: Settings,
    workers: int = 1,
    on_stage: OnStage | None = None,
    on_done: OnDone | None = None,
) -> list[BuildResult]:
    """Build every job; results in the jobs' order. An exception in one build stops the batch and is re-raised."""
    stage_of: OnStage = on_stage or (lambda *event: None)
    on_done = on_done or (lambda result: None)
    if workers <= 1 or len(jobs) <= 1:
        results = []
        for job in jobs:

            def stage(*event: Any, n: str = job.name) -> None:
                stage_of(n, *event)

            result = _build(job, settings, stage)
            on_done(result)
            results.append(result)
        return results
    workers = min(workers, len(jobs))
    context = multiprocessing.get_context("spawn")
    events = context.Queue()
    threads = max(1, (os.cpu_count() or 1) // workers)
    done: dict[str, BuildResult] = {}
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker, initargs=(events, threads))
    try:
        pending: set[Future[BuildResult]] = {pool.submit(_work, job, settings) for job in jobs}
        while pending:
            finished, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
            _drain(events, stage_of)
            for future in finished:
                result = future.result()  # re-raises a worker's exception here
                done[result.name] = result
                on_done(result)
    except BaseException:
        # Queued builds never start; those in flight finish (each is atomic) so no worker is killed mid-write.
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    _drain(events, stage_of)
    return [done[job.name] for job in jobs]


def _drain(events: Any, on_stage: OnStage) -> None:
    while True:
        try:
            name, *event = events.get_nowait()
        except queue.Empty:
            return
        on_stage(name, *event)
