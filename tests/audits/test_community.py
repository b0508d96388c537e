"""``audit`` and ``graft`` read a folder published for transformers.js (onnx-community's layout) as it is.

The folder is made once for the module (``tools/community_variants.py``): a tiny Llama decoder's transformers.js package
(its fp32 onnx/model.onnx, config.json, generation_config.json) and four variants made as transformers.js's own
conversion makes them: fp16, q4 (MatMulNBits, and GatherBlockQuantized for the embedding), q4f16, and the 8-bit
``quantized`` (MatMulInteger). ``audit DIR`` gives one row per variant and audits each; ``graft DIR --variant V --out
NEW`` writes the folder transformers.js loads, whose greedy tokens in transformers.js (Node) equal the original
variant's (the original is exact: nothing to repair, the graft must change nothing a user sees).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import ropeexport as rx
from ropeexport.api.packages import package
from ropeexport.decoder.transformersjs_check import node_dir
from tests.clirun import run
from tests.decoder.test_transformersjs import node_ready  # noqa: F401 (the fixture: npm packages, or skip)
from tests.toolmod import tool

variants = tool("community_variants")
VARIANTS = variants.VARIANTS
ops = variants.ops


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint) -> Path:  # noqa: ANN001
    """The onnx-community folder (module doc), made once."""
    root = tmp_path_factory.mktemp("community")
    built = rx.build_decoder(root / "out", checkpoint=tiny_checkpoint("llama"), eager=False)
    assert built.passed
    with pytest.MonkeyPatch.context() as patch:  # Node is not needed to write the package: its check is skipped
        patch.setenv("ROPEEXPORT_TRANSFORMERSJS_DIR", str(root / "no-node"))
        written = package(built.path, root / "package")
    assert written.passed
    return variants.community_folder(written.path, root / "llama-ONNX")


@pytest.mark.slow
def test_audit_reads_every_variant_of_the_folder(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models = folder / "onnx"
    assert {"MatMulNBits", "GatherBlockQuantized"} <= ops(models / "model_q4.onnx")  # what the rows are audits of
    assert {"MatMulNBits", "GatherBlockQuantized"} <= ops(models / "model_q4f16.onnx")
    assert "MatMulInteger" in ops(models / "model_quantized.onnx")
    code, printed, _ = run(["audit", str(folder), "--out", str(tmp_path / "reports")], capsys)
    assert code == 0, printed
    lines = printed.splitlines()
    assert lines[0] == f"{folder}: {len(VARIANTS)} model(s), against {folder / 'config.json'}"
    assert lines[1:1 + len(VARIANTS)] == [f"  onnx/{v}: 2 site(s), exact, gate passed" for v in VARIANTS]
    dtypes = {v: {s["dtype"] for s in json.loads((tmp_path / "reports" / Path(v).stem / "audit.json").read_text())
                  ["sites"]} for v in VARIANTS}  # fmt: skip
    assert dtypes["model_q4f16.onnx"] == dtypes["model_fp16.onnx"] == {"float16"}  # the tables as converted
    assert dtypes["model_q4.onnx"] == dtypes["model.onnx"] == {"float32"}


def _no_config(folder: Path, tmp: Path) -> list[str]:
    copy = tmp / "no-config"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("config.json"))
    return ["audit", str(copy)]


def _no_models(folder: Path, tmp: Path) -> list[str]:
    (tmp / "empty" / "onnx").mkdir(parents=True)
    return ["audit", str(tmp / "empty")]


# (what is wrong, the command, the start of the one line): exit 2, nothing written.
BAD = [("a variant not there", lambda f, t: ["audit", str(f), "--variant", "int8"],
        "--variant: must be one of model.onnx, model_fp16.onnx, model_q4.onnx, model_q4f16.onnx, "
        "model_quantized.onnx"),
       ("a folder without config.json", _no_config, "--hf-config: "),
       ("a folder without onnx/model*.onnx", _no_models, "MODEL: "),
       ("--variant with a file", lambda f, t: ["audit", str(f / "onnx" / "model.onnx"), "--variant", "q4"],
        "--variant: names a model inside a transformers.js folder"),
       ("a file without a config", lambda f, t: ["audit", str(f / "onnx" / "model.onnx")], "--hf-config: give"),
       ("graft of a folder of several models", lambda f, t: ["graft", str(f), "--out", str(t / "fixed")],
        "--variant: "),
       ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("what", "command", "said"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_exit_2(
    what: str, command, said: str, folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: ANN001
) -> None:
    args = command(folder, tmp_path)
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    code, printed, err = run(args, capsys)
    assert code == 2, printed
    assert err.startswith(f"ropeexport: error: {said}") and err.count("\n") == 1, err
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before


def _node_tokens(package_dir: Path, dtype: str, prompt: list[int], count: int) -> list[int]:
    """transformers.js's greedy tokens from ``package_dir`` in Node (tools/transformersjs/generate.mjs)."""
    done = subprocess.run(["node", str(node_dir() / "generate.mjs"), str(package_dir.resolve()), "--prompt-ids",
                           ",".join(map(str, prompt)), "--max-new-tokens", str(count), "--dtype", dtype],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return [int(t) for t in json.loads(done.stdout.strip().splitlines()[-1])["tokens"]]


@pytest.mark.slow
@pytest.mark.usefixtures("node_ready")
def test_graft_writes_a_folder_transformersjs_loads(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixed = tmp_path / "llama-fixed"
    code, printed, _ = run(["graft", str(folder), "--variant", "q4f16", "--out", str(fixed)], capsys)
    assert code == 0, printed
    assert printed.startswith(f"{fixed / 'onnx' / 'model_q4f16.onnx'}: 0 table pair(s) replaced, proven"), printed
    files = {p.relative_to(fixed).as_posix() for p in fixed.rglob("*") if p.is_file()}
    assert files - {"onnx/model_q4f16.onnx_data"} == {"config.json", "generation_config.json", "manifest.json",
                                                      "onnx/model_q4f16.onnx"}  # fmt: skip
    if "onnx/model_q4f16.onnx_data" in files:  # named as transformers.js reads external data
        config = json.loads((fixed / "config.json").read_text())
        assert config["transformers.js_config"]["use_external_data_format"]["model_q4f16.onnx"] == 1
    assert {"MatMulNBits", "GatherBlockQuantized"} <= ops(fixed / "onnx" / "model_q4f16.onnx")
    prompt = [1, 5, 9, 3, 7, 11, 2, 8, 4, 6, 10, 12]
    assert _node_tokens(fixed, "q4f16", prompt, 8) == _node_tokens(folder, "q4f16", prompt, 8)


# (the config audited against, whether it is the folder's own, trust config): the next step's graft line for a variant
NEXT = [("own", True, True), ("other", False, False)]


@pytest.mark.fast
@pytest.mark.parametrize(("which", "own", "trust"), NEXT, ids=[n[0] for n in NEXT])
def test_the_next_step_grafts_the_folder_variant(which: str, own: bool, trust: bool, tmp_path: Path) -> None:
    from ropeexport.audits.advice import graft_command

    folder = tmp_path / "llama-ONNX"
    (folder / "onnx").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "onnx" / "model_q4.onnx").write_bytes(b"")
    (folder.parent / "llama-ONNX-grafted").mkdir()  # an --out that exists is refused: the next name is given
    config = folder / "config.json" if own else tmp_path / "config.json"
    line = graft_command(str(folder / "onnx" / "model_q4.onnx"), str(config), "hf_config", trust)
    flag = "" if own else f" --hf-config {config}"
    assert line == (f"ropeexport graft {folder} --variant model_q4.onnx{flag} --out {folder}-grafted-2"
                    f"{' --trust config' if trust else ''}")  # fmt: skip


def _graph(op: str) -> Path:
    """A one-node model (``op`` on a float input) in a temporary file."""
    import tempfile

    import onnx
    from onnx import TensorProto, helper

    outputs = ["y", "scale", "zero"] if op == "DynamicQuantizeLinear" else ["y"]
    graph = helper.make_graph([helper.make_node(op, ["x"], outputs)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info(n, TensorProto.UINT8 if op != "Relu" else
                                                             TensorProto.FLOAT, None) for n in outputs])  # fmt: skip
    path = Path(tempfile.mkdtemp()) / f"{op}.onnx"
    onnx.save(helper.make_model(graph), str(path))
    return path


# (operator, whether an effect measured on the model carries the dynamic quantization note)
DYNAMIC = [("DynamicQuantizeLinear", True), ("Relu", False)]


@pytest.mark.fast
@pytest.mark.parametrize(("op", "noted"), DYNAMIC)
def test_an_effect_on_a_dynamically_quantized_model_says_so(op: str, noted: bool) -> None:
    from ropeexport.audits.advice import advise

    found = {"name": "float32-angles", "sites": [], "effect": {"relative": 5.7e-2, "position": 1079}}
    advise([found], [], str(_graph(op)), "config.json", "hf_config")
    assert ("quantizes its activations at run time" in found["severity"]["text"]) is noted
    assert found["severity"]["level"] == "wrong"  # the level is the measure's; the note says what it includes
