"""Package write faults: ``ropeexport package`` never loses what is at ``--out``, nor mixes two writers' packages.

An ``--out`` that is not a package is refused (one line, exit 2, nothing written); kill -9 during a write leaves the
package that was there, byte for byte, and the next write removes what the dead one left; a rebuild whose check fails
leaves the package that passed in place and is kept apart at ``_failed/NAME``; two processes packaging different
decoders into one ``--out`` at once leave one whole package (each file from one of them) and a refusal or a win.
transformers.js (Node) is not needed for any of these: it is pointed at a folder without it (its engine skipped, exit
3), which keeps them cheap.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ropeexport.api.packages import package
from tests.clirun import run

NO_NODE = "ROPEEXPORT_TRANSFORMERSJS_DIR"  # pointed at a folder without generate.mjs: the Node engine is skipped


def _snapshot(root: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under ``root``, hidden ones too ('<dir>' for a folder)."""
    out = {}
    for path in sorted(root.rglob("*")):
        key = path.relative_to(root).as_posix()
        out[key] = "<dir>" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _file(out: Path) -> None:
    out.write_text("mine\n")


def _empty(out: Path) -> None:
    out.mkdir()


def _garbled_manifest(out: Path) -> None:
    out.mkdir()
    (out / "manifest.json").write_text("{")


def _manifest_naming_a_package(out: Path) -> None:
    """Somebody's folder whose manifest.json only says the package's artifact name (no spec, no file list)."""
    out.mkdir()
    (out / "manifest.json").write_text('{"artifact": "transformers.js-package"}\n')
    (out / "notes.txt").write_text("mine\n")


def _a_decoder(out: Path, decoder: Path) -> None:
    shutil.copytree(decoder, out)


# (what is at --out, how to make it, what the one line says after "--out: ")
NOT_A_PACKAGE: list[tuple[str, Callable[..., None], str]] = [
    ("a file", _file, "exists and is not a transformers.js package; give a new folder"),
    ("an empty folder", _empty, "exists and is not a transformers.js package; give a new folder"),
    ("a garbled manifest", _garbled_manifest, "exists and is not a transformers.js package; give a new folder"),
    ("a manifest naming the artifact only", _manifest_naming_a_package,
     "exists and is not a transformers.js package; give a new folder"),
    ("another artifact", _a_decoder, "holds another ropeexport artifact, not a transformers.js package"),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("what", "make", "said"), NOT_A_PACKAGE, ids=[r[0] for r in NOT_A_PACKAGE])
def test_an_out_that_is_not_a_package_is_refused_and_left_as_it_was(
    what: str, make: Callable[..., None], said: str, tmp_path: Path, seeded_decoder: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    out = tmp_path / "web"
    if make is _a_decoder:
        make(out, seeded_decoder)
    else:
        make(out)
    before = _snapshot(tmp_path)
    code, printed, err = run(["package", str(seeded_decoder), "--for", "transformers.js", "--out", str(out)], capsys)
    assert code == 2, printed
    assert err.startswith("ropeexport: error: --out: ") and said in err and err.count("\n") == 1, err
    assert _snapshot(tmp_path) == before  # nothing written, no lock or work folder left


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory, seeded_decoder: Path) -> Path:
    """A package of the seeded decoder that passed (Node skipped), written once for the module; tests copy it."""
    os.environ[NO_NODE] = str(tmp_path_factory.mktemp("no-node"))
    try:
        result = package(seeded_decoder, tmp_path_factory.mktemp("packaged") / "web")
    finally:
        del os.environ[NO_NODE]
    assert result.passed and result.skipped, result.report
    return result.path


def _copy(packaged: Path, tmp_path: Path) -> Path:
    out = tmp_path / "store" / "web"
    shutil.copytree(packaged, out)
    return out


# (kill -9 when this file is in the package's work folder): the model being written; its check running
KILL_AT = ["onnx/model.onnx", "reference.json"]
# The writer, whose commit waits (up to 120 s) until it is killed: reference.json is written a few ms before the commit
# (the check is short with Node skipped), so at a load average of 10-16 the test's poll missed that window and the
# writer had committed (or exited) first; holding the commit makes the kill land before it at any load.
HOLD = """
import sys, time
from ropeexport import store
from ropeexport.cli import main
real = store.Draft.commit

def commit(self, *args, **kwargs):
    time.sleep(120)
    return real(self, *args, **kwargs)

store.Draft.commit = commit
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("written", KILL_AT)
def test_kill_9_during_a_write_leaves_the_previous_package(
    written: str, packaged: Path, seeded_decoder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _copy(packaged, tmp_path)
    before = _snapshot(out)
    env = {**os.environ, NO_NODE: str(tmp_path / "no-node")}
    command = [sys.executable, "-c", HOLD, "package", str(seeded_decoder), "--for", "transformers.js", "--out",
               str(out)]  # fmt: skip
    writer = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline, seen = time.monotonic() + 300, None
    while seen is None and writer.poll() is None and time.monotonic() < deadline:
        seen = next((w for w in out.parent.glob(".web.building.*") if (w / written).is_file()), None)
        time.sleep(0.005)
    if seen is None:
        writer.kill()
        writer.wait()
        pytest.fail(f"the writer never had {written} in its work folder (exit {writer.returncode}): "
                    f"{writer.stderr.read().decode() if writer.stderr else ''}")  # fmt: skip
    writer.send_signal(signal.SIGKILL)
    assert writer.wait() == -signal.SIGKILL
    assert _snapshot(out) == before  # the previous package, byte for byte
    assert seen.is_dir()  # what the dead writer left beside it
    monkeypatch.setenv(NO_NODE, env[NO_NODE])
    result = package(seeded_decoder, out)  # the next write removes the leftovers and replaces the package
    assert result.passed and result.path == out
    assert not list(out.parent.glob(".web.*"))


@pytest.mark.slow
def test_a_failed_rebuild_keeps_the_package_that_passed(
    packaged: Path, seeded_decoder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The rebuild's recorded tokens made to differ from what its model generates: its check fails (exit 1)."""
    from ropeexport.api import packages
    from ropeexport.decoder.transformersjs_check import reference_record

    def wrong(runs):  # noqa: ANN001, ANN202
        record = reference_record(runs)
        first = record["prompts"][0]["tokens"]
        first[0] = (first[0] + 1) % 128  # the seeded decoder's vocabulary
        return record

    out = _copy(packaged, tmp_path)
    before = _snapshot(out)
    monkeypatch.setenv(NO_NODE, str(tmp_path / "no-node"))
    monkeypatch.setattr(packages, "reference_record", wrong)
    code, printed, _ = run(["package", str(seeded_decoder), "--for", "transformers.js", "--out", str(out)], capsys)
    assert code == 1, printed
    failed = out.parent / "_failed" / "web"
    assert f"a package that passed was there: it stays at {out}; this one is kept apart at {failed}" in printed
    assert _snapshot(out) == before
    assert (failed / "report.json").is_file() and '"passed": false' in (failed / "report.json").read_text()


