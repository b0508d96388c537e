"""``ropeexport package DECODER --for transformers.js``: the package transformers.js loads, run in transformers.js.

transformers.js 4.3.1 runs in Node (tools/transformersjs, its npm packages pinned by the lockfile there). The tests that
need it install those packages themselves, once per checkout (``node_ready``: ``npm ci`` as the lockfile pins them), so
README's one test command runs them on a fresh clone; where node or the registry is absent they skip with the reason
and the rest still run. Every architecture ropeexport builds that transformers.js has a class for, in fp32 (and the
forms, fp16 and int4 on Llama): greedy tokens from transformers.js's own ``generate`` equal the decoder's own, at
position 0 and after a long prompt, and the logits it hands its logits processors are within the bound of the logit
scale.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

import ropeexport as rx
from ropeexport.api.packages import package
from ropeexport.decoder.serve import DecoderSession
from ropeexport.decoder.transformersjs_check import Greedy, compare, node_dir, node_missing
from tests.clirun import run


@pytest.fixture(scope="module")
def node_ready() -> None:
    """transformers.js ready in Node: its npm packages installed as tools/transformersjs/package-lock.json pins them
    (``npm ci``, the first time only), or the test skipped with why (node, npm or the registry absent).

    ONNXRUNTIME_NODE_INSTALL=skip: onnxruntime-node's install script would fetch CUDA binaries from a host that cannot
    be reached (its CPU binaries are in the npm package itself). A lock file keeps two test processes from installing
    into the same folder at once.
    """
    folder = node_dir()
    why = node_missing()
    if why is not None and shutil.which("node") and shutil.which("npm") and (folder / "package-lock.json").is_file():
        with (folder / ".npm-ci.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if node_missing() is not None:  # another process may have installed them while this one waited
                done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline"], cwd=folder,
                                      env={**os.environ, "ONNXRUNTIME_NODE_INSTALL": "skip"}, capture_output=True,
                                      text=True, timeout=900, check=False)  # fmt: skip
                if done.returncode != 0:
                    last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
                    pytest.skip(f"transformers.js cannot run here: npm ci failed in {folder}: {last}")
        why = node_missing()
    if why is not None:
        pytest.skip(f"transformers.js cannot run here: {why}")


needs_node = pytest.mark.usefixtures("node_ready")

# (tiny checkpoint, form, dtype, weight format): every architecture transformers.js loads, the forms, fp16 and int4.
CASES = [("llama", "fused", "fp32", ""), ("llama", "gqa", "fp32", ""), ("llama", "decomposed", "fp32", ""),
         ("llama", "tensorrt", "fp32", ""), ("llama", "fused", "fp16", ""), ("llama", "fused", "fp32", "int4"),
         ("llama-biases", "fused", "fp32", "int4"), ("llama-llama3", "fused", "fp32", ""),
         ("llama-dynamic", "fused", "fp32", ""), ("mistral-window", "fused", "fp32", ""),
         ("qwen2-yarn", "gqa", "fp32", ""), ("phi3-longrope", "fused", "fp32", ""),
         ("phi3-partial-longrope", "fused", "fp32", ""), ("gpt_neox", "fused", "fp32", ""),
         ("gptj", "fused", "fp32", ""), ("bloom", "fused", "fp32", ""), ("qwen3", "fused", "fp32", ""),
         ("gemma3", "fused", "fp32", ""), ("gemma2", "fused", "fp32", ""), ("smollm3-nope", "fused", "fp32", ""),
         ("gpt_oss", "fused", "fp32", ""), ("gpt_oss", "gqa", "fp32", ""), ("cohere2", "fused", "fp32", ""),
         ("olmo3", "fused", "fp32", ""), ("qwen3_moe", "fused", "fp32", ""),
         ("ministral3", "fused", "fp32", "")]  # fmt: skip
FILES = {("fp32", ""): "model.onnx", ("fp16", ""): "model_fp16.onnx", ("fp32", "int4"): "model_q4.onnx"}
# (tiny checkpoint, what the one line says): glm4 and exaone4 have no causal-LM class in transformers.js 4.3.1; a
# Qwen-VL text decoder runs there as two files with decode positions 2n too far (tools/transformersjs_qwen_vl.py).
REFUSED = [("glm4", "no causal-LM class for model_type 'glm4'"),
           ("exaone4", "no causal-LM class for model_type 'exaone4'"),
           ("qwen2_5_vl", "Qwen-VL text model (model_type 'qwen2_5_vl') from two files")]  # fmt: skip


def _batch_dims(model: Path) -> set[str]:
    """The symbolic names of every input's and output's first dimension."""
    graph = onnx.load(str(model), load_external_data=False).graph
    return {v.type.tensor_type.shape.dim[0].dim_param for v in (*graph.input, *graph.output)}


@pytest.mark.slow
@needs_node
@pytest.mark.parametrize(("name", "graph", "dtype", "weights"), CASES, ids=["-".join(filter(None, c)) for c in CASES])
def test_transformersjs_generates_the_decoders_tokens(
    name: str, graph: str, dtype: str, weights: str, tmp_path: Path, tiny_checkpoint  # noqa: ANN001
) -> None:
    built = rx.build_decoder(tmp_path / "out", checkpoint=tiny_checkpoint(name), graph=graph, dtype=dtype,
                             weight_format=weights, eager=False)  # fmt: skip
    assert built.passed
    result = package(built.path, tmp_path / "web" / name)
    assert result.passed, result.report
    model = result.path / "onnx" / FILES[dtype, weights]
    assert _batch_dims(model) == {"batch_size"}  # what transformers.js sizes its first cache from
    config = json.loads((result.path / "config.json").read_text())
    assert config["model_type"] == built.decoder_report.spec["model_type"]
    engines = {e["name"]: e for e in result.report["engines"]}
    assert engines["transformers.js"]["status"] == "ran"
    rows = engines["transformers.js"]["prompts"]
    assert [r["name"] for r in rows] == ["position-0", "long-prompt"]
    reference = json.loads((result.path / "reference.json").read_text())["prompts"]
    session = DecoderSession(built.path)  # the decoder served by ropeexport generate: its own loop, policy keep
    for row, want in zip(rows, reference, strict=True):
        assert row["tokens"] == row["expected"] == want["tokens"]
        assert row["worst_rel"] is not None and row["worst_rel"] <= result.report["bound"]
        served = session.generate(want["prompt"], len(want["tokens"]), policy="keep").tokens
        assert list(served) == want["tokens"]
    assert rows[1]["prompt_tokens"] > 200  # the long prompt (256, or what a 256-position context leaves)


@pytest.mark.slow
@needs_node
def test_external_data_is_named_and_loaded_as_transformersjs_does(tmp_path: Path) -> None:
    """A decoder past 64 MiB of weights (model.onnx.data): packaged as onnx/model.onnx_data, config.json naming it."""
    built = rx.build_decoder(tmp_path / "out", preset="llama-2-7b", num_layers=1, hidden_size=512, vocab_size=16384,
                             eager=False)  # fmt: skip
    assert built.passed and (built.path / "model.onnx.data").is_file()
    result = package(built.path, tmp_path / "pkg")
    assert result.passed, result.report
    assert (result.path / "onnx" / "model.onnx_data").is_file()
    locations = {e.value for t in onnx.load(str(result.path / "onnx" / "model.onnx"), load_external_data=False)
                 .graph.initializer for e in t.external_data if e.key == "location"}  # fmt: skip
    assert locations == {"model.onnx_data"}
    config = json.loads((result.path / "config.json").read_text())
    assert config["transformers.js_config"] == {"use_external_data_format": {"model.onnx": 1}}
    engine = next(e for e in result.report["engines"] if e["name"] == "transformers.js")
    assert engine["status"] == "ran" and all(r["first_difference"] is None for r in engine["prompts"])


@pytest.mark.slow
@needs_node
def test_without_the_batch_size_name_transformersjs_fails(
    tmp_path: Path, seeded_decoder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one rename is what makes the package load: left as ``batch``, transformers.js feeds a batch of 0."""
    monkeypatch.setattr("ropeexport.decoder.transformersjs.BATCH", "batch")
    result = package(seeded_decoder, tmp_path / "pkg")
    engine = next(e for e in result.report["engines"] if e["name"] == "transformers.js")
    assert not result.passed and engine["passed"] is False
    assert "transformers.js failed" in engine["reason"]


