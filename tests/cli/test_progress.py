"""The build progress display: stages shown per artifact, result lines printed, late events dropped."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from ropeexport.cli import progress as progress_module
from ropeexport.cli.progress import PLAIN_EVERY, BuildProgress


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


def test_progress_off_a_terminal_prints_plain_lines_not_bars(capsys, monkeypatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    screen = io.StringIO()
    with BuildProgress(2, console=Console(file=screen, force_terminal=False)) as progress:
        progress.stage("a", "export")  # an artifact's first stage: a line
        clock[0] += 1
        progress.stage("a", "reference", 1, 4)  # 1 s later: none (a log is not flooded)
        progress.stage("b", "export")  # b's first: a line
        clock[0] += PLAIN_EVERY
        progress.stage("a", "ort: sweep[0..16383]", 3, 4)  # PLAIN_EVERY later: a line, with the count
        progress.done("a", "PASS a")
        progress.done("b", None)
    captured = capsys.readouterr()
    assert screen.getvalue() == "" and captured.out == "PASS a\n"  # no bars; results alone on stdout
    assert captured.err.splitlines() == ["[    0s] a: export", "[    1s] b: export",
                                         "[    6s] a: ort: sweep[0..16383] (3/4)"]  # fmt: skip


def test_quiet_prints_nothing_off_a_terminal(capsys) -> None:
    with BuildProgress(1, enabled=False, console=Console(file=io.StringIO(), force_terminal=False)) as progress:
        progress.stage("a", "export")
        progress.done("a", None)
    assert capsys.readouterr() == ("", "")


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


@pytest.mark.slow
def test_a_decoder_build_off_a_terminal_tells_its_layers_and_scenarios(tiny_checkpoint, tmp_path, capsys,
                                                                       monkeypatch) -> None:  # fmt: skip
    # A real-size decoder exports for minutes and runs float64 passes for minutes more: off a terminal it says
    # where it is (every stage here, PLAIN_EVERY set to 0), and stdout keeps its result lines alone.
    from ropeexport.cli import main

    monkeypatch.setattr(progress_module, "PLAIN_EVERY", 0.0)
    ckpt = tiny_checkpoint("llama")
    capsys.readouterr()
    code = main(["build", "--artifact", "decoder", "--checkpoint", str(ckpt), "--no-eager", "--out",
                 str(tmp_path / "out"), "--name", "tiny"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = [line.split("] ", 1)[1] for line in captured.err.splitlines() if line.startswith("[")]
    assert lines[:3] == ["tiny: export", "tiny: export (0/2)", "tiny: export (1/2)"], lines
    assert "tiny: verify" in lines and "tiny: every scenario: float64 (1/2)" in lines, lines
    assert any(line.startswith("tiny: decode-64 (0/") for line in lines), lines
    assert lines[-1] == "tiny: report"
    assert all(not line.startswith("[") for line in captured.out.splitlines())
