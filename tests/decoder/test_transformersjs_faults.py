"""Package write faults: ``ropeexport package`` never loses what is at ``--out``.

An ``--out`` that is not a package is refused (one line, exit 2, nothing written); kill -9 during a write leaves the
package that was there, byte for byte, and the next write removes what the dead one left; a rebuild whose check fails
leaves the package that passed in place and is kept apart at ``_failed/NAME``. transformers.js (Node) is not needed
for any of these: it is pointed at a folder without it (its engine skipped, exit 3), which keeps them cheap.
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


@pytest.mark.slow
@pytest.mark.parametrize("written", KILL_AT)
def test_kill_9_during_a_write_leaves_the_previous_package(
    written: str, packaged: Path, seeded_decoder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _copy(packaged, tmp_path)
    before = _snapshot(out)
    env = {**os.environ, NO_NODE: str(tmp_path / "no-node")}
    command = [sys.executable, "-m", "ropeexport", "package", str(seeded_decoder), "--for", "transformers.js",
               "--out", str(out)]  # fmt: skip
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
