"""The build progress display: stages shown per artifact, result lines printed, late events dropped."""

from __future__ import annotations

import io

from rich.console import Console

from ropeexport.cli.progress import BuildProgress


def test_progress_on_a_terminal_shows_stages_and_counts(capsys) -> None:
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=100)
    with BuildProgress(2, console=console) as progress:
        progress.stage("a", "export")
        progress.stage("a", "verify")
        progress.stage("b", "reference")
        progress.progress.refresh()
        progress.done("a", "PASS a")
        progress.stage("a", "report")  # arrives after the result: dropped, no new line for a
        assert "a" not in progress.tasks
        progress.done("b", "PASS b")
        progress.progress.refresh()
    drawn = screen.getvalue()
    assert "a: verify" in drawn and "b: reference" in drawn and "2/2" in drawn and "0/?" not in drawn
    assert capsys.readouterr().out.split() == ["PASS", "a", "PASS", "b"]


def test_progress_off_a_terminal_prints_only_result_lines(capsys) -> None:
    screen = io.StringIO()
    with BuildProgress(1, console=Console(file=screen, force_terminal=False)) as progress:
        progress.stage("a", "export")
        progress.done("a", "PASS a")
    assert screen.getvalue() == "" and capsys.readouterr().out == "PASS a\n"
