from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ropeexport.catalog import recipe_for, recipes
from ropeexport.families.rope.export import build_rope_graph
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.report.views import EncodingReport, read_report
from tests.clirun import run

SMALL = ["--head-dim", "16", "--num-heads", "4", "--num-kv-heads", "2", "--max-positions", "128"]
LONGROPE = [
    "--scaling",
    "longrope",
    "--scaling-param",
    "original_max_position_embeddings=32",
    "--scaling-param",
    "short_factor=1,1,1,1,1,1,1,1",
    "--scaling-param",
    "long_factor=1,2,3,4,5,6,7,8",
]




def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# Every bad input from the foundation issue: (flags, field the one-line error must name).
BAD = [
    (["--head-dim", "7"], "head_dim"),
    (["--head-dim", "16", "--rotary-dim", "5"], "rotary_dim"),
    (["--head-dim", "16", "--rotary-dim", "32"], "rotary_dim"),
    (["--num-heads", "6", "--num-kv-heads", "4"], "num_kv_heads"),
    (["--num-heads", "0"], "num_heads"),
    (["--theta", "0"], "theta"),
    (["--theta", "-10000"], "theta"),
    (["--theta", "nan"], "theta"),
    (["--theta", "abc"], "theta"),
    (["--max-positions", "0"], "max_positions"),
    (["--max-positions", "-5"], "max_positions"),
    (["--max-positions", "99999999999"], "max_positions"),
    (["--head-dim", "12.5"], "head_dim"),
    (["--scaling", "linear", "--scaling-param", "factor=0.5"], "scaling_params.factor"),
    (["--scaling", "ntk", "--scaling-param", "factor=0.9"], "scaling_params.factor"),
    (
        [
            "--scaling",
            "dynamic",
            "--scaling-param",
            "factor=0.5",
            "--scaling-param",
            "original_max_position_embeddings=64",
        ],
        "scaling_params.factor",
    ),
    (
        [
            "--scaling",
            "yarn",
            "--scaling-param",
            "factor=0.25",
            "--scaling-param",
            "original_max_position_embeddings=64",
        ],
        "scaling_params.factor",
    ),
    (
        [
            "--scaling",
            "llama3",
            "--scaling-param",
            "factor=0.5",
            "--scaling-param",
            "low_freq_factor=1",
            "--scaling-param",
            "high_freq_factor=4",
            "--scaling-param",
            "original_max_position_embeddings=64",
        ],
        "scaling_params.factor",
    ),
    (
        [
            "--scaling",
            "llama3",
            "--scaling-param",
            "factor=8",
            "--scaling-param",
            "low_freq_factor=4",
            "--scaling-param",
            "high_freq_factor=1",
            "--scaling-param",
            "original_max_position_embeddings=64",
        ],
        "scaling_params.high_freq_factor",
    ),
    (["--scaling", "linear"], "scaling_params.factor"),
    (["--scaling", "yarn", "--scaling-param", "factor=4"], "scaling_params.original_max_position_embeddings"),
    (["--scaling", "linear", "--scaling-param", "factor=2", "--scaling-param", "fatcor=2"], "scaling_params.fatcor"),
    (["--scaling", "linear", "--scaling-param", "factor"], "--scaling-param"),
    (["--scaling", "linear", "--scaling-param", "factor=two"], "scaling_params.factor"),
    (
        [
            "--scaling",
            "yarn",
            "--scaling-param",
            "factor=4",
            "--scaling-param",
            "original_max_position_embeddings=64",
            "--scaling-param",
            "truncate=maybe",
        ],
        "scaling_params.truncate",
    ),
    (["--scaling", "nope"], "scaling"),
    (["--head-dim", "16", *LONGROPE[:-2], "--scaling-param", "long_factor=1,2,3"], "scaling_params.long_factor"),
    (
        ["--head-dim", "16", *LONGROPE[:4], "--scaling-param", "short_factor=1,1", *LONGROPE[-2:]],
        "scaling_params.short_factor",
    ),
    (["--head-dim", "4", "--scaling", "ntk", "--scaling-param", "factor=2", "--rotary-dim", "2"], "rotary_dim"),
    (["--dtype", "fp8"], "dtype"),
    (["--graph", "fusd"], "graph"),
    (["--layout", "rotate"], "layout"),
    (["--encoding", "xpos"], "encoding"),
    (["--name", "../escape"], "name"),
    (["--runtime", "tensorrt-typo"], "runtime"),
]


