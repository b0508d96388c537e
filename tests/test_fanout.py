"""``--ray ADDRESS`` (``ropeexport.fanout``): a zoo audit and a tree's verify as Ray tasks on a local Ray instance
write the same bytes as the serial run; a worker killed mid-task is retried and nothing is lost; a driver killed
mid-run (SIGKILL) loses nothing it wrote, and its rerun skips that; an address nothing
answers at, a malformed one, and Ray not installed are each one line and exit 2, nothing written.

The Ray tests share one local instance, started and stopped as ``--ray local`` does (``fanout.connected``, module
fixture), which the runs inside it use as the caller's connection. Without Ray installed they skip, saying so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import ropeexport as rx
from ropeexport.audits import zoo as zoo_module
from ropeexport.errors import SpecError
from ropeexport.fanout import connected, fan_out, parse_address
from ropeexport.store import check_name
from tests.audits.test_zoo import write_zoo
from tests.clirun import run

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason="Ray is not installed (the cluster extra: pip install -e '.[cluster]')")  # fmt: skip


def TINY() -> rx.SpecBase:  # noqa: N802 - a constant, made when asked: the smallest artifact a tree can hold
    return rx.spec("alibi", num_heads=2, head_dim=4, max_positions=16)


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """``--ray local``'s own start and stop (``fanout.connected``), once for the module's Ray tests."""
    import ray

    handler, environ = signal.getsignal(signal.SIGTERM), _ray_variables()
    with connected(parse_address("local")):
        yield "local"
    assert not ray.is_initialized()  # stopped after
    # and the process as it was: ray.init's SIGTERM handler and RAY_* variables outlived ray.shutdown, so the rest of
    # this pytest process had lost the suite's SIGTERM handler (tests/conftest.py)
    assert signal.getsignal(signal.SIGTERM) == handler and _ray_variables() == environ


def _ray_variables() -> dict[str, str]:
    """The environment variables ``ray.init`` sets (RAY_*, PYTHONBREAKPOINT), as they are now."""
    return {k: v for k, v in os.environ.items() if k.startswith("RAY_") or k == "PYTHONBREAKPOINT"}


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by relative path, the tree's index (its creation time, its path) aside."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in ("index.json", "index.html") and not p.name.startswith(".")}  # fmt: skip


def _zoo(tmp: Path, ray: str | None) -> dict[str, bytes]:
    rx.audit_zoo(tmp / "zoo" / "zoo.toml", tmp / f"out-{ray}", ray=ray)
    return _files(tmp / f"out-{ray}")


def _tree(tmp: Path, ray: str | None) -> dict[str, bytes]:
    if not (tmp / "built").exists():
        rx.build(TINY(), tmp / "built")
    shutil.copytree(tmp / "built", tmp / f"tree-{ray}")
    assert all(r.passed for r in rx.verify(tmp / f"tree-{ray}", ray=ray))
    return _files(tmp / f"tree-{ray}")


@needs_ray
@pytest.mark.parametrize("what", [_zoo, _tree], ids=["audit-zoo", "verify-tree"])
def test_on_ray_the_same_bytes_as_the_serial_run(what: Callable[[Path, str | None], dict[str, bytes]], cluster: str,
                                                 tmp_path: Path) -> None:
    write_zoo(tmp_path / "zoo")
    serial = what(tmp_path, None)
    fanned = what(tmp_path, cluster)
    assert len(serial) >= 4 and serial.keys() == fanned.keys()
    assert [name for name in serial if serial[name] != fanned[name]] == []


def _dies_the_first_time(job: zoo_module.Job) -> zoo_module.Audited:
    """``audit_one``, but the worker that first takes the unscaled model's job kills itself (SIGKILL) first."""
    marker = job.model.onnx.parent / "killed-once"
    if job.model.name == "llama-unscaled" and not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return zoo_module.audit_one(job)


