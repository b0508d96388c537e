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


def test_probe_counts_move_the_artifact_bar_and_the_overall_bar() -> None:
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120)
    with BuildProgress(2, console=console) as progress:
        progress.stage("a", "export")
        progress.stage("a", "ort: sweep[0..16383]", 3, 8)
        progress.progress.refresh()
        overall = progress.progress.tasks[0]
        assert overall.completed == 3 / 8  # one artifact 3/8 through its probes: the overall bar moved
        assert progress.progress.tasks[1].completed == 3 and progress.progress.tasks[1].total == 8
        progress.done("a", None)
        assert progress.progress.tasks[0].completed == 1
        progress.stage("b", "reference: start", 1, 2)
        assert progress.progress.tasks[0].completed == 1.5
        progress.done("b", None)
    drawn = screen.getvalue()
    assert "a: ort: sweep[0..16383]" in drawn and "3/8" in drawn and "0/2" in drawn
