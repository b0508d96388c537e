"""Faults around the build's writes: a failed swap, a full or read-only disk, damaged siblings, dead builds' leftovers,
file modes, and what a build writes outside its output folder."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ropeexport import build, store
from ropeexport.artifacts import write_index
from ropeexport.errors import OutputError
from ropeexport.families.alibi.spec import AlibiSpec
from ropeexport.families.sinusoidal.spec import SinusoidalSpec
from tests.cases import tiered
from tests.clirun import run

SMALL = ["build", "--encoding", "alibi", "--num-heads", "2", "--head-dim", "4", "--max-positions", "16"]




def _fail_exchange(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(a: Path, b: Path) -> bool:  # the atomic exchange itself fails, as an EIO would
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(store, "_exchange", failing)


def _fail_second_rename(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "_exchange", lambda a, b: False)  # a file system without RENAME_EXCHANGE
    real_rename = Path.rename

    def failing(self: Path, target: Path) -> Path:
        if ".building." in self.name:  # the new folder's move into place, after the old one went aside
            raise OSError(5, "Input/output error")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", failing)


@pytest.mark.parametrize("fault", [_fail_exchange, _fail_second_rename], ids=["exchange", "two renames"])
def test_a_failed_swap_leaves_the_old_artifact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: Any) -> None:
    spec = AlibiSpec(name="a", num_heads=2, head_dim=4, max_positions=16)
    first = build(spec, tmp_path)
    before = (first.path / "model.onnx").read_bytes()
    fault(monkeypatch)
    with pytest.raises(OutputError, match="Input/output error; nothing was changed"):  # one line, not a traceback
        build(spec, tmp_path)
    monkeypatch.undo()
    assert (tmp_path / "a" / "model.onnx").read_bytes() == before  # the good artifact is in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]  # no hidden work, swap or lock left


def _tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    return done.returncode == 0


@pytest.mark.parametrize("size", ["48k", "160k", "400k", "1m"])
def test_a_full_disk_is_one_line_and_leaves_the_tree_consistent(
    tmp_path: Path, size: str, capsys: pytest.CaptureFixture[str]
) -> None:
    disk = tmp_path / "disk"
    if not _tmpfs(disk, size):
        pytest.skip("cannot mount a small tmpfs here (needs root and mount permission): ENOSPC not injectable")
    try:
        out = disk / "out"
        code, _, err = run([*SMALL, "--out", str(out), "--quiet"], capsys)
        lines = err.strip().splitlines()
        if code == 0:
            pytest.skip(f"a {size} tmpfs held the whole build: no ENOSPC at this fill level")
        assert code == 2 and len(lines) == 1 and "No space left on device" in lines[0], err
        # Consistent: no hidden work folder, and the index (if any) lists exactly the folders present.
        names = [p.name for p in out.iterdir()] if out.exists() else []
        assert not any(n.startswith(".") and ".building." in n for n in names)
        if (out / "index.json").exists():
            listed = {a["name"] for a in json.loads((out / "index.json").read_text())["artifacts"]}
            assert listed == {n for n in names if (out / n / "manifest.json").exists()}
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)  # lazily: a leaked handle must not keep it


def test_a_read_only_output_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    disk = tmp_path / "ro"
    if not _tmpfs(disk, "1m"):
        pytest.skip("cannot mount a tmpfs here (needs root and mount permission): a read-only folder root can write")
    try:
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True, capture_output=True)
        code, _, err = run([*SMALL, "--out", str(disk / "out"), "--quiet"], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Read-only file system" in err, err
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)  # lazily: a leaked handle must not keep it


CORRUPTIONS = {
    "a list": "[]",
    "a string": '"x"',
    "null": "null",
    "a number": "7",
    "wrong-typed fields": json.dumps({"schema": "ropeexport.manifest/1", "spec": "x", "build": [], "files": 3}),
    "truncated JSON": '{"schema": "ropeexport.manif',
    "non-UTF-8": b"\xff\xfe\x00".decode("latin-1"),
}


@pytest.mark.parametrize("which", ["manifest.json", "report.json"])
@pytest.mark.parametrize("damage", tiered(list(CORRUPTIONS), lambda d: d == "truncated JSON"), ids=list(CORRUPTIONS))
def test_a_damaged_sibling_is_listed_as_damaged_and_the_build_goes_on(
    tmp_path: Path, which: str, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert run([*SMALL, "--name", "old", "--out", str(out), "--quiet"], capsys)[0] == 0
    (out / "old" / which).write_text(CORRUPTIONS[damage], encoding="latin-1")
    code, _, err = run([*SMALL, "--name", "new", "--out", str(out), "--quiet"], capsys)
    assert code == 0, err
    entries = {a["name"]: a for a in json.loads((out / "index.json").read_text())["artifacts"]}
    assert entries["new"]["status"] == "passed"
    assert entries["old"]["status"] == "unreadable" and not entries["old"]["passed"]


def test_a_dead_builds_work_folder_is_removed_by_the_next_build(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert run([*SMALL, "--out", str(out), "--quiet"], capsys)[0] == 0
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    leftover = out / f".x.building.{dead.stdout.strip()}.abc12345"  # a finished process's pid: nobody owns it
    (leftover / "sub").mkdir(parents=True)
    (leftover / "sub" / "big.bin").write_bytes(b"0" * 1024)
    alive = out / f".y.building.{dead.stdout.strip()}.def45678"  # a live writer of y holds y's lock: left alone
    alive.mkdir()
    import fcntl

    with open(out / ".y.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        code, _, err = run([*SMALL, "--num-heads", "4", "--out", str(out), "--quiet"], capsys)
    assert code == 0 and f"removed {leftover.name}" in err
    assert not leftover.exists() and alive.exists()
    assert not (out / ".x.lock").exists()  # the dead writer's lock file went with its work


def test_every_artifact_file_is_as_readable_as_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ropeexport.graph.onnx_io as onnx_io

    monkeypatch.setattr(onnx_io, "EXTERNAL_DATA_THRESHOLD", 0)  # force model.onnx.data
    result = build(SinusoidalSpec(name="s", d_model=64, max_positions=256), tmp_path)  # a 64 KiB table
    umask = os.umask(0)
    os.umask(umask)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in result.path.rglob("*") if p.is_file()}
    assert "model.onnx.data" in modes
    assert set(modes.values()) == {0o666 & ~umask}, modes


@pytest.mark.slow  # a build in a fresh interpreter
def test_a_build_writes_nothing_outside_its_output_folder(tmp_path: Path) -> None:
    home, tmp, out = tmp_path / "home", tmp_path / "tmp", tmp_path / "out"
    home.mkdir()
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME", "MPLCONFIGDIR")}
    env |= {"HOME": str(home), "TMPDIR": str(tmp)}
    argv = [sys.executable, "-m", "ropeexport", *SMALL, "--out", str(out), "--quiet"]
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=300)
    assert (out / "index.json").exists()
    written = sorted(str(p.relative_to(tmp_path)) for p in (home, tmp) for p in p.rglob("*") if p.is_file())
    # matplotlib's own font cache is all that may appear (it is matplotlib's, moved with MPLCONFIGDIR): no
    # ONNX Runtime telemetry database, device id or session file.
    assert all("/matplotlib/" in w for w in written), written


def test_the_index_lists_a_folder_whose_manifest_is_gone_bad(tmp_path: Path) -> None:
    build(AlibiSpec(name="a", num_heads=2, head_dim=4, max_positions=16), tmp_path)
    (tmp_path / "a" / "manifest.json").write_text("[")
    assert [a["status"] for a in write_index(tmp_path)["artifacts"]] == ["unreadable"]


def _fill(disk: Path) -> None:
    """Fill a small tmpfs to the last few KiB: the next real write runs out of space."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def _audit_case(tmp: Path) -> tuple[Path, Path]:
    import ropeexport as rx
    from tests.audits.planted import CASES as PLANTED
    from tests.audits.planted import write_config

    case = next(c for c in PLANTED if c.name == "exact-gqa-llama3")
    config = write_config(tmp, case.config)
    return case.build(tmp / "model.onnx", rx.from_hf_config(config)[0]), config