@needs_ray
def test_a_killed_worker_is_retried_and_nothing_is_lost(cluster: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from ray import cloudpickle

    write_zoo(tmp_path / "zoo")
    serial = _zoo(tmp_path, None)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers need not import the tests
    monkeypatch.setattr(zoo_module, "audit_one", _dies_the_first_time)
    try:
        fanned = _zoo(tmp_path, cluster)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    killed = tmp_path / "zoo" / "llama-unscaled" / "killed-once"
    assert killed.is_file() and int(killed.read_text()) != os.getpid()  # a worker died, not this process
    assert fanned == serial


# A driver run in its own process that kills itself (SIGKILL: no ``finally`` runs) as soon as the first model's or
# artifact's result has landed (written by it), the other tasks still in flight on the cluster it joined.
DRIVER = r"""
import os, signal, sys
import ropeexport as rx
what, path, out, address = sys.argv[1:5]
def die(*_):
    os.kill(os.getpid(), signal.SIGKILL)
if what == "zoo":
    rx.audit_zoo(path, out, ray=address, on_row=die)
else:
    rx.verify(path, ray=address, on_done=die)
"""


@needs_ray
@pytest.mark.parametrize("what", ["zoo", "tree"])
def test_a_killed_driver_loses_nothing_verified_and_a_rerun_skips_it(what: str, cluster: str,
                                                                      tmp_path: Path) -> None:  # fmt: skip
    """``audit --zoo --ray`` and ``verify TREE --ray``: the driver killed (SIGKILL) once its first result landed keeps
    that result whole, and a rerun on Ray keeps it (found done, not run again, its files as they were) and runs the
    rest (the zoo: the same bytes as a serial run's). The killed driver joins the module's cluster at its address (its own ``--ray local`` instance would
    cost a Ray start).
    """  # noqa: D205
    import subprocess

    import ray

    from ropeexport.journal import JOURNAL

    target = tmp_path / "killed"
    if what == "zoo":
        write_zoo(tmp_path / "zoo", missing=False)  # every row a folder: whichever lands first is kept
        serial = _zoo(tmp_path, None)
        path, out = tmp_path / "zoo" / "zoo.toml", target
    else:  # two artifacts: the killed driver verifies one, one is left
        for heads in (2, 3):
            rx.build(rx.spec("alibi", num_heads=heads, head_dim=4, max_positions=16), target)
        path, out = target, target
    address = ray.get_runtime_context().gcs_address
    driver = subprocess.run([sys.executable, "-c", DRIVER, what, str(path), str(out), address], capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert driver.returncode == -signal.SIGKILL, driver.stderr[-2000:]
    if what == "zoo":
        rows = json.loads((out / "zoo.json").read_text())["rows"]  # the table of what landed, written as it did
        assert len(rows) == 1, rows
        result = rx.audit_zoo(path, out, ray=cluster)
        assert result.skipped == [rows[0]["name"]] and len(result.rows) == len(serial_rows(serial))
    else:
        done = json.loads((out / JOURNAL).read_text())["done"]
        assert len(done) == 1, done
        landed = _files(out)  # what the killed driver wrote
        results = rx.verify(path, ray=cluster)
        assert [r.path.name for r in results if r.resumed] == list(done) and all(r.passed for r in results)
        assert len(results) == 2 and not (out / JOURNAL).exists()  # finished: the next verify runs every artifact
        kept = [name for name in landed if name.startswith(f"{next(iter(done))}/")]
        assert len(kept) >= 4 and {n: _files(out)[n] for n in kept} == {n: landed[n] for n in kept}
        return
    assert _files(out) == serial


def serial_rows(files: dict[str, bytes]) -> list[object]:
    """zoo.json's rows of a zoo run's files."""
    return list(json.loads(files["zoo.json"])["rows"])


@needs_ray
def test_a_job_s_field_error_is_raised_in_the_driver_as_itself(cluster: str) -> None:
    with pytest.raises(SpecError) as raised:
        fan_out(check_name, ["fine", "../not-a-name"], cluster)
    assert raised.value.field == "name" and "must be 1-100 characters" in raised.value.message


@needs_ray
def test_a_decoder_s_float64_truth_on_ray_gives_the_local_report(seeded_decoder: Path, cluster: str,
                                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ropeexport.decoder import verify

    def not_here(*_: object) -> None:
        raise AssertionError("the float64 pass ran in this process, not on Ray")

    reports = []
    for ray in (None, cluster):
        folder = tmp_path / str(ray) / seeded_decoder.name
        shutil.copytree(seeded_decoder, folder)
        if ray is not None:  # the workers' own processes keep the real one
            monkeypatch.setattr(verify, "chained_float64", not_here)
        (result,) = rx.verify(folder, ray=ray)
        assert result.passed
        report = json.loads((folder / "report.json").read_text())
        report.pop("seconds")  # how long the scenarios took: the one figure that differs
        for runtime in report["runtimes"]:
            runtime.pop("seconds", None)
        reports.append(report)
    assert reports[0]["scenarios"] and reports[0] == reports[1]


def _without_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as where it is not installed


# (argv, fragment of the one line, Ray removed first; its id); the zoo rows are fast (no tree)
BAD = [
    pytest.param(["audit", "--zoo", "{zoo}", "--out", "{out}", "--ray", "local"], "--ray: needs Ray, which is not installed here: install the cluster extra", True, marks=pytest.mark.fast, id="zoo-ray-not-installed"),
    pytest.param(["audit", "--zoo", "{zoo}", "--out", "{out}", "--ray", "127.0.0.1:9"], "--ray: cannot reach a Ray cluster at '127.0.0.1:9'", False, marks=pytest.mark.fast, id="zoo-nothing-answers"),
    pytest.param(["verify", "{tree}", "--ray", "ray://127.0.0.1:9"], "--ray: cannot reach a Ray cluster at 'ray://127.0.0.1:9'", False, id="verify-nothing-answers"),
    pytest.param(["verify", "{tree}", "--ray", "cluster-7"], "--ray: 'cluster-7' is not a Ray address; allowed: local, auto", False, id="verify-not-an-address"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "fragment", "no_ray"), BAD)
def test_a_bad_ray_address_or_no_ray_is_one_line_exit_2_and_nothing_written(
    argv: list[str], fragment: str, no_ray: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    tree = tmp_path / "tree"
    if "{tree}" in argv:
        rx.build(TINY(), tree)
    before = _files(tree) if tree.exists() else {}
    zoo = write_zoo(tmp_path / "zoo", missing=False) if "{zoo}" in argv else None
    if no_ray:
        _without_ray(monkeypatch)
    start = time.monotonic()
    code, _, err = run([a.format(zoo=zoo, out=tmp_path / "out", tree=tree) for a in argv], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and fragment in lines[0], err
    assert time.monotonic() - start < 30
    assert not (tmp_path / "out").exists() and (_files(tree) if tree.exists() else {}) == before
