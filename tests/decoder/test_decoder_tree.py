"""A decoder in the artifact tree: its report.html, its line in index.json / index.html, and ``verify`` over a tree
that holds a decoder beside an ordinary artifact.
"""  # noqa: D205

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ropeexport as rx
from ropeexport.artifacts import write_index
from ropeexport.decoder.report import write_html, write_markdown
from ropeexport.errors import ArtifactError, SpecError
from ropeexport.report.views import DecoderReport, ScenarioRecord, read_report
from tests.clirun import run

# The fields every ordinary artifact's index line has had; a decoder in the tree must not change them.
ENTRY_KEYS = ["name", "encoding", "artifact", "dtype", "graph", "max_positions", "passed", "status", "path", "report",
              "worst_max_abs", "worst_ratio", "bytes", "build_seconds", "origin", "runtimes", "versions"]  # fmt: skip




def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, seeded_decoder: Path) -> tuple[Path, Path, Path]:
    """(OUT, the decoder's folder, bloom's folder): a decoder built first, then an ordinary artifact into its tree."""
    out = tmp_path_factory.mktemp("tree") / "out"
    shutil.copytree(seeded_decoder.parent, out)  # the session's decoder, built into its own tree
    assert (out / "index.json").is_file()  # the decoder build made OUT a tree, so the next build indexes both
    bloom = rx.build(rx.from_preset("bloom-560m", max_positions=256)[0], out)
    assert bloom.passed
    return out, out / seeded_decoder.name, bloom.path