@pytest.mark.slow
def test_without_node_packages_the_engine_is_skipped_and_exit_is_3(
    tmp_path: Path, seeded_decoder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ROPEEXPORT_TRANSFORMERSJS_DIR", str(tmp_path / "nowhere"))
    code, out, _ = run(["package", str(seeded_decoder), "--for", "transformers.js", "--out", str(tmp_path / "p")],
                       capsys)  # fmt: skip
    assert code == 3, out
    assert "transformers.js: skipped:" in out
    assert (tmp_path / "p" / "onnx" / "model.onnx").is_file()


@pytest.mark.slow
def test_verify_checks_the_package_again(tmp_path: Path, seeded_decoder: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "p"
    package(seeded_decoder, out)
    code, printed, _ = run(["verify", str(out)], capsys)
    assert code in (0, 3), printed  # 3 where transformers.js cannot run here
    assert "onnxruntime: position-0" in printed
    config = out / "config.json"
    config.write_text(config.read_text().replace('"model_type"', '"model_type" ', 1))  # edited after packaging
    code, _, err = run(["verify", str(out)], capsys)
    assert code == 2 and err.startswith("ropeexport: error: files.config.json: sha256 differs"), err


def _edited(decoder: Path, tmp: Path) -> Path:
    copy = tmp / "edited" / decoder.name
    shutil.copytree(decoder, copy)
    (copy / "decoder.json").write_text((copy / "decoder.json").read_text() + " ")
    return copy


# (what is wrong, how to make it, the start of stderr)
BAD = [("not a decoder", lambda d, t: t, "DECODER: "),
       ("edited decoder", _edited, "files.decoder.json: sha256 differs"),
       ("out is not a package", None, "--out: ")]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("what", "make", "said"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_exit_2_nothing_written(
    what: str, make, said: str, tmp_path: Path, seeded_decoder: Path, capsys  # noqa: ANN001
) -> None:
    decoder = make(seeded_decoder, tmp_path) if make is not None else seeded_decoder
    out = tmp_path / "pkg"
    if make is None:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code, printed, err = run(["package", str(decoder), "--for", "transformers.js", "--out", str(out)], capsys)
    assert code == 2, printed
    assert err.startswith(f"ropeexport: error: {said}") and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.slow
@pytest.mark.parametrize(("name", "said"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_model_type_transformersjs_has_no_class_for_is_refused_by_name(
    name: str, said: str, tmp_path: Path, tiny_checkpoint, capsys  # noqa: ANN001
) -> None:
    built = rx.build_decoder(tmp_path / "out", checkpoint=tiny_checkpoint(name), eager=False)
    capsys.readouterr()  # what making the checkpoint printed
    code, _, err = run(["package", str(built.path), "--for", "transformers.js", "--out", str(tmp_path / "p")], capsys)
    assert code == 2
    assert err.startswith("ropeexport: error: DECODER: ") and said in err and err.count("\n") == 1, err
    assert not (tmp_path / "p").exists()


_ROWS = np.array([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0]])
# (tokens, logits, bound, first difference, passed): how one prompt is judged.
JUDGED = [([1, 0], _ROWS, 1e-4, None, True),
          ([1, 2], _ROWS, 1e-4, 1, False),
          ([1], _ROWS[:1], 1e-4, 1, False),
          ([1, 0], _ROWS + np.array([[0.0, 0.0, 1e-3], [0.0, 0.0, 0.0]]), 1e-4, None, False),
          ([1, 0], _ROWS + np.array([[0.0, 0.0, 1e-3], [0.0, 0.0, 0.0]]), 1e-3, None, True)]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("tokens", "logits", "limit", "differs", "passed"), JUDGED)
def test_a_prompt_is_judged_by_its_tokens_and_logits(
    tokens: list[int], logits: np.ndarray, limit: float, differs: int | None, passed: bool
) -> None:
    row = compare(Greedy("p", [5, 6], [1, 0], _ROWS), tokens, logits, limit)
    assert row["first_difference"] == differs
    assert row["passed"] is passed


@pytest.mark.slow
@needs_node
def test_the_how_to_snippet_generates_the_decoders_tokens(tmp_path: Path, seeded_decoder: Path) -> None:
    """docs/how-to/transformers-js.md's Node snippet, as written, on a package: the decoder's greedy tokens."""
    import re
    import subprocess

    from ropeexport.decoder.transformersjs_check import node_dir

    page = (Path(__file__).parents[2] / "docs" / "how-to" / "transformers-js.md").read_text()
    (snippet,) = re.findall(r"```js\n(.*?)```", page, flags=re.S)
    prompt = [int(t) for t in re.search(r"const ids = \[(.*?)\];", snippet)[1].replace("n", "").split(",")]
    count = int(re.search(r"max_new_tokens: (\d+)", snippet)[1])
    result = package(seeded_decoder, tmp_path / "pkg")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "node_modules").symlink_to(node_dir() / "node_modules")  # where its import resolves
    (tmp_path / "run" / "generate.mjs").write_text(snippet)
    done = subprocess.run(["node", "generate.mjs", str(result.path.resolve())], cwd=tmp_path / "run",
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    served = DecoderSession(seeded_decoder).generate(prompt, count, policy="keep").tokens
    assert [int(t) for t in done.stdout.split()] == list(served)


# The browser: onnxruntime-web's WASM backend in Debian's headless Chromium (tools/transformersjs_browser.py). WebGPU
# is not available on these machines: not run, not claimed.
BROWSER_CASES = [("llama", "fused", "fp32", ""), ("llama", "gqa", "fp32", ""), ("llama", "fused", "fp32", "int4"),
                 ("gemma3", "fused", "fp32", ""), ("gpt_oss", "fused", "fp32", "")]  # fmt: skip


@pytest.mark.slow
@needs_node  # the page imports transformers.js and onnxruntime-web from the same npm packages
@pytest.mark.parametrize(("name", "graph", "dtype", "weights"), BROWSER_CASES,
                         ids=["-".join(filter(None, c)) for c in BROWSER_CASES])  # fmt: skip
def test_headless_chromium_generates_the_decoders_tokens(
    name: str, graph: str, dtype: str, weights: str, tmp_path: Path, tiny_checkpoint  # noqa: ANN001
) -> None:
    from ropeexport.decoder.kind import check_folder
    from ropeexport.decoder.transformersjs import suffix
    from ropeexport.decoder.transformersjs_check import bound, ort_greedy
    from tests.toolmod import tool

    driver = tool("transformersjs_browser")
    why = driver.missing()
    if why is not None:
        pytest.skip(f"the browser cannot run here: {why}")
    built = rx.build_decoder(tmp_path / "out", checkpoint=tiny_checkpoint(name), graph=graph, dtype=dtype,
                             weight_format=weights, eager=False)  # fmt: skip
    result = package(built.path, tmp_path / "web" / name)
    spec = check_folder(built.path)[1]
    for ours in ort_greedy(result.path / "onnx" / FILES[dtype, weights], spec):  # both prompts
        page = driver.run(result.path, ours.prompt, len(ours.tokens), suffix(spec)[0])
        assert "error" not in page, page["error"]
        assert "HeadlessChrome" in page["agent"]
        row = compare(ours, page["tokens"], np.asarray(page["logits"], np.float64), bound(spec))
        assert row["first_difference"] is None, (ours.name, row)
        assert row["passed"], (ours.name, row["worst_rel"])


TUTORIAL = "docs/tutorials/ship-to-transformers-js.md"


@pytest.mark.slow
@needs_node
def test_the_tutorial_ships_a_decoder(tmp_path: Path) -> None:
    """The tutorial as a user follows it: its Python and shell blocks in one folder, then its Node script, whose tokens
    are the decoder's as ``ropeexport generate`` serves it.
    """  # noqa: D205
    import re

    from tests.docs.pages import blocks
    from tests.docs.test_blocks import _run

    found = blocks(TUTORIAL)
    for block in (b for b in found if b.info in ("python", "sh") and b.skip is None):
        _run(block, tmp_path)  # ropeexport package exits 3 without transformers.js: the block would fail
    (snippet,) = [b.text for b in found if b.info == "js"]
    prompt = [int(t) for t in re.search(r"const ids = \[(.*?)\];", snippet)[1].replace("n", "").split(",")]
    count = int(re.search(r"max_new_tokens: (\d+)", snippet)[1])
    (tmp_path / "node_modules").symlink_to(node_dir() / "node_modules")  # where the script's import resolves
    (tmp_path / "generate.mjs").write_text(snippet)
    done = subprocess.run(["node", "generate.mjs", str(tmp_path / "web" / "my-llama")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    served = DecoderSession(tmp_path / "decoders" / "my-llama-decoder-fp32-fused").generate(prompt, count,
                                                                                           policy="keep").tokens
    assert [int(t) for t in done.stdout.split()] == list(served)
