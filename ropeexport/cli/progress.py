"""Progress display for multi-artifact builds (rich), on stderr so that stdout stays for results.

One overall bar, and one line per artifact in flight showing its current stage (export, reference, runtime, verify,
report). Shown only on a terminal: in CI logs and pipes the per-artifact result lines are the record.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text


class _Count(MofNCompleteColumn):
    """N/M for the overall bar; nothing for an artifact's line (it has no count, only a stage)."""

    def render(self, task: Task) -> Text:
        return Text("") if task.total is None else super().render(task)


class BuildProgress:
    """``with BuildProgress(total, enabled) as p: p.stage(name, stage); p.done(name, line)``."""

    def __init__(self, total: int, enabled: bool = True, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            _Count(),
            TimeElapsedColumn(),
            console=self.console,
            disable=not self.enabled,
            transient=True,
            # Result lines are stdout's. On the same terminal rich prints them above the bars; piped, they go to
            # the pipe untouched while the bars stay on the terminal's stderr.
            redirect_stdout=sys.stdout.isatty(),
        )
        self.overall = self.progress.add_task("artifacts", total=total)
        self.tasks: dict[str, Any] = {}
        self.finished: set[str] = set()

    def __enter__(self) -> BuildProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.progress.__exit__(kind, value, tb)

    def stage(self, name: str, stage: str) -> None:
        """Show ``name`` at ``stage`` (events that arrive after the artifact finished are dropped)."""
        if name in self.finished:
            return
        description = f"  {name}: {stage}"
        if name not in self.tasks:
            self.tasks[name] = self.progress.add_task(description, total=None)
        else:
            self.progress.update(self.tasks[name], description=description)

    def done(self, name: str, line: str | None) -> None:
        """Remove the artifact's line, print its result line above the bars (when given), advance the total."""
        self.finished.add(name)
        if name in self.tasks:
            self.progress.remove_task(self.tasks.pop(name))
        self.progress.advance(self.overall)
        if line is not None:
            print(line, flush=True)
