"""``ropeexport build`` over presets and configs: the artifact tree, index.json / index.html, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ropeexport.presets import presets
from tests.cli.test_cli import run, write

LLAMA = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 128,
    },
}


def config(tmp_path: Path, data: object, name: str = "config.json") -> str:
    folder = tmp_path / "tiny-llama"
    folder.mkdir(exist_ok=True)
    return str(write(folder / name, json.dumps(data) if not isinstance(data, str) else data))


def tree_state(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def test_hf_config_build_prints_and_records_where_each_value_came_from(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    code, stdout, err = run(["build", "--hf-config", config(tmp_path, LLAMA), "--out", str(out)], capsys)
    assert code == 0, err
    assert "theta = 500000.0  <- rope_theta" in stdout
    assert "max_positions = 512  <- max_position_embeddings" in stdout
    assert stdout.strip().splitlines()[-1] == str((out / "index.html").resolve())
    manifest = json.loads((out / "tiny-llama-rope-fp32-fused" / "manifest.json").read_text())
    assert manifest["build"]["sources"]["num_kv_heads"] == "num_key_value_heads"
    assert manifest["build"]["origin"]["model_type"] == "llama"
    assert manifest["spec"]["scaling"] == "llama3" and manifest["spec"]["num_kv_heads"] == 2


def test_variants_json_summary_and_index(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    argv = ["build", "--hf-config", config(tmp_path, LLAMA), "--dtype", "fp32", "--dtype", "fp16", "--graph", "both"]
    code, stdout, err = run([*argv, "--artifact", "rope", "--out", str(out), "--json", "-j", "2"], capsys)
    assert code == 0, err
    summary = json.loads(stdout)  # stdout is the JSON and nothing else
    names = {f"tiny-llama-rope-{d}-{g}" for d in ("fp32", "fp16") for g in ("fused", "decomposed")}
    assert {a["name"] for a in summary["built"]} == names
    index = json.loads((out / "index.json").read_text())
    assert index["schema"] == "ropeexport.index/1" and index["passed"] == 4 and index["failed"] == 0
    for entry in index["artifacts"]:
        assert {"name", "encoding", "artifact", "passed", "path"} <= set(entry)
        assert entry["passed"] is True and (out / entry["path"] / "model.onnx").is_file()
        assert entry["worst_max_abs"]["float64"] < 5e-3 and entry["bytes"]["model"] > 0
        assert entry["build_seconds"] > 0 and entry["runtimes"][0]["name"] == "ort"
    html = (out / "index.html").read_text()
    assert all(f'href="./{n}/report.html"' in html for n in names) and "4 of 4 verified" in html


def test_a_second_build_adds_to_the_index(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    small = ["--head-dim", "16", "--num-heads", "2", "--max-positions", "64", "--out", str(out), "--quiet"]
    assert run(["build", *small, "--name", "a"], capsys)[0] == 0
    assert run(["build", *small, "--name", "b"], capsys)[0] == 0
    index = json.loads((out / "index.json").read_text())
    assert [a["name"] for a in index["artifacts"]] == ["a", "b"]


def test_runtime_all_reports_tensorrt_skipped_with_the_reason(tmp_path: Path, capsys) -> None:
    pytest.importorskip("onnxruntime")
    try:
        import tensorrt  # noqa: F401

        pytest.skip("TensorRT is installed here: the skip path cannot be observed")
    except ImportError:
        pass
    out = tmp_path / "out"
    small = ["--head-dim", "16", "--num-heads", "2", "--max-positions", "64", "--out", str(out)]
    code, _, err = run(["build", *small, "--runtime", "all", "--quiet"], capsys)
    assert code == 3, err  # asked for TensorRT, which could not run: not a success
    assert "trt" in err and "--allow-skip" in err
    runtimes = json.loads((out / "index.json").read_text())["artifacts"][0]["runtimes"]
    assert [r["name"] for r in runtimes if r["status"] == "verified"] == ["ort"]
    trt = next(r for r in runtimes if r["name"] == "trt")
    assert trt["status"] == "skipped" and trt["reason"]


@pytest.mark.slow  # every preset built
def test_every_preset_builds_and_verifies(tmp_path: Path, capsys) -> None:
    """Every card at a small length (the default-build test covers llama-3.1-8b and bloom-560m at full length)."""
    out = tmp_path / "out"
    code, stdout, err = run(["build", "--all-presets", "--max-positions", "512", "--out", str(out), "--json"], capsys)
    assert code == 0, err
    index = json.loads(stdout)
    built = {a["origin"]["preset"] for a in index["built"]}
    assert built == set(presets())
    failed = [a["name"] for a in index["artifacts"] if not a["passed"]]
    assert not failed


BAD = [
    (["--preset", "llama-2-7b", "--hf-config", "x.json"], "--preset: cannot be combined with --hf-config"),
    (["--all-presets", "--preset", "llama-2-7b"], "cannot be combined"),
    (["--spec", "x.toml", "--preset", "llama-2-7b"], "cannot be combined"),
    (["--preset", "llama-9"], "--preset: unknown preset 'llama-9'; allowed: "),
    (["--hf-config", "MISSING"], "--hf-config: cannot read"),
    (["--hf-config", "NOTJSON"], "is not valid JSON"),
    (["--hf-config", "ARRAY"], "not a transformers config"),
    (["--hf-config", "NOTYPE"], "model_type: missing"),
    (["--hf-config", "NODIVIDE"], "hidden_size: must be divisible by num_attention_heads (8), got 100"),
    (["--hf-config", "MROPE"], "unsupported scaling type 'mrope'"),
    (["--preset", "bloom-560m", "--layout", "half"], "layout: unknown field for encoding 'alibi'"),
    (["--preset", "bloom-560m", "--dtype", "fp8"], "dtype"),
    (["--preset", "bloom-560m", "--graph", "sideways"], "graph"),
    (["--preset", "llama-2-7b", "--name", "x", "--graph", "both"], "name: 'x' is used by more than one artifact"),
    (["-j", "0"], "--jobs"),
    (["-j", "two"], "--jobs"),
    (["--runtime", "tensorrt"], "--runtime: unknown runtime 'tensorrt'; allowed: ort, onnx-reference, trt, all"),
]


@pytest.mark.parametrize(("flags", "message"), BAD, ids=[f"{i}-{m.split(':')[0]}" for i, (_, m) in enumerate(BAD)])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path: Path, capsys, flags: list[str], message: str) -> None:
    files = {
        "MISSING": str(tmp_path / "nowhere" / "config.json"),
        "NOTJSON": config(tmp_path, "{not json", "a.json"),
        "ARRAY": config(tmp_path, [1, 2], "b.json"),
        "NOTYPE": config(tmp_path, {"hidden_size": 64}, "c.json"),
        "NODIVIDE": config(tmp_path, LLAMA | {"hidden_size": 100}, "d.json"),
        "MROPE": config(tmp_path, LLAMA | {"rope_scaling": {"type": "mrope", "mrope_section": [1]}}, "e.json"),
    }
    before = tree_state(tmp_path)
    out = tmp_path / "out"
    code, stdout, err = run(["build", *[files.get(f, f) for f in flags], "--out", str(out)], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], err
    assert tree_state(tmp_path) == before  # nothing written


def test_an_out_folder_that_is_not_a_tree_is_refused(tmp_path: Path, capsys) -> None:
    out = tmp_path / "photos"
    out.mkdir()
    write(out / "cat.jpg", "meow")
    code, _, err = run(["build", "--preset", "bloom-560m", "--out", str(out)], capsys)
    assert code == 2 and "--out" in err and "not a ropeexport tree" in err
    assert sorted(p.name for p in out.iterdir()) == ["cat.jpg"]


def test_list_presets_shows_key_parameters_and_sources(capsys) -> None:
    code, stdout, _ = run(["list", "--presets", "--json"], capsys)
    data = json.loads(stdout)
    assert code == 0 and set(data) == set(presets())
    for name, card in data.items():
        assert card["source"] and card["summary"], name
        assert card["parameters"]["encoding"] in (
            "rope",
            "alibi",
            "t5",
            "sinusoidal",
            "shaw",
            "transformer-xl",
            "tupe",
            "kerple",
            "sandwich",
            "vision_rope",
        )
    code, text, _ = run(["list", "--presets"], capsys)
    assert code == 0 and all(name in text for name in data)


def test_an_interrupted_batch_leaves_whole_folders_and_an_index_of_them(tmp_path: Path, capsys, monkeypatch) -> None:
    import dataclasses

    from ropeexport.catalog import recipe_for, recipes
    from ropeexport.families.rope.spec import RopeSpec

    kind = recipe_for(RopeSpec())
    calls = []

    def export(spec):
        calls.append(spec.name)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C during the second artifact's export
        return kind.export(spec)

    monkeypatch.setitem(recipes(), ("rope", "rope"), dataclasses.replace(kind, export=export))
    out = tmp_path / "out"
    small = ["--head-dim", "16", "--num-heads", "2", "--max-positions", "64", "--dtype", "fp32", "--dtype", "fp16"]
    code, _, err = run(["build", *small, "--out", str(out), "--quiet"], capsys)
    assert code == 130 and err.strip() == "ropeexport: interrupted"
    assert sorted(p.name for p in out.iterdir()) == [
        "index.html",
        "index.json",
        "rope-rope-half-default-h2x16-p64-fp32-fused",
    ]
    index = json.loads((out / "index.json").read_text())
    assert [a["name"] for a in index["artifacts"]] == ["rope-rope-half-default-h2x16-p64-fp32-fused"]


def test_verify_takes_a_tree_and_checks_every_artifact_first(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    small = ["--head-dim", "16", "--num-heads", "2", "--max-positions", "64", "--graph", "both", "--out", str(out)]
    assert run(["build", *small, "--quiet"], capsys)[0] == 0
    code, stdout, err = run(["verify", str(out)], capsys)
    assert code == 0, err
    assert "2 of 2 artifacts verified" in stdout and stdout.strip().endswith("index.html")
    reports = {p: p.stat().st_mtime_ns for p in out.glob("*/report.json")}
    model = out / "rope-rope-half-default-h2x16-p64-fp32-fused" / "model.onnx"
    model.write_bytes(model.read_bytes()[:-1])  # truncate one artifact's model
    code, _, err = run(["verify", str(out)], capsys)
    # One line, naming the artifact and the file (a tree has one model.onnx per artifact).
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "rope-rope-half-default-h2x16-p64-fp32-fused/files.model.onnx" in err
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/report.json")} == reports  # nothing was re-verified


SITE = """
import os
import ropeexport.batch as batch

