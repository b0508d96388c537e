"""Progress display for multi-artifact builds (rich), on stderr so that stdout stays for results.

One overall bar with an ETA, and one bar per artifact in flight showing its current stage (export, then per probe:
reference, runtime, verify, e.g. ``ort: sweep[16384..32767]``, then guards and properties, report). An artifact's
bar counts its probes; the overall bar counts artifacts and advances by each one's finished share of probes, so a
single 60 s artifact moves it too. On a terminal only; elsewhere (CI logs, ``| tee``) a plain line on stderr instead,
``[  12s] NAME: STAGE (3/12)``, for each artifact's first stage and then at most every ``PLAIN_EVERY`` seconds, so a
long build is never silent and a log is not flooded with one line per probe.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class _Count(MofNCompleteColumn):
    """N/M artifacts finished for the overall bar, N/M probes for an artifact's; nothing before a count is known."""

    def render(self, task: Task) -> Text:
        if task.total is None:
            return Text("")
        if task.fields.get("overall"):
            return Text(f"{int(task.completed + 1e-9)}/{int(task.total)}", style="progress.download")
        return super().render(task)


class _Remaining(TimeRemainingColumn):
    """The ETA, for the overall bar only (an artifact's own probes differ too much in cost to extrapolate)."""

    def render(self, task: Task) -> Text:
        return super().render(task) if task.fields.get("overall") else Text("")


PLAIN_EVERY = 5.0  # seconds between plain progress lines (no terminal)


class BuildProgress:
    """``with BuildProgress(total, enabled) as p: p.stage(name, stage); p.done(name, line)``."""

    def __init__(self, total: int, enabled: bool = True, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.plain = enabled and not self.console.is_terminal  # lines, not bars (module doc)
        self.start = self.last = time.monotonic()
        self.announced: set[str] = set()
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            _Count(),
            TimeElapsedColumn(),
            _Remaining(),
            console=self.console,
            disable=not self.enabled,
            transient=True,
            # Result lines are stdout's. On the same terminal rich prints them above the bars; piped, they go to
            # the pipe untouched while the bars stay on the terminal's stderr.
            redirect_stdout=sys.stdout.isatty(),
        )
        self.overall = self.progress.add_task("artifacts", total=total, overall=True)
        self.tasks: dict[str, Any] = {}
        self.share: dict[str, float] = {}  # each artifact in flight: its finished fraction of probes
        self.finished: set[str] = set()

    def __enter__(self) -> BuildProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.progress.__exit__(kind, value, tb)

    def stage(self, name: str, stage: str, done: int | None = None, total: int | None = None) -> None:
        """Show ``name`` at ``stage``, ``done`` of ``total`` steps (events after the artifact finished are dropped)."""
        if name in self.finished:
            return
        if self.plain:
            self._line(name, stage, done, total)
        description = f"  {name}: {stage}"
        if name not in self.tasks:
            self.tasks[name] = self.progress.add_task(description, total=None)
        if done is None or not total:
            self.progress.update(self.tasks[name], description=description)
            return
        self.progress.update(self.tasks[name], description=description, completed=done, total=total)
        self.share[name] = done / total
        self._advance_overall()

    def _line(self, name: str, stage: str, done: int | None, total: int | None) -> None:
        """A plain progress line on stderr: an artifact's first stage, then one every ``PLAIN_EVERY`` seconds."""
        now = time.monotonic()
        if name in self.announced and now - self.last < PLAIN_EVERY:
            return
        self.announced.add(name)
        self.last = now
        count = f" ({done}/{total})" if done is not None and total else ""
        print(f"[{now - self.start:5.0f}s] {name}: {stage}{count}", file=sys.stderr, flush=True)

    def _advance_overall(self) -> None:
        self.progress.update(self.overall, completed=len(self.finished) + sum(self.share.values()))

    def done(self, name: str, line: str | None) -> None:
        """Remove the artifact's line, print its result line above the bars (when given), advance the total."""
        self.finished.add(name)
        self.share.pop(name, None)
        if name in self.tasks:
            self.progress.remove_task(self.tasks.pop(name))
        self._advance_overall()
        if line is not None:
            print(line, flush=True)
