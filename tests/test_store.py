"""The store (``ropeexport.store``): whole or not at all, one writer per name, a failed rebuild never costs a verified
artifact, and leftovers of dead writers are cleaned.

The faults are real: a build runs in a subprocess and is killed with SIGKILL at a chosen moment (the subprocess's
script pauses at that moment by wrapping one store function: production code has no test hook), then the folder is
checked with ``rx.verify`` (the hashes, the model, and every probe again), and the next build is checked to clean
what the dead one left. Artifacts are a small RoPE artifact (about a second to build).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import ropeexport as rx
from ropeexport.errors import InputError, SpecError
from ropeexport.store import FAILED, Store
from tests.clirun import run

ROOT = Path(__file__).resolve().parents[1]
FIELDS = {"head_dim": 16, "num_heads": 2, "max_positions": 64, "name": "small"}
CLI = ["build", "--head-dim", "16", "--num-heads", "2", "--max-positions", "64", "--name", "small", "--quiet"]


def _spec(**changes: object) -> rx.SpecBase:
    return rx.spec("rope", **(FIELDS | changes))


def _script(out: Path, pause: str, marker: Path, theta: float = 10000.0) -> str:
    """A build of ``small`` into ``out`` that writes ``marker`` and sleeps when it reaches ``pause``."""
    return textwrap.dedent(f"""
        import time, pathlib, ropeexport as rx
        from ropeexport import store, pipeline
        marker = pathlib.Path({str(marker)!r})

        def stop_here():
            marker.write_text("here")
            time.sleep(600)

        def wrap(module, name, before=True):
            real = getattr(module, name)
            def wrapped(*args, **kwargs):
                if before:
                    stop_here()
                out = real(*args, **kwargs)
                if not before:
                    stop_here()
                return out
            setattr(module, name, wrapped)

        pause = {pause!r}
        if pause == "verifying":       # the work folder holds a model, the old artifact is untouched
            from ropeexport import encoding
            wrap(encoding, "verify_artifact")
        elif pause == "committing":    # manifest written, nothing swapped yet
            wrap(store, "_swap_in")
        elif pause == "exchanged":     # the new artifact is in place, the old one not yet removed
            wrap(store, "_exchange", before=False)
        elif pause == "renamed-aside": # no RENAME_EXCHANGE: the old artifact renamed aside, the new one not yet in
            store._exchange = lambda a, b: False
            real_rename = pathlib.Path.rename
            def rename(self, target):
                out = real_rename(self, target)
                if ".old." in str(target):
                    stop_here()
                return out
            pathlib.Path.rename = rename
        from ropeexport.cli import main
        raise SystemExit(main(["build", "--head-dim", "16", "--num-heads", "2", "--max-positions", "64", "--name",
                               "small", "--theta", "{theta}", "--out", {str(out)!r}, "--replace", "--quiet"]))
    """)


def _run_until(out: Path, pause: str, tmp: Path, theta: float = 10000.0) -> subprocess.Popen[bytes]:
    marker = tmp / f"reached-{pause}"
    script = tmp / f"build-{pause}.py"
    script.write_text(_script(out, pause, marker, theta))
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the build ended before {pause}: {proc.stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the build never reached {pause}")
        time.sleep(0.05)
    return proc


def _hidden(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def verified(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("store") / "out"
    [result] = rx.build_all([_spec()], out)  # a tree, with its index
    assert result.passed
    return out


def _copy(verified: Path, tmp_path: Path) -> Path:
    import shutil

    out = tmp_path / "out"
    shutil.copytree(verified, out)
    return out


# (signal, moment the build gets it, what NAME holds after: the old build's theta or the new one's). SIGKILL stops
# the process where it is; SIGTERM unwinds it like Ctrl-C (exit 143) and it removes its own work on the way out.
KILLS = [
    ("SIGKILL", "verifying", 10000.0),
    ("SIGKILL", "committing", 10000.0),
    ("SIGKILL", "exchanged", 20000.0),
    ("SIGKILL", "renamed-aside", 10000.0),  # the next writer puts the old artifact back
    ("SIGTERM", "verifying", 10000.0),
    ("SIGTERM", "committing", 10000.0),
]


@pytest.mark.slow
@pytest.mark.parametrize(("how", "pause", "theta"), KILLS, ids=[f"{k[0]}-{k[1]}" for k in KILLS])
def test_a_killed_rebuild_leaves_a_verifiable_artifact(verified: Path, tmp_path: Path, how: str, pause: str,
                                                       theta: float) -> None:  # fmt: skip
    out = _copy(verified, tmp_path)
    proc = _run_until(out, pause, tmp_path, theta=20000.0)  # a rebuild with another theta, stopped mid-way
    proc.send_signal(getattr(signal, how))
    code = proc.wait(timeout=60)
    if how == "SIGTERM":
        assert code == 143 and proc.stderr.read().decode().strip() == "ropeexport: terminated"
        assert _hidden(out) == []  # unwound: its work folder and lock went with it
    else:
        assert _hidden(out), "a killed build leaves its work (or its lock) behind, to be cleaned by the next writer"
    Store(out).clean()
    assert _hidden(out) == []
    [result] = rx.verify(out / "small")
    assert result.passed
    assert result.encoding_report.spec["theta"] == theta
    assert not (out / FAILED).exists()


def test_a_second_writer_of_one_name_is_refused_while_the_first_writes(verified: Path, tmp_path: Path) -> None:
    out = _copy(verified, tmp_path)
    proc = _run_until(out, "verifying", tmp_path)
    try:
        with pytest.raises(InputError, match=r"^name: another ropeexport process \(pid \d+\) is writing .*small"):
            rx.build(_spec(), out)
        # another name is not held up
        assert rx.build(_spec(name="other"), out).passed
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert rx.verify(out / "small")[0].passed


@pytest.mark.slow
def test_two_concurrent_cli_builds_of_one_name_leave_one_whole_artifact(tmp_path: Path) -> None:
    out = tmp_path / "out"
    command = [sys.executable, "-m", "ropeexport", "build", "--head-dim", "16", "--num-heads", "2",
               "--max-positions", "64", "--name", "small", "--out", str(out), "--quiet"]  # fmt: skip
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    runs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
    codes = [(p.wait(timeout=300), p.stderr.read().decode()) for p in runs]
    assert any(code == 0 for code, _ in codes), codes
    for code, err in codes:  # each either built it or was told, in one line, that another process was writing
        assert code == 0 or (code == 2 and "another ropeexport process" in err and err.count("\n") == 1), (code, err)
    assert _hidden(out) == []
    assert rx.verify(out / "small")[0].passed


def test_a_failed_rebuild_keeps_the_verified_artifact(verified: Path, tmp_path: Path) -> None:
    out = _copy(verified, tmp_path)
    before = (out / "small" / "manifest.json").read_text()
    failed = rx.build(_spec(dtype="fp32"), out, atol=0.0, rtol=0.0)  # the same spec, judged with no tolerance: fails
    assert not failed.passed
    assert failed.kept == out / "small" and failed.path == out / FAILED / "small"
    assert (out / "small" / "manifest.json").read_text() == before
    assert rx.verify(out / "small")[0].passed
    index = json.loads((out / "index.json").read_text())
    [line] = [a for a in index["artifacts"] if a["name"] == "small"]
    assert line["passed"] and line["failed_rebuild"] == f"{FAILED}/small/report.html"
    assert rx.build(_spec(), out).passed  # a passing rebuild clears the failed one
    assert not (out / FAILED).exists()


def test_a_failed_build_where_nothing_verified_stood_takes_the_name(tmp_path: Path) -> None:
    result = rx.build(_spec(), tmp_path / "out", atol=0.0, rtol=0.0)
    assert not result.passed and result.kept is None and result.path == tmp_path / "out" / "small"


@pytest.mark.parametrize(
    ("name", "message"),
    [("index.json", "the tree's own index file"), ("INDEX.HTML", "the tree's own index file"),
     ("_failed", "starting with a letter or digit"), ("", "starting with a letter or digit"),
     (".hidden", "starting with a letter or digit"), ("a/b", "starting with a letter or digit")],
)  # fmt: skip
def test_names_the_store_cannot_hold_are_refused_before_anything_is_written(tmp_path: Path, name: str,
                                                                            message: str) -> None:  # fmt: skip
    with pytest.raises(SpecError, match=message):
        rx.build(_spec(name=name) if name else _spec(), tmp_path / "out") if name else Store(tmp_path).check(name)
    assert not (tmp_path / "out").exists()


def test_a_dangling_link_as_out_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").symlink_to(tmp_path / "nowhere")
    with pytest.raises(SpecError, match="out_dir: .* is a link to nothing"):
        rx.build(_spec(), tmp_path / "out")
    assert (tmp_path / "out").is_symlink() and not (tmp_path / "nowhere").exists()


def test_a_fifo_where_the_manifest_was_does_not_hang_a_rebuild(verified: Path, tmp_path: Path) -> None:
    out = _copy(verified, tmp_path)
    (out / "small" / "manifest.json").unlink()
    os.mkfifo(out / "small" / "manifest.json")
    with pytest.raises(SpecError, match="holds a damaged ropeexport artifact .* give `replace`"):
        rx.build(_spec(), out)
    assert rx.build(_spec(), out, replace=True).passed  # the FIFO is replaced, never opened for reading
    assert (out / "small" / "manifest.json").is_file()


# -- what a hostile or damaged tree must not make the store do (the review's findings, each a row) --------------------


def _plant_failed_link(out: Path, tmp: Path) -> None:
    victim = tmp / "victim" / "small"
    victim.mkdir(parents=True)
    (victim / "important.txt").write_text("mine")
    (out / FAILED).symlink_to(tmp / "victim")


def _plant_failed_file(out: Path, tmp: Path) -> None:
    (out / FAILED).write_text("not a folder")


def _plant_lock_link(out: Path, tmp: Path) -> None:
    (out / ".small.lock").symlink_to(tmp / "nowhere")


def _plant_lock_folder(out: Path, tmp: Path) -> None:
    (out / ".small.lock").mkdir()


# (what is planted in the tree, the words of the one line a rebuild of `small` gives)
PLANTED = [
    ("_failed a link out of the tree", _plant_failed_link, "is not ropeexport's folder of failed rebuilds"),
    ("_failed a file", _plant_failed_file, "is not ropeexport's folder of failed rebuilds"),
    ("the name's lock a link", _plant_lock_link, "is not a lock file of ropeexport's"),
    ("the name's lock a folder", _plant_lock_folder, "is not a lock file of ropeexport's"),
]


@pytest.mark.parametrize(("what", "plant", "words"), PLANTED, ids=[p[0] for p in PLANTED])
def test_a_planted_entry_is_refused_in_one_line_and_touches_nothing(
    verified: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str, plant: Any, words: str
) -> None:
    out = _copy(verified, tmp_path)
    plant(out, tmp_path)
    before = (out / "small" / "manifest.json").read_text()
    code, _, err = run([*CLI, "--out", str(out), "--atol", "0", "--rtol", "0"], capsys)  # a failing rebuild
    assert code == 2 and err.count("\n") == 1 and words in err, err
    assert (out / "small" / "manifest.json").read_text() == before
    if (tmp_path / "victim").exists():
        assert (tmp_path / "victim" / "small" / "important.txt").read_text() == "mine"


def test_another_names_planted_lock_does_not_stop_a_build(verified: Path, tmp_path: Path) -> None:
    out = _copy(verified, tmp_path)
    (out / ".other.lock").symlink_to(tmp_path / "nowhere")
    (out / ".third.lock").mkdir()
    assert rx.build(_spec(name="fourth"), out).passed


def test_a_verify_waits_for_no_writer_and_a_writer_for_no_verify(verified: Path, tmp_path: Path) -> None:
    out = _copy(verified, tmp_path)
    proc = _run_until(out, "verifying", tmp_path)  # a rebuild of `small` holds its lock
    try:
        with pytest.raises(InputError, match=r"^path: another ropeexport process \(pid \d+\) is writing or verifying"):
            rx.verify(out / "small")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    Store(out).clean()
    with Store(out).reading("small"):  # a verification in progress: a rebuild waits its grace, then is refused
        with pytest.raises(InputError, match="another ropeexport process"):
            rx.build(_spec(), out)


def test_a_damaged_artifact_is_rebuilt_with_replace_only(verified: Path, tmp_path: Path) -> None:
    out = _copy(verified, tmp_path)
    manifest = out / "small" / "manifest.json"
    manifest.write_text(manifest.read_text()[:100])
    with pytest.raises(SpecError, match="holds a damaged ropeexport artifact .* give `replace`"):
        rx.build(_spec(), out)
    assert rx.build(_spec(), out, replace=True).passed
    assert rx.verify(out / "small")[0].passed


# (what the manifest records beside the spec, the identity a build brings, the words of the refusal or None): the
# identity (a decoder's weights) is compared where the manifest records it; a manifest of an earlier version, which
# did not, is rebuilt from the same spec as it was then.
IDENTITIES = [
    ({"weights": "seeded"}, {"weights": "seeded"}, None),
    ({"weights": "seeded"}, {"weights": "checkpoint 'b'"}, "(weights: 'seeded' there, \"checkpoint 'b'\" now)"),
    ({}, {"weights": "checkpoint 'b'"}, None),
    ({"weights": "seeded"}, None, None),
]


@pytest.mark.parametrize(("recorded", "identity", "words"), IDENTITIES)
def test_the_identity_beside_the_spec_is_compared_where_recorded(
    verified: Path, tmp_path: Path, recorded: dict[str, str], identity: dict[str, str] | None, words: str | None
) -> None:
    out = _copy(verified, tmp_path)
    manifest = out / "small" / "manifest.json"
    manifest.write_text(json.dumps(json.loads(manifest.read_text()) | recorded))
    spec = json.loads(manifest.read_text())["spec"]
    if words is None:
        assert Store(out).check("small", spec, identity=identity) == out / "small"
    else:
        with pytest.raises(SpecError, match=re.escape(words)):
            Store(out).check("small", spec, identity=identity)
    with pytest.raises(SpecError, match=r"another spec \(head_dim: 16 there, 32 now\)"):  # the spec first, always
        Store(out).check("small", spec | {"head_dim": 32}, identity=identity)


def test_leftovers_of_every_shape_are_cleaned_and_nothing_else(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    dead = [".z.building.1.q.lock", ".index.json.abcd1234", ".small.building.123.abcd_123", ".small.committing"]
    (out / dead[0]).write_text("1")  # a dead writer's lock of a name with dots in it
    (out / dead[1]).write_text("{")  # an index write that died
    (out / dead[2]).mkdir()
    (out / dead[3]).write_text("ropeexport commit 1\nsmall.data\nsmall\n")
    (out / "small.data").write_text("moved in before the writer died")
    kept = [".building-cache", ".notes.old.1.keep", ".x.committing", "todo.txt"]  # look-alikes of the user's
    (out / kept[0]).mkdir()
    (out / kept[1]).mkdir()
    (out / kept[2]).write_text("todo.txt\n")
    (out / kept[3]).write_text("mine")
    Store(out).clean()
    assert sorted(p.name for p in out.iterdir()) == sorted(kept)