@pytest.fixture
def tree_copy(tree: tuple[Path, Path, Path], tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(tree[0], out)
    return out


def _png(html: str) -> bytes:
    match = re.search(r'<img [^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert match, "no embedded PNG"
    return base64.b64decode(match.group(1))


def test_report_html_has_the_verdict_the_scenarios_and_the_plot(tree: tuple[Path, Path, Path]) -> None:
    _, decoder, _ = tree
    report = read_report(decoder, DecoderReport)
    html = (decoder / "report.html").read_text()
    assert f"<h1>PASS: {report.name}</h1>" in html and '<header class="banner pass">' in html
    for scenario in report.scenarios:
        assert f"<h2>{scenario.name}: passed</h2>" in html
    assert html.count("<tr") - html.count("<thead><tr>") >= sum(len(s.calls) for s in report.scenarios)
    assert "What failed" not in html and "Plot left out" not in html
    assert _png(html).startswith(b"\x89PNG\r\n\x1a\n")
    assert "logit scale" in html and 'href="../index.html"' in html and "<script" not in html
    assert (decoder / "report.md").read_text() == write_markdown(dict(report.data))


def test_report_html_escapes_and_marks_failures_and_stale_calls(tree: tuple[Path, Path, Path]) -> None:
    report = copy.deepcopy(_json(tree[1] / "report.json"))
    report["name"] = "<script>alert(1)</script>"
    report["passed"] = False
    bad = report["scenarios"][0]
    bad["passed"] = False
    bad["calls"][2].update(passed=False, diverged_rows=[0])
    bad["calls"][2]["float64"]["rel"] = 5e-3
    bad["calls"][3]["float64"]["rel"] = float("inf")  # drawn as a cross at the top, not lost
    kept = report["scenarios"][-1]
    for call in kept["calls"][4:]:
        call.update(stale_cache=True, passed=True)
        call["float64"]["rel"] = 3e-3
    html = write_html(report)
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert '<header class="banner fail">' in html and "What failed" in html
    assert f"{ScenarioRecord(bad).name}: calls 2 (FAIL (tokens differ), 5.00e-03)" in html
    assert html.count('<tr class="skip">') == len(ScenarioRecord(kept).calls) - 4  # regime cost rows, not failures
    assert ">regime cost</span>" in html and '<tr class="fail">' in html
    assert _png(html).startswith(b"\x89PNG")
    assert html == write_html(report)  # the same report gives the same page, figure included


def test_index_lists_the_decoder_beside_the_artifact(tree: tuple[Path, Path, Path]) -> None:
    out, decoder, bloom = tree
    index = _json(out / "index.json")
    entries = {e["name"]: e for e in index["artifacts"]}
    assert set(entries) == {decoder.name, bloom.name} and index["passed"] == 2 and index["failed"] == 0
    assert list(entries[bloom.name]) == ENTRY_KEYS  # the ordinary line is unchanged
    report = read_report(decoder, DecoderReport)
    e = entries[decoder.name]
    assert {k: e[k] for k in ("encoding", "artifact", "dtype", "graph", "passed", "status", "path", "report")} == {
        "encoding": "rope",
        "artifact": "decoder",
        "dtype": "fp32",
        "graph": "fused",
        "passed": True,
        "status": "passed",
        "path": decoder.name,
        "report": f"{decoder.name}/report.html",
    }
    assert set(ENTRY_KEYS) <= set(e)
    worst = max(s.summary.worst_rel for s in report.scenarios)
    assert e["worst_rel"] == {"float64": worst} and "logit scale" in e["worst_rel_of"]  # no transformers: --no-eager
    assert e["worst_ratio"]["float64"] == pytest.approx(worst / report.tolerance.rel)
    assert e["worst_max_abs"]["float64"] == max(s.summary.worst_abs for s in report.scenarios)
    assert e["max_positions"] == report.spec["position"]["max_positions"]
    assert e["scenarios"] == {"passed": len(report.scenarios), "total": len(report.scenarios)}
    model = sum((decoder / f).stat().st_size for f in report.files if f.startswith("model."))
    assert e["bytes"]["model"] == model > 0 and e["bytes"]["folder"] > model

    html = (out / "index.html").read_text()
    for name in (decoder.name, bloom.name):
        assert f'<a href="./{name}/report.html">{name}</a>' in html
    assert "rope / decoder" in html and f"{worst:.2e} of the logit scale" in html
    assert "Decoder rows" in html
    manifest = _json(decoder / "manifest.json")  # its build time, as the build recorded it, on its row
    assert e["build_seconds"] == manifest["build"]["seconds"] > 0
    assert f'<td class="num">{e["build_seconds"]:.1f} s</td>' in html


def test_verify_a_tree_with_a_decoder_verifies_both(tree_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _json(tree_copy / "index.json")["created"]
    decoder = next(p for p in tree_copy.iterdir() if (p / "decoder.json").is_file())
    (decoder / "report.html").unlink()  # re-verification writes it again
    code, out, err = run(["verify", str(tree_copy)], capsys)
    assert code == 0, out + err
    assert "2 of 2 artifacts verified" in out and f"PASS {decoder.name}: worst" in out
    assert out.strip().endswith(str(tree_copy.resolve() / "index.html"))
    assert "far-positions" in out  # the decoder's scenarios, one line each
    assert (decoder / "report.html").is_file()
    index = _json(tree_copy / "index.json")
    assert index["passed"] == 2 and index["created"] >= before


def test_verify_a_tree_refuses_flags_a_decoder_does_not_take_before_running_anything(
    tree_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = {p: p.read_bytes() for p in tree_copy.glob("*/report.json")}
    for flags, words in ((["--atol", "1e-3"], "fixed per dtype"), (["--rtol", "1e-3"], "fixed per dtype")):
        code, out, err = run(["verify", str(tree_copy), *flags], capsys)
        assert code == 2 and words in err and "decoder" in err and "Traceback" not in err, err
    assert {p: p.read_bytes() for p in reports} == reports  # nothing was verified, nothing rewritten


def test_a_damaged_decoder_is_listed_not_fatal(tree_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    decoder = next(p for p in tree_copy.iterdir() if (p / "decoder.json").is_file())
    (decoder / "report.json").write_text("{")  # the index reads the report: listed as damaged, the rest indexed
    entries = {e["name"]: e for e in write_index(tree_copy)["artifacts"]}
    assert entries[decoder.name]["status"] == "unreadable" and not entries[decoder.name]["passed"]
    assert sum(e["status"] == "passed" for e in entries.values()) == len(entries) - 1
    (decoder / "decoder.json").write_text("{")  # verify checks the files the manifest hashes: refused, nothing run
    code, _, err = run(["verify", str(tree_copy)], capsys)
    assert code == 2 and f"{decoder.name}/files.decoder.json: sha256 differs" in err, err


def test_a_normal_build_into_a_folder_holding_only_a_decoder(
    tree: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    shutil.copytree(tree[1], out / tree[1].name)  # a decoder folder, no index.json: still a ropeexport tree
    code, stdout, err = run(["build", "--preset", "bloom-560m", "--max-positions", "256", "--out", str(out)], capsys)
    assert code == 0, stdout + err
    names = sorted(e["name"] for e in _json(out / "index.json")["artifacts"])
    assert names == sorted([tree[1].name, tree[2].name])


def test_a_folder_of_the_users_is_refused_as_every_build_refuses_it(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SpecError, match="out_dir: .* is not a ropeexport tree"):
        rx.build_decoder(tmp_path, preset="llama-2-7b", num_layers=1, hidden_size=256, vocab_size=128, eager=False)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


REBUILD = ["build", "--preset", "llama-2-7b", "--artifact", "decoder", "--num-layers", "1", "--hidden-size", "256",
           "--vocab-size", "128", "--no-eager", "--quiet"]  # fmt: skip
# (what is planted in the decoder folder, where, what the rebuild ends with): a rebuild reads nothing of the old
# folder but its manifest, which is read as a regular file of bounded size: nothing hangs or reads without end.
# A damaged manifest makes the folder a damaged artifact: refused in one line, replaced only when asked.
HOSTILE = [
    ("a FIFO", _fifo, "decoder.json", [], 0, ""),
    ("a link to /dev/zero", _dev_zero, "decoder.json", [], 0, ""),
    ("a FIFO", _fifo, "manifest.json", [], 2, "holds a damaged ropeexport artifact"),
    ("a link to /dev/zero", _dev_zero, "manifest.json", [], 2, "holds a damaged ropeexport artifact"),
    ("a link to /dev/zero", _dev_zero, "manifest.json", ["--replace"], 0, ""),
]


@pytest.mark.slow
@pytest.mark.parametrize(("what", "plant", "where", "flags", "code", "text"),
                         HOSTILE, ids=[f"{h[0]} at {h[2]} {' '.join(h[3])}".strip() for h in HOSTILE])  # fmt: skip
def test_a_hostile_file_in_a_decoder_folder_never_hangs_a_rebuild(
    what: str, plant: Any, where: str, flags: list[str], code: int, text: str, seeded_decoder: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    shutil.copytree(seeded_decoder.parent, out)
    plant(out / seeded_decoder.name / where)
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-m", "ropeexport", *REBUILD, *flags, "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    assert done.returncode == code, done.stderr
    assert text in done.stderr and done.stderr.count("\n") == (1 if code else 0), done.stderr
    if code == 0:  # replaced, whole, by a decoder that verifies
        assert rx.verify(out / seeded_decoder.name)[0].passed


def test_a_failed_decoder_rebuild_keeps_the_verified_decoder(
    seeded_decoder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder
) -> None:
    from ropeexport.decoder import verify

    out = tmp_path / "out"
    shutil.copytree(seeded_decoder.parent, out)
    before = (out / seeded_decoder.name / "manifest.json").read_text()
    monkeypatch.setitem(verify.TOLERANCE, "fp32", 1e-30)  # the same build, judged with no room: every call fails
    result = rx.build_decoder(out, preset="llama-2-7b", num_layers=1, hidden_size=256, vocab_size=128, eager=False)
    monkeypatch.undo()
    # a failed build's report draws its figure too: nothing it warns may reach the user's stderr (issue 43 item 10)
    assert [str(w.message) for w in recwarn] == []
    assert not result.passed and result.kept == out / seeded_decoder.name
    assert result.path == out / "_failed" / seeded_decoder.name and (result.path / "report.html").is_file()
    assert (out / seeded_decoder.name / "manifest.json").read_text() == before
    assert rx.verify(out / seeded_decoder.name)[0].passed
    line = next(e for e in _json(out / "index.json")["artifacts"] if e["name"] == seeded_decoder.name)
    assert line["passed"] and line["failed_rebuild"] == f"_failed/{seeded_decoder.name}/report.html"


def test_a_decoder_from_another_checkpoint_is_another_artifact(tmp_path: Path, tiny_checkpoint: Any) -> None:
    # Two training runs save their checkpoints under the same folder name: the decoders have one spec and one name,
    # and the second must not silently replace the first.
    runs = []
    for seed in (0, 1):
        folder = tmp_path / f"run{seed}" / "llama"
        shutil.copytree(tiny_checkpoint("llama", seed), folder)
        runs.append(folder)
    first = rx.build_decoder(tmp_path / "out", checkpoint=runs[0], eager=False)
    assert first.passed
    with pytest.raises(SpecError, match=r"^name: .* built from another spec \(weights: \"checkpoint .*run0/llama'\" "
                       r"there, \"checkpoint .*run1/llama'\" now\); give `replace`"):
        rx.build_decoder(tmp_path / "out", checkpoint=runs[1], eager=False)
    assert "run0" in _json(first.path / "decoder.json")["weights"]


def test_verify_of_a_tree_checks_every_checkpoint_before_anything_runs(
    tree: tuple[Path, Path, Path], tmp_path: Path, tiny_checkpoint: Any
) -> None:
    out = tmp_path / "out"
    shutil.copytree(tree[0], out)
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint("llama"), ckpt)
    block = rx.build_layer_block(ckpt, out, layer=1).path
    ckpt.rename(tmp_path / "moved")
    reports = {p: (p / "report.json").read_text() for p in out.iterdir() if (p / "report.json").is_file()}
    with pytest.raises(ArtifactError, match=rf"^{block.name}/manifest.json build.origin.checkpoint: .* no longer"):
        rx.verify(out)
    assert {p: (p / "report.json").read_text() for p in reports} == reports  # nothing was verified again