# Two `package` processes at one --out, each from its own decoder (with --replace: either may take the name). Each
# process's commit waits until the other's is reached too (or the other has ended): the moment a store without its
# per-name lock or its atomic exchange would mix the two. One whole package must stay, every file of it from one
# decoder's package written alone (the model, config.json and the recorded tokens differ between the two: a mix shows),
# and each process either wrote it (exit 3: Node is skipped here) or was refused in one line while the other wrote.
TOGETHER = """
import pathlib, sys, time
from ropeexport import store
from ropeexport.cli import main
me, other = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
real = store.Draft.commit

def commit(self, *args, **kwargs):
    pathlib.Path(f"{me}.commit").write_text("")
    deadline = time.monotonic() + 120
    while not (pathlib.Path(f"{other}.commit").exists() or pathlib.Path(f"{other}.ended").exists()):
        if time.monotonic() > deadline:
            break
        time.sleep(0.005)
    return real(self, *args, **kwargs)

store.Draft.commit = commit
sys.exit(main(sys.argv[3:]))
"""


def _contents(folder: Path) -> dict[str, str]:
    """{file: sha256} of a package's files as they are on disk (its reports and manifest aside: they name a time)."""
    return {k: v for k, v in _snapshot(folder).items() if k not in ("report.json", "manifest.json")}


@pytest.fixture(scope="module")
def other_decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second tiny seeded decoder, unlike the seeded one (hidden size 128, 96 positions: its long prompt 78 tokens, a
    cheap check): its package differs from that one's.
    """  # noqa: D205
    import ropeexport as rx

    result = rx.build_decoder(tmp_path_factory.mktemp("other") / "out", preset="llama-2-7b", num_layers=1,
                              hidden_size=128, vocab_size=128, max_positions=96, eager=False)  # fmt: skip
    assert result.passed, result.report
    return result.path


@pytest.mark.slow
def test_two_packages_of_one_name_at_once_leave_one_whole_package(
    packaged: Path, seeded_decoder: Path, other_decoder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ropeexport.manifest import check_files, read_manifest

    monkeypatch.setenv(NO_NODE, str(tmp_path / "no-node"))
    alone = {seeded_decoder: _contents(packaged),
             other_decoder: _contents(package(other_decoder, tmp_path / "alone" / "web").path)}  # fmt: skip
    assert alone[seeded_decoder].keys() == alone[other_decoder].keys()
    differ = {k for k in alone[seeded_decoder] if alone[seeded_decoder][k] != alone[other_decoder][k]}
    assert {"onnx/model.onnx", "config.json", "reference.json"} <= differ, differ  # a mix of those would show
    out = tmp_path / "store" / "web"
    marks = [tmp_path / "p0", tmp_path / "p1"]
    runs = [subprocess.Popen([sys.executable, "-c", TOGETHER, str(marks[i]), str(marks[1 - i]), "package", str(d),
                              "--for", "transformers.js", "--out", str(out), "--replace"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i, d in enumerate(alone)]  # fmt: skip
    deadline = time.monotonic() + 300
    while any(p.poll() is None for p in runs) and time.monotonic() < deadline:
        for i, p in enumerate(runs):
            if p.poll() is not None:
                Path(f"{marks[i]}.ended").touch()  # the other's commit waits no longer
        time.sleep(0.01)
    ended = [(p.wait(timeout=60), p.stderr.read() if p.stderr else "") for p in runs]
    assert any(code == 3 for code, _ in ended), ended
    for code, err in ended:  # each wrote the package (Node skipped: exit 3) or was told another process was writing
        assert code == 3 or (code == 2 and "another ropeexport process" in err and err.count("\n") == 1), (code, err)
    assert sorted(p.name for p in out.parent.iterdir()) == ["web"]  # no lock, work folder or _failed left
    manifest = read_manifest(out, ("decoder", "engine"))
    check_files(out, manifest["files"])  # every file is the one its manifest hashed
    found = _contents(out)
    winners = [d for d, files in alone.items() if files == found]
    assert len(winners) == 1, "the package is a mix of the two decoders' files"
    assert manifest["decoder"]["path"] == str(winners[0].resolve())