_real = batch._build


def _build(job, settings, stage):
    if job.name.startswith(os.environ["ROPEEXPORT_TEST_FAIL"]):
        raise RuntimeError("planted crash")
    return _real(job, settings, stage)


batch._build = _build
"""


@pytest.mark.slow  # worker processes spawned
def test_a_crash_under_jobs_stops_the_queue_and_indexes_what_finished(tmp_path: Path) -> None:
    """A worker's exception (a bug, not bad input): queued builds never start, finished ones are indexed."""
    import os
    import subprocess
    import sys

    site = tmp_path / "site"
    site.mkdir()
    write(site / "sitecustomize.py", SITE)  # loaded by every spawned worker too
    env = os.environ | {"PYTHONPATH": str(site), "ROPEEXPORT_TEST_FAIL": "t5-base"}
    out = tmp_path / "out"
    names = ["bloom-560m", "t5-base", "sandwich", "kerple-log-162m", "mpt-7b", "bloom", "transformer-base"]
    argv = [sys.executable, "-m", "ropeexport", "build", "--max-positions", "64", "-j", "2", "--out", str(out)]
    proc = subprocess.run(
        [*argv, *[a for n in names for a in ("--preset", n)]], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 1 and "planted crash" in proc.stderr
    built = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert "t5-base-bias-fp32-fused" not in built and not any(n.startswith(".") for n in built)
    assert len(built) < len(names) - 1  # the queue was cancelled, not drained
    index = json.loads((out / "index.json").read_text())
    assert sorted(a["name"] for a in index["artifacts"]) == built


@pytest.mark.parametrize(
    ("files", "why"),
    [
        ({"index.json": "{}", "index.html": "mine"}, "another tool's index.json"),
        ({"chrome/manifest.json": '{"manifest_version": 3}'}, "another tool's manifest.json"),
    ],
)
def test_foreign_index_or_manifest_does_not_make_a_tree(tmp_path: Path, capsys, files: dict, why: str) -> None:
    out = tmp_path / "mine"
    for name, text in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        write(out / name, text)
    before = {p: p.read_text() for p in out.rglob("*") if p.is_file()}
    code, _, err = run(["build", "--preset", "bloom-560m", "--out", str(out)], capsys)
    assert code == 2 and "not a ropeexport tree" in err, why
    assert {p: p.read_text() for p in out.rglob("*") if p.is_file()} == before


def test_an_out_folder_that_cannot_be_created_is_one_line(tmp_path: Path, capsys) -> None:
    blocker = write(tmp_path / "file", "x")
    code, _, err = run(["build", "--preset", "bloom-560m", "--out", str(blocker / "sub")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--out" in err


def test_scaling_overrides_keep_provenance_true(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    base = ["build", "--preset", "qwen2.5-7b", "--max-positions", "1024", "--head-dim", "16", "--num-heads", "2"]
    code, _, err = run(
        [*base, "--num-kv-heads", "1", "--scaling-param", "factor=2", "--out", str(out), "--quiet"], capsys
    )
    assert code == 0, err  # one parameter changed, the documented original length kept
    manifest = json.loads((out / "qwen2.5-7b-rope-fp16-fused" / "manifest.json").read_text())
    params = manifest["spec"]["scaling_params"]
    assert params["factor"] == 2.0 and params["original_max_position_embeddings"] == 32768
    assert "--scaling-param for factor" in manifest["build"]["sources"]["scaling_params"]
    argv = [*base, "--num-kv-heads", "1", "--scaling", "default", "--out", str(out), "--quiet"]
    code, _, err = run([*argv, "--replace"], capsys)  # another spec under the same name: replaced on purpose
    assert code == 0, err
    manifest = json.loads((out / "qwen2.5-7b-rope-fp16-fused" / "manifest.json").read_text())
    assert manifest["spec"]["scaling_params"] == {} and "scaling_params" not in manifest["build"]["sources"]
    assert manifest["build"]["sources"]["scaling"] == "--scaling"


def test_repeated_variants_are_built_once(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    argv = ["build", "--preset", "bloom-560m", "--dtype", "fp16", "--dtype", "fp16", "--graph", "both"]
    code, _, err = run([*argv, "--graph", "fused", "--max-positions", "64", "--out", str(out), "--quiet"], capsys)
    assert code == 0, err
    assert sorted(a["name"] for a in json.loads((out / "index.json").read_text())["artifacts"]) == [
        "bloom-560m-bias-fp16-decomposed",
        "bloom-560m-bias-fp16-fused",
    ]