def _audit(tmp: Path, disk: Path) -> list[str]:
    model, config = _audit_case(tmp)
    return ["audit", str(model), "--hf-config", str(config), "--out", str(disk / "report")]


def _graft(tmp: Path, disk: Path) -> list[str]:
    model, config = _audit_case(tmp)
    return ["graft", str(model), "--hf-config", str(config), "--out", str(disk / "fixed" / "model.onnx")]


def _verify(tmp: Path, disk: Path) -> list[str]:
    build(AlibiSpec(name="a", num_heads=2, head_dim=4, max_positions=16), disk)
    return ["verify", str(disk / "a")]


# (command, what the disk is made: full or read-only, the words of the one line)
DISK_CASES = [
    ("audit --out", _audit, "full", "No space left on device"),
    ("audit --out", _audit, "read-only", "Read-only file system"),
    ("graft --out", _graft, "full", "No space left on device"),
    ("graft --out", _graft, "read-only", "Read-only file system"),
    ("verify", _verify, "read-only", "Read-only file system"),
]


@pytest.mark.parametrize(("command", "setup", "state", "words"), DISK_CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in DISK_CASES])  # fmt: skip
def test_a_full_or_read_only_disk_is_one_line_for_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, setup: Any, state: str, words: str
) -> None:
    disk = tmp_path / "disk"
    if not _tmpfs(disk, "1m"):
        pytest.skip("cannot mount a small tmpfs here (needs root and mount permission): the disk fault not injectable")
    try:
        argv = setup(tmp_path, disk)
        before = sorted(p.name for p in disk.rglob("*"))
        if state == "full":
            _fill(disk)
            before.append("filler")
        else:
            subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True, capture_output=True)
        code, _, err = run(argv, capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1 and words in err and "Traceback" not in err, err
        assert sorted(p.name for p in disk.rglob("*")) == sorted(before)  # nothing half-written, no work left
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)  # lazily: a leaked handle must not keep it
