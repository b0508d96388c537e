"""The hostile-input table: every input that once succeeded silently, crashed, hung or read outside its folder.

Each row runs the real CLI and requires the contract for bad input: exit 2, exactly one line on stderr naming the
field, no traceback, and nothing written (``--out`` absent). Rows that need a file get it made by their ``setup``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from ropeexport import build
from ropeexport.families.alibi.spec import AlibiSpec
from tests.clirun import run as _run

HUGE = "1" + "0" * 400  # an integer no float holds
BASE = ["build", "--head-dim", "16", "--num-heads", "2", "--max-positions", "64"]
NESTED = "[" * 100_000 + "]" * 100_000


def _config(tmp: Path, **fields: object) -> str:
    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 128}
    path = tmp / "config.json"
    path.write_text(json.dumps(config | fields))
    return str(path)


def _text(tmp: Path, name: str, text: str) -> str:
    (tmp / name).write_text(text)
    return str(tmp / name)


def _fifo(tmp: Path, name: str) -> str:
    os.mkfifo(tmp / name)
    return str(tmp / name)


def _fp16_overflow(tmp: Path) -> str:
    from safetensors.numpy import save_file

    path = tmp / "w.safetensors"
    save_file({"relative_attention_bias": np.full((8, 2), 1e6, np.float32)}, str(path))
    return str(path)


def _dangling(tmp: Path) -> str:
    (tmp / "dangling").symlink_to(tmp / "nowhere")
    return str(tmp / "dangling")


Setup = Callable[[Path], list[str]]
# (id, argv builder, fragment of the one line)
BUILD_CASES: list[tuple[str, Setup, str]] = [
    ("partial-rotary-to-0", lambda t: ["build", "--hf-config", _config(t, partial_rotary_factor=0.05)], "partial_rotary_factor"),
    ("partial-rotary-1e-9", lambda t: ["build", "--hf-config", _config(t, partial_rotary_factor=1e-9)], "truncates to 0"),
    ("rotary-pct-to-0", lambda t: ["build", "--hf-config", _config(t, rotary_pct=0.01)], "rotary_pct"),
    ("mrope-section-not-half", lambda t: ["build", "--hf-config", _config(t, model_type="qwen2_5_vl", rope_scaling={"type": "mrope", "mrope_section": [2, 3, 2]})], "rope_scaling.mrope_section: [2, 3, 2] sums to 7, not the 8"),
    ("mrope-chunked-and-interleaved", lambda t: ["build", "--hf-config", _config(t, model_type="qwen2_vl", rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3], "mrope_interleaved": True})], "rope_scaling.mrope_interleaved: is true"),
    ("qwen-vl-decoder-tensorrt", lambda t: ["build", "--checkpoint", str(Path(_config(t, model_type="qwen3_vl", text_config={"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 96, "rope_parameters": {"rope_type": "default", "mrope_section": [3, 3, 2]}})).parent), "--artifact", "decoder", "--graph", "tensorrt"], "M-RoPE's block is fused or decomposed or gqa"),
    ("mrope-section-flag-not-half", lambda t: [*BASE, "--mrope-section", "2,3,2"], "mrope_section: must sum to rotary_dim / 2 = 8"),
    ("empty-hf-config", lambda t: ["build", "--hf-config", ""], "--hf-config: is empty"),
    ("empty-spec", lambda t: ["build", "--spec", ""], "--spec: is empty"),
    ("empty-name", lambda t: [*BASE, "--name", ""], "name: is empty"),
    ("name-index-json", lambda t: [*BASE, "--name", "index.json"], "name: 'index.json' is the tree's own index file"),
    ("name-index-html", lambda t: [*BASE, "--name", "INDEX.HTML"], "the tree's own index file"),
    ("arabic-indic-integer", lambda t: [*BASE[:-1], "١٢٨"], "max_positions: must be an integer in ASCII digits"),
    ("arabic-indic-float", lambda t: [*BASE, "--theta", "١٠٠٠٠"], "theta: must be a number in ASCII digits"),
    ("arabic-indic-atol", lambda t: [*BASE, "--atol", "١"], "--atol: expected VALUE or OUTPUT:VALUE with a number"),
    ("dangling-link-out", lambda t: [*BASE, "--out", _dangling(t)], "is a link to nothing"),
    ("empty-out", lambda t: [*BASE, "--out", ""], "--out: is empty"),
    ("atol-inf", lambda t: [*BASE, "--atol", "inf"], "--atol"),
    ("rtol-inf", lambda t: [*BASE, "--rtol", "query_out:inf"], "--rtol"),
    ("atol-nan", lambda t: [*BASE, "--atol", "nan"], "--atol"),
    ("theta-subnormal", lambda t: [*BASE, "--theta", "5e-324"], "theta"),
    ("theta-below-1", lambda t: [*BASE, "--theta", "0.5"], "theta"),
    ("theta-huge-int-config", lambda t: ["build", "--hf-config", _config(t, rope_theta=int(HUGE))], "--hf-config"),
    ("theta-huge-int-spec", lambda t: ["build", "--spec", _text(t, "s.toml", f"theta = {HUGE}\n")], "theta"),
    ("max-positions-huge-int-spec", lambda t: ["build", "--spec", _text(t, "s.json", f'{{"max_positions": {HUGE}}}')], "--spec"),
    ("factor-huge-int-param", lambda t: [*BASE, "--scaling", "linear", "--scaling-param", f"factor={HUGE}"], "factor"),
    ("yarn-factor-nan", lambda t: [*BASE, "--scaling", "yarn", "--scaling-param", "factor=nan", "--scaling-param", "original_max_position_embeddings=32"], "factor"),
    ("yarn-factor-inf", lambda t: [*BASE, "--scaling", "yarn", "--scaling-param", "factor=Infinity", "--scaling-param", "original_max_position_embeddings=32"], "factor"),
    ("yarn-factor-1e308", lambda t: [*BASE, "--scaling", "yarn", "--scaling-param", "factor=1e308", "--scaling-param", "original_max_position_embeddings=32"], "factor"),
    ("dynamic-factor-nan-config", lambda t: ["build", "--hf-config", _text(t, "c.json", '{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "rope_scaling": {"type": "dynamic", "factor": NaN}}')], "--hf-config"),
    ("deep-json-config", lambda t: ["build", "--hf-config", _text(t, "c.json", NESTED)], "nested deeper"),
    ("deep-json-spec", lambda t: ["build", "--spec", _text(t, "s.json", NESTED)], "nested deeper"),
    ("deep-toml-spec", lambda t: ["build", "--spec", _text(t, "s.toml", "a = " + "[" * 5000 + "]" * 5000 + "\n")], "--spec"),
    ("rope-heads-2^40", lambda t: [*BASE[:3], "--num-heads", str(2**40)], "num_heads"),
    ("rope-head-dim-2^40", lambda t: ["build", "--head-dim", str(2**40)], "head_dim"),
    ("hf-config-dev-zero", lambda t: ["build", "--hf-config", "/dev/zero"], "not a regular file"),
    ("hf-config-fifo", lambda t: ["build", "--hf-config", _fifo(t, "c.json")], "not a regular file"),
    ("spec-fifo", lambda t: ["build", "--spec", _fifo(t, "s.json")], "not a regular file"),
    ("weights-fifo", lambda t: ["build", "--encoding", "t5", "--num-heads", "2", "--num-buckets", "8", "--weights", _fifo(t, "w.safetensors")], "not a regular file"),
    ("weights-overflow-fp16", lambda t: ["build", "--encoding", "t5", "--num-heads", "2", "--num-buckets", "8", "--dtype", "fp16", "--weights", _fp16_overflow(t)], "overflows fp16"),
    ("dtype-int4", lambda t: ["build", "--preset", "llama-3.1-8b", "--dtype", "int4"], "got 'int4': int4 stores a decoder's projections (--artifact decoder with --weight-format int4)"),
]  # fmt: skip




@pytest.mark.parametrize(("setup", "fragment"), [c[1:] for c in BUILD_CASES], ids=[c[0] for c in BUILD_CASES])
def test_bad_build_input_is_one_line_exit_2_and_nothing_written(
    setup: Setup, fragment: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = setup(tmp_path)
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    with _no_warnings():
        code, _, err = _run(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert fragment in lines[0] and "Traceback" not in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "ropeexport-out").exists()


class _no_warnings:
    """Fails the row if numpy (or anything) warns beside the one-line error."""

    def __enter__(self) -> None:
        import warnings

        self._catch = warnings.catch_warnings(record=True)
        self._seen = self._catch.__enter__()
        warnings.simplefilter("always")

    def __exit__(self, *exc: object) -> None:
        self._catch.__exit__(*exc)
        assert not self._seen, [str(w.message) for w in self._seen]


# ---- verify on tampered or malicious folders ----


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(AlibiSpec(name="a", num_heads=2, head_dim=4, max_positions=16), tmp_path_factory.mktemp("b")).path


def _manifest(folder: Path, change: Callable[[dict], None]) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    change(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _rehash(folder: Path, name: str, data: bytes) -> None:
    """Replace a file and record its new hash: hash-consistent, but the content is hostile."""
    from ropeexport.graph.onnx_io import sha256

    (folder / name).write_bytes(data)
    _manifest(folder, lambda m: m["files"].__setitem__(name, sha256(folder / name)))


def _model_meta(folder: Path, key: str, value: str) -> None:
    model = onnx.load(str(folder / "model.onnx"))
    for prop in model.metadata_props:
        if prop.key == key:
            prop.value = value
    _rehash(folder, "model.onnx", model.SerializeToString())


def _absurd_dims(folder: Path) -> None:
    model = onnx.load(str(folder / "model.onnx"))
    table = next(t for t in model.graph.initializer if t.name == "neg_slopes")
    table.dims[:] = [2**20, 2**20, 2**20, 1]
    _rehash(folder, "model.onnx", model.SerializeToString())


def _external_outside(folder: Path) -> None:
    model = onnx.load(str(folder / "model.onnx"))
    table = next(t for t in model.graph.initializer if t.name == "neg_slopes")
    table.ClearField("raw_data")
    table.data_location = onnx.TensorProto.EXTERNAL
    table.external_data.add(key="location", value="../../etc/passwd")
    _rehash(folder, "model.onnx", model.SerializeToString())


def _external_unlisted(folder: Path) -> None:
    model = onnx.load(str(folder / "model.onnx"))
    table = next(t for t in model.graph.initializer if t.name == "neg_slopes")
    (folder / "extra.bin").write_bytes(table.raw_data)
    table.ClearField("raw_data")
    table.data_location = onnx.TensorProto.EXTERNAL
    table.external_data.add(key="location", value="extra.bin")
    _rehash(folder, "model.onnx", model.SerializeToString())


def _link_model(folder: Path) -> None:
    target = folder.parent / "elsewhere.onnx"
    shutil.move(folder / "model.onnx", target)
    (folder / "model.onnx").symlink_to(target)


VERIFY_CASES: list[tuple[str, Callable[[Path], None], str]] = [
    ("files-dotdot", lambda f: _manifest(f, lambda m: m["files"].__setitem__("../x", "0" * 64)), "leaves the artifact folder"),
    ("files-absolute", lambda f: _manifest(f, lambda m: m["files"].__setitem__("/etc/passwd", "0" * 64)), "relative file name"),
    ("model-symlink", _link_model, "symbolic link"),
    ("manifest-fifo", lambda f: ((f / "manifest.json").unlink(), os.mkfifo(f / "manifest.json")), "not a regular file"),
    ("manifest-deep", lambda f: (f / "manifest.json").write_text(NESTED), "nested deeper"),
    ("manifest-nan", lambda f: (f / "manifest.json").write_text('{"schema": NaN}'), "NaN"),
    ("model-random-bytes", lambda f: _rehash(f, "model.onnx", os.urandom(4096)), "model.onnx"),
    ("spec-metadata-list", lambda f: _model_meta(f, "ropeexport.spec", "[1, 2]"), "table of fields"),
    ("max-positions-metadata-text", lambda f: _model_meta(f, "ropeexport.max_positions", "lots"), "max_positions"),
    ("absurd-table-dims", _absurd_dims, "over 2 GiB"),
    ("external-data-outside", _external_outside, "leaves the artifact folder"),
    ("external-data-unlisted", _external_unlisted, "not listed"),
]  # fmt: skip


@pytest.mark.parametrize(("damage", "fragment"), [c[1:] for c in VERIFY_CASES], ids=[c[0] for c in VERIFY_CASES])
def test_verify_refuses_a_hostile_folder_with_one_line(
    damage: Callable[[Path], None], fragment: str, built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "a"
    shutil.copytree(built, folder)
    damage(folder)
    code, _, err = _run(["verify", str(folder)], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and fragment in lines[0], err


def test_tree_verify_does_not_follow_a_linked_artifact_folder(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "outside"
    shutil.copytree(built, outside / "a")
    tree = tmp_path / "tree"
    shutil.copytree(built.parent, tree)
    (tree / "linked").symlink_to(outside / "a")
    before = (outside / "a" / "report.json").stat().st_mtime_ns
    assert _run(["verify", str(tree)], capsys)[0] == 0
    assert (outside / "a" / "report.json").stat().st_mtime_ns == before  # nothing outside the tree was rewritten


# ---- check-trt and diff ----


def _empty_model(tmp: Path) -> str:
    onnx.save(onnx.helper.make_model(onnx.helper.make_graph([], "g", [], [])), str(tmp / "g.onnx"))
    return str(tmp / "g.onnx")


OTHER_CASES: list[tuple[str, Setup, str]] = [
    ("check-trt-empty-file", lambda t: ["check-trt", _text(t, "e.onnx", ""), "--trt-version", "10.15"], "holds no graph"),
    ("check-trt-no-graph", lambda t: ["check-trt", _empty_model(t), "--trt-version", "10.15"], "holds no graph"),
    ("check-trt-fifo", lambda t: ["check-trt", _fifo(t, "m.onnx"), "--trt-version", "10.15"], "not a regular file"),
    ("diff-non-utf8", lambda t: ["diff", str(_bytes(t, "o.json", b"\xff\xfe{")), _text(t, "n.json", "{}")], "not UTF-8"),
    ("diff-deep", lambda t: ["diff", _text(t, "o.json", NESTED), _text(t, "n.json", "{}")], "nested deeper"),
    ("diff-huge-int", lambda t: ["diff", _text(t, "o.json", '{"a": ' + HUGE + "}"), _text(t, "n.json", "{}")], "out of range"),
    ("diff-nan", lambda t: ["diff", _text(t, "o.json", '{"max_abs": NaN}'), _text(t, "n.json", "{}")], "NaN"),
    ("diff-fifo", lambda t: ["diff", _fifo(t, "o.json"), _text(t, "n.json", "{}")], "not a regular file"),
]  # fmt: skip


def _bytes(tmp: Path, name: str, data: bytes) -> Path:
    (tmp / name).write_bytes(data)
    return tmp / name


@pytest.mark.parametrize(("setup", "fragment"), [c[1:] for c in OTHER_CASES], ids=[c[0] for c in OTHER_CASES])
def test_bad_check_trt_and_diff_input_is_one_line_exit_2(
    setup: Setup, fragment: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(setup(tmp_path), capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and fragment in lines[0], err


def test_the_table_counts_match_the_docs() -> None:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "exit-codes.md").read_text()
    total = len(BUILD_CASES) + len(VERIFY_CASES) + len(OTHER_CASES) + 1  # + the linked tree folder
    assert f"{total} hostile inputs" in readme
    checks = sum(c[0].startswith("check-trt") for c in OTHER_CASES)
    for what, count in (
        ("`build` inputs", len(BUILD_CASES)),
        ("`verify` on tampered", len(VERIFY_CASES) + 1),
        ("`check-trt` models", checks),
        ("`diff` reports", len(OTHER_CASES) - checks),
    ):
        row = next(line for line in readme.splitlines() if line.startswith(f"| {what}"))
        assert f"| {count} | {count} |" in row, row