@pytest.mark.parametrize(("flags", "field"), BAD, ids=[f"{i}-{f}" for i, (_, f) in enumerate(BAD)])
def test_bad_flags_one_line_exit_2_nothing_written(tmp_path: Path, capsys, flags: list[str], field: str) -> None:
    out_dir = tmp_path / "out"
    code, out, err = run(["build", *flags, "--out", str(out_dir)], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], err
    assert "Traceback" not in err
    assert not out_dir.exists()


BAD_FILES = [
    ("missing.json", None, "--spec"),
    ("broken.json", '{"head_dim": 16,', "--spec"),
    ("broken.toml", "head_dim = = 16", "--spec"),
    ("binary.json", b"\xff\xfe\x00junk", "--spec"),
    ("unknown.toml", "head_dim = 16\nrotory_dim = 8\n", "rotory_dim"),
    ("list.json", "[1, 2]", "spec"),
    ("empty.toml", "artifacts = []", "artifacts"),
    ("dupe.toml", '[[artifacts]]\nname = "a"\n[[artifacts]]\nname = "a"\n', "name"),
    ("bad-field.toml", "head_dim = 16\nrotary_dim = 18\n", "rotary_dim"),
]


@pytest.mark.parametrize(("filename", "content", "field"), BAD_FILES, ids=[f[0] for f in BAD_FILES])
def test_bad_spec_files_one_line_exit_2(tmp_path: Path, capsys, filename: str, content, field: str) -> None:
    path = tmp_path / filename
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    out_dir = tmp_path / "out"
    code, _, err = run(["build", "--spec", str(path), "--out", str(out_dir)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and field in err, err
    assert not out_dir.exists()


def test_out_folder_that_is_not_an_artifact_is_refused(tmp_path: Path, capsys) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "precious.txt").write_text("keep")
    code, _, err = run(["build", *SMALL, "--name", "mine", "--out", str(tmp_path)], capsys)
    assert code == 2 and "--out" in err
    assert (tmp_path / "mine" / "precious.txt").read_text() == "keep"


def test_usage_errors_are_one_line_exit_2() -> None:
    proc = subprocess.run([sys.executable, "-m", "ropeexport", "build", "--head-dim"], capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "--head-dim" in proc.stderr


def test_build_from_flags_writes_the_artifact_contract(tmp_path: Path, capsys) -> None:
    code, out, _ = run(
        ["build", *SMALL, *LONGROPE, "--name", "lr", "--graph", "decomposed", "--out", str(tmp_path)], capsys
    )
    assert code == 0, out
    folder = tmp_path / "lr"
    assert sorted(p.name for p in folder.iterdir()) == [
        "manifest.json",
        "model.onnx",
        "polygraphy",
        "report.html",
        "report.json",
        "report.md",
    ]
    assert sorted(p.name for p in (folder / "polygraphy").iterdir()) == ["inputs.json", "reference.json"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["spec"]["scaling"] == "longrope" and manifest["spec"]["scaling_params"]["factor"] == 4.0
    assert manifest["opset"] == 17 and manifest["graph"] == "decomposed"
    assert [i["name"] for i in manifest["inputs"]] == ["query", "key", "position_ids"]
    assert manifest["inputs"][0]["shape"] == ["batch", 4, "seq", 16] and manifest["inputs"][2]["dtype"] == "int64"
    assert [o["name"] for o in manifest["outputs"]] == ["query_out", "key_out"]
    assert {"ropeexport", "torch", "onnx", "onnxruntime"} <= set(manifest["versions"])
    assert set(manifest["files"]) == {"model.onnx", "polygraphy/inputs.json", "polygraphy/reference.json"}
    report = read_report(folder, EncodingReport)
    assert report.passed is True
    for c in report.comparisons:
        assert not c.lacks("reference", "runtime", "output", "max_abs", "max_rel", "max_ulp", "passed")
    assert {c.reference for c in report.comparisons} == {"eager", "float64"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary folder left behind"


def test_spec_files_json_and_toml_with_flag_override(tmp_path: Path, capsys) -> None:
    toml = write(
        tmp_path / "s.toml",
        'name = "t"\nhead_dim = 16\nnum_heads = 2\nmax_positions = 64\n'
        'scaling = "linear"\n[scaling_params]\nfactor = 2.0\n',
    )
    js = write(
        tmp_path / "s.json",
        json.dumps(
            {
                "artifacts": [
                    {"name": "j1", "head_dim": 8, "num_heads": 2, "max_positions": 32},
                    {"name": "j2", "head_dim": 8, "num_heads": 2, "max_positions": 32, "layout": "interleaved"},
                ]
            }
        ),
    )
    assert run(["build", "--spec", str(toml), "--dtype", "fp16", "--out", str(tmp_path / "o")], capsys)[0] == 0
    assert json.loads((tmp_path / "o" / "t" / "manifest.json").read_text())["spec"]["dtype"] == "fp16"
    assert run(["build", "--spec", str(js), "--out", str(tmp_path / "o")], capsys)[0] == 0
    assert (tmp_path / "o" / "j2" / "report.json").exists()


def test_rebuild_replaces_an_existing_artifact(tmp_path: Path, capsys) -> None:
    args = ["build", *SMALL, "--name", "a", "--out", str(tmp_path)]
    assert run(args, capsys)[0] == 0
    before = (tmp_path / "a" / "model.onnx").read_bytes()
    assert run(args, capsys)[0] == 0  # the same spec again: a rebuild, replaced silently
    # Another spec under the same name is refused before anything is written, unless --replace says so.
    code, _, err = run([*args, "--theta", "500000"], capsys)
    assert code == 2 and "theta: 10000.0 there, 500000.0 now" in err and "--replace" in err
    assert (tmp_path / "a" / "model.onnx").read_bytes() == before
    assert run([*args, "--theta", "500000", "--replace"], capsys)[0] == 0
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["spec"]["theta"] == 500000.0


def test_failed_verification_exits_1_and_keeps_the_report(tmp_path: Path, capsys, monkeypatch) -> None:
    # An exporter with a bug (it builds the interleaved rotation for a half-layout spec) must be caught.
    kind = recipe_for(RopeSpec())
    wrong = dataclasses.replace(kind, export=lambda spec: build_rope_graph(spec.replace(layout="interleaved")))
    monkeypatch.setitem(recipes(), ("rope", "rope"), wrong)
    code, _, err = run(["build", *SMALL, "--name", "bad", "--out", str(tmp_path)], capsys)
    assert code == 1 and "FAILED" in err
    report = read_report(tmp_path / "bad", EncodingReport)
    assert report.passed is False and any(not c.passed for c in report.comparisons)


def test_list_json_names_every_schedule_and_param(capsys) -> None:
    code, out, _ = run(["list", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and set(data["schedules"]) == {"default", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope",
                                                         "proportional"}
    assert data["schedules"]["yarn"]["params"]["beta_fast"]["default"] == 32.0
    assert data["encodings"]["rope"]["layouts"] == ["half", "interleaved", "complex"]
    code, out, _ = run(["list"], capsys)
    assert code == 0 and "longrope" in out


@pytest.mark.slow  # the embedded default at real length (half a minute)
def test_default_build_builds_one_preset_per_family_at_real_length(tmp_path: Path) -> None:
    """The embedded default: llama-3.1-8b at 131072 positions and bloom-560m at 2048 among them (real lengths)."""
    proc = subprocess.run([sys.executable, "-m", "ropeexport", "build"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "ropeexport-out"
    assert proc.stdout.strip().splitlines()[-1] == str((out / "index.html").resolve())
    from ropeexport.catalog import encodings
    from ropeexport.defaults import DEFAULT_PRESETS

    index = json.loads((out / "index.json").read_text())
    assert [a["origin"]["preset"] for a in index["artifacts"]] == sorted(DEFAULT_PRESETS)
    assert all(a["passed"] for a in index["artifacts"])
    assert {a["encoding"] for a in index["artifacts"]} == set(encodings())
    lengths = {a["origin"]["preset"]: a["max_positions"] for a in index["artifacts"]}
    assert lengths["llama-3.1-8b"] == 131072 and lengths["bloom-560m"] == 2048


@pytest.mark.slow  # every feature spec built
def test_feature_set_builds_through_a_spec_file(tmp_path: Path, capsys) -> None:
    """One artifact per RoPE feature (layouts, schedules, dtypes) and per family, as artifacts = [...]."""
    from ropeexport.defaults import FEATURE_SPECS

    path = write(tmp_path / "features.json", json.dumps({"artifacts": FEATURE_SPECS}))
    code, _, err = run(["build", "--spec", str(path), "--out", str(tmp_path / "o"), "-j", "2", "--quiet"], capsys)
    assert code == 0, err
    index = json.loads((tmp_path / "o" / "index.json").read_text())
    assert sorted(a["name"] for a in index["artifacts"]) == sorted(s["name"] for s in FEATURE_SPECS)
    assert RopeSpec(**FEATURE_SPECS[0]).scaling == "llama3"


MORE_BAD_FILES = [
    ("enc.json", '{"max_positions": 16, "encoding": ["rope"]}', "encoding"),
    ("strnum.json", '{"max_positions": " 16 "}', "max_positions"),
    ("strtheta.json", '{"theta": "1e4"}', "theta"),
    ("spec.txt", '{"head_dim": 16}', "--spec"),
    ("items.json", '{"artifacts": [1, 2]}', "artifacts"),
]


@pytest.mark.parametrize(("filename", "content", "field"), MORE_BAD_FILES, ids=[f[0] for f in MORE_BAD_FILES])
def test_more_bad_spec_files(tmp_path: Path, capsys, filename: str, content: str, field: str) -> None:
    path = write(tmp_path / filename, content)
    code, _, err = run(["build", "--spec", str(path), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and field in err, err
    assert not (tmp_path / "out").exists()


def test_out_below_a_file_is_refused(tmp_path: Path, capsys) -> None:
    write(tmp_path / "afile", "hi")
    code, _, err = run(["build", *SMALL, "--out", str(tmp_path / "afile" / "sub")], capsys)
    assert code == 2 and "--out" in err and "not a folder" in err


def test_tables_too_large_to_build_are_refused_before_anything_is_written(tmp_path: Path, capsys) -> None:
    out = tmp_path / "big" / "deeper"
    code, _, err = run(["build", "--head-dim", "256", "--max-positions", "16777216", "--out", str(out)], capsys)
    assert code == 2 and "max_positions" in err and "2^27" in err
    assert not (tmp_path / "big").exists()


def test_flags_override_the_file_before_defaults_are_filled(tmp_path: Path, capsys) -> None:
    path = write(tmp_path / "s.json", json.dumps({"max_positions": 64, "head_dim": 128, "num_heads": 2}))
    assert (
        run(
            ["build", "--spec", str(path), "--head-dim", "16", "--dtype", "fp16", "--out", str(tmp_path / "o")], capsys
        )[0]
        == 0
    )
    manifest = json.loads(
        (tmp_path / "o" / "rope-rope-half-default-h2x16-p64-fp16-fused" / "manifest.json").read_text()
    )
    assert manifest["spec"]["rotary_dim"] == 16 and manifest["spec"]["dtype"] == "fp16"


def test_top_level_keys_are_shared_by_every_artifact(tmp_path: Path, capsys) -> None:
    path = write(
        tmp_path / "s.toml",
        "head_dim = 8\nnum_heads = 2\nmax_positions = 32\n"
        '[[artifacts]]\nname = "x"\n[[artifacts]]\nname = "y"\nhead_dim = 16\n',
    )
    assert run(["build", "--spec", str(path), "--out", str(tmp_path / "o")], capsys)[0] == 0
    head = lambda n: json.loads((tmp_path / "o" / n / "manifest.json").read_text())["spec"]["head_dim"]  # noqa: E731
    assert (head("x"), head("y")) == (8, 16)


def test_a_build_that_fails_midway_leaves_no_folder_it_created(tmp_path: Path, monkeypatch) -> None:
    kind = recipe_for(RopeSpec())

    def broken(spec: RopeSpec) -> None:
        raise RuntimeError("exporter crashed")

    monkeypatch.setitem(recipes(), ("rope", "rope"), dataclasses.replace(kind, export=broken))
    from ropeexport import build

    with pytest.raises(RuntimeError):
        build(RopeSpec(head_dim=8, num_heads=2, max_positions=16), tmp_path / "new" / "out")
    assert not (tmp_path / "new").exists()


# Bad input for the other encodings: (flags, field the one-line error must name).
BAD_ENCODING_FLAGS = [
    (["--encoding", "alibi", "--num-heads", "0"], "num_heads"),
    (["--encoding", "alibi", "--artifact", "apply"], "artifact"),
    (["--encoding", "alibi", "--clip", "3"], "clip"),
    (["--encoding", "sinusoidal", "--d-model", "7"], "d_model"),
    (["--encoding", "sinusoidal", "--d-model", "0"], "d_model"),
    (["--encoding", "shaw", "--clip", "0"], "clip"),
    (["--encoding", "shaw", "--clip", "-2"], "clip"),
    (["--encoding", "t5", "--num-buckets", "1"], "num_buckets"),
    (["--encoding", "t5", "--max-distance", "2"], "max_distance"),
    (["--encoding", "kerple", "--kernel", "cubic"], "kernel"),
    (["--encoding", "tupe", "--num-heads", "-1"], "num_heads"),
    (["--encoding", "transformer-xl", "--head-dim", "0"], "head_dim"),
    (["--encoding", "sandwich", "--max-positions", "0"], "max_positions"),
    (["--encoding", "shaw", "--weights", "/nonexistent/w.safetensors"], "weights"),
    (["--encoding", "t5", "--query-position-ids", "3"], "--query-position-ids"),
]


@pytest.mark.parametrize(("flags", "field"), BAD_ENCODING_FLAGS, ids=[" ".join(f[:4]) for f, _ in BAD_ENCODING_FLAGS])
def test_bad_encoding_flags_one_line_exit_2(tmp_path: Path, capsys, flags: list[str], field: str) -> None:
    out_dir = tmp_path / "out"
    code, _, err = run(["build", *flags, "--out", str(out_dir)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and field in err, err
    assert not out_dir.exists()


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ({"relative_key": (11, 8)}, "lacks tensor"),
        ({"relative_key": (11, 8), "relative_value": (11, 9)}, "shape"),
        ({"relative_key": (11, 8), "relative_value": (11, 8), "extra": (1,)}, "unexpected"),
    ],
)
def test_weights_files_that_do_not_fit_are_rejected(tmp_path: Path, capsys, tensors: dict, message: str) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    path = tmp_path / "w.safetensors"
    save_file({name: np.zeros(shape, np.float32) for name, shape in tensors.items()}, str(path))
    args = ["build", "--encoding", "shaw", "--clip", "5", "--head-dim", "8", "--num-heads", "2", "--weights", str(path)]
    code, _, err = run([*args, "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "weights" in err and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_a_fitting_weights_file_builds(tmp_path: Path, capsys) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    path = tmp_path / "w.safetensors"
    rng = np.random.default_rng(0)
    save_file(
        {n: rng.standard_normal((11, 8)).astype(np.float32) for n in ("relative_key", "relative_value")}, str(path)
    )
    args = [
        "build",
        "--encoding",
        "shaw",
        "--clip",
        "5",
        "--head-dim",
        "8",
        "--num-heads",
        "2",
        "--max-positions",
        "64",
    ]
    code, out, _ = run([*args, "--weights", str(path), "--out", str(tmp_path / "out")], capsys)
    assert code == 0, out
