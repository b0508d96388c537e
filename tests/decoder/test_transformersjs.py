"""``ropeexport package DECODER --for transformers.js``: the package transformers.js loads, run in transformers.js.

transformers.js 4.3.1 runs in Node (tools/transformersjs, its npm packages pinned by the lockfile there). The tests that
need it install those packages themselves, once per checkout (``node_ready``: ``npm ci`` as the lockfile pins them), so
README's one test command runs them on a fresh clone; where node or the registry is absent they skip with the reason
and the rest still run. Every architecture ropeexport builds that transformers.js has a class for, in fp32 (and the
forms, fp16 and int4 on Llama, int4 in Gemma 4's two files and its mixture, int4 mixtures of experts in ONNX Runtime's
QMoE, DeepSeek V3's latent cache): greedy tokens from transformers.js's own ``generate`` equal the decoder's own, at
position 0 and after a long prompt, and the logits it hands its logits processors are within the bound of the logit
scale. Each decoder is built once for the
module (``built``), the Node and browser tests sharing it. glm4 and exaone4 run under the bare classes of glm and
exaone (what those classes read checked in its source, and the package shown failing without the mapping), gemma4_text
as Gemma 4's two files, the Qwen-VL text decoders under qwen2's and qwen3's with their position rows made in the
graph (bit-identical to the decoder fed three rows; the positions transformers.js feeds their own type measured). Every
reason a type is mapped or refused cites transformers.js's source, and those citations are checked against the
installed transformers.js; QMoE at an accuracy level is refused, and the pinned onnxruntime-node's refusal of that
attribute is measured.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

import ropeexport as rx
from ropeexport.api.packages import package
from ropeexport.architectures import ARCHITECTURES
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.kind import check_folder
from ropeexport.decoder.serve import DecoderSession
from ropeexport.decoder.transformersjs import (
    LOADED,
    MAPPED,
    ORT_NODE,
    START_ONE,
    VERSION,
    package_config,
    refusal,
    write_package,
)
from ropeexport.decoder.transformersjs import REFUSED as TJS_REFUSED
from ropeexport.decoder.transformersjs import TWO_FILES as TJS_TWO_FILES
from ropeexport.decoder.transformersjs_check import Greedy, compare, node_dir, node_greedy, node_missing
from ropeexport.decoder.weights import geometry
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

# (tiny checkpoint, form, dtype, variant): every architecture transformers.js loads, the forms, fp16 and int4. The
# variant is "" (fp32 or fp16 weights), "int4" (MatMulNBits: model_q4.onnx, model_q4f16.onnx in fp16), "int4-b16"
# (blocks of 16) or "latent" (latent attention's latent cache, in the decomposed form; DeepSeek V3's keys and values
# are otherwise two widths). One int4 row per distinct behaviour (llama's, and its tied head): the q4 file is loaded
# the same way whatever the architecture (every architecture's int4 was run by hand with tools/transformersjs_every.py,
# docs/how-to/transformers-js.md). The int4 mixtures of experts in ONNX Runtime's QMoE, one row per way it is fed
# (HELD): gpt-oss's clamped SwiGLU, biases and own routing; handed its routing weights (Qwen3-MoE's softmax over all
# experts, as DeepSeek V3's grouped router's are) in q4f16. A MatMulNBits per expert runs ops the int4 llama rows and
# the fp32 mixture rows run already: those forms, and deepseek_v3 and llama4_text in int4, were run by hand (the
# how-to).
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
         ("ministral3", "fused", "fp32", ""),
         ("llama4", "fused", "fp32", ""), ("deepseek_v3", "fused", "fp32", ""),
         ("deepseek_v3", "decomposed", "fp32", "latent"), ("gpt_oss", "gqa", "fp32", "int4-b16"),
         ("qwen3_moe-qmoe", "gqa", "fp16", "int4"), ("glm4", "fused", "fp32", ""),
         ("glm4", "fused", "fp32", "int4"), ("exaone4", "fused", "fp32", ""), ("gemma4", "fused", "fp32", ""),
         ("gemma4-ple", "fused", "fp32", ""), ("gemma4-ple", "fused", "fp32", "int4"),
         ("gemma4-moe", "fused", "fp32", "int4"), ("glm4_moe_lite", "fused", "fp32", "int4"),
         ("mistral4", "fused", "fp32", "int4"), ("deepseek_v2", "fused", "fp32", "int4")]  # fmt: skip
# The int4 rows of gemma4-ple and gemma4-moe: int4 in the two files (the tied head's GatherBlockQuantized in the embed
# model, the per-layer input table beside it, caches on two layers of four) and Gemma 4's mixture (a MatMulNBits per
# expert). Every other architecture's int4 was run by hand (tools/transformersjs_every.py, the how-to's table): their
# q4 file loads as llama's does, over ops the int4 rows here and the fp32 rows run already.
# The Qwen-VL text decoders, packaged as qwen2 / qwen3 with their position rows made in the graph (transformersjs_rows):
# one fp32 row per distinct graph (Qwen2.5-VL's chunked M-RoPE and q/k/v biases, as qwen2_vl's; Qwen3-VL's interleaved
# M-RoPE and q/k norms) and one int4 row (qwen2_vl, and qwen2_5_vl in int4, were run by hand: the how-to).
QWEN_VL = [("qwen2_5_vl", "fused", "fp32", ""), ("qwen3_vl", "fused", "fp32", ""),
           ("qwen3_vl", "fused", "fp32", "int4")]  # fmt: skip
CASES += QWEN_VL
# The types transformers.js has no class for, packaged as the type whose plain class runs them (transformersjs.MAPPED),
# or as the two files of the class that runs them (TWO_FILES: Gemma 4's embed_tokens, then decoder_model_merged fed
# inputs_embeds, and per_layer_inputs where the model has per-layer input embeddings): what config.json must say.
# The others say their own.
LOADED_AS = {"glm4": "glm", "exaone4": "exaone", "gemma3_text": "gemma2", "gemma4_text": "gemma4",
             "glm4_moe_lite": "deepseek_v3", "deepseek_v2": "deepseek_v3",
             "qwen2_vl_text": "qwen2", "qwen2_5_vl_text": "qwen2", "qwen3_vl_text": "qwen3"}  # fmt: skip
# two-file type -> (the embed model, the decoder): the embed model's outputs are the decoder's new inputs
TWO_FILES = {"gemma4_text": ("onnx/embed_tokens.onnx", "onnx/decoder_model_merged.onnx")}
LOOKUP = "GatherBlockQuantized"  # com.microsoft: an embedding gathered from int4 bytes
# How the int4 mixture rows' experts are held (components.qmoe): checked in the graph, so a row stays the case it names
HELD = {("gpt_oss", "gqa", "fp32", "int4-b16"): "QMoE",
        ("qwen3_moe-qmoe", "gqa", "fp16", "int4"): "QMoE router_weights",
        ("gemma4-moe", "fused", "fp32", "int4"): "a MatMulNBits per expert"}  # fmt: skip
FILES = {("fp32", ""): "model.onnx", ("fp16", ""): "model_fp16.onnx", ("fp32", "int4"): "model_q4.onnx",
         ("fp32", "int4-b16"): "model_q4.onnx", ("fp16", "int4"): "model_q4f16.onnx",
         ("fp32", "latent"): "model.onnx"}  # fmt: skip
VARIANTS: dict[str, dict[str, object]] = {"": {}, "int4": {"weight_format": "int4"},
                                          "int4-b16": {"weight_format": "int4", "block_size": 16},
                                          "int4-level4": {"weight_format": "int4", "accuracy_level": 4},
                                          "latent": {"latent_cache": True}}  # fmt: skip



@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint) -> Callable[..., Path]:  # noqa: ANN001
    """``built(name, graph, dtype, variant)``: the verified decoder of a tiny checkpoint, built once for the module
    (the Node and the browser tests share it); read-only.
    """  # noqa: D205
    root = tmp_path_factory.mktemp("decoders")
    made: dict[tuple[str, str, str, str], Path] = {}

    def get(name: str, graph: str, dtype: str, variant: str) -> Path:
        key = (name, graph, dtype, variant)
        if key not in made:
            result = rx.build_decoder(root / "-".join(filter(None, key)), checkpoint=tiny_checkpoint(name),
                                      graph=graph, dtype=dtype, eager=False, **VARIANTS[variant])  # fmt: skip
            assert result.passed, result.report
            made[key] = result.path
        return made[key]

    return get


def _two_files(ours: str, dtype: str, variant: str) -> tuple[str, str]:
    """The embed model's and the decoder's paths in a two-file package of that dtype (``_q4`` for int4 ...)."""
    tail = FILES[dtype, variant].removeprefix("model")
    embed, decoder = TWO_FILES[ours]
    return embed.removesuffix(".onnx") + tail, decoder.removesuffix(".onnx") + tail


def _batch_dims(model: Path) -> set[str]:
    """The symbolic names of every input's and output's first dimension."""
    graph = onnx.load(str(model), load_external_data=False).graph
    return {v.type.tensor_type.shape.dim[0].dim_param for v in (*graph.input, *graph.output)}


@pytest.mark.slow
@needs_node
@pytest.mark.parametrize(("name", "graph", "dtype", "variant"), CASES, ids=["-".join(filter(None, c)) for c in CASES])
def test_transformersjs_generates_the_decoders_tokens(
    name: str, graph: str, dtype: str, variant: str, tmp_path: Path, built: Callable[..., Path]
) -> None:
    decoder = built(name, graph, dtype, variant)
    result = package(decoder, tmp_path / "web" / name)
    assert result.passed, result.report
    ours = check_folder(decoder)[1].model_type
    model = result.path / (_two_files(ours, dtype, variant)[1] if ours in TWO_FILES else
                           f"onnx/{FILES[dtype, variant]}")  # fmt: skip
    assert _batch_dims(model) == {"batch_size"}  # what transformers.js sizes its first cache from
    if ours in TWO_FILES:  # the embed model is the token lookups alone; the decoder is fed what it gives
        embed = onnx.load(str(result.path / _two_files(ours, dtype, variant)[0])).graph
        ops = {n.op_type for n in embed.node}
        assert [v.name for v in embed.input] == ["input_ids"] and ops - {"Reshape"} <= {"Gather", "Mul", LOOKUP}, ops
        # int4: Gemma's tied head is int4, the embedding gathered from its bytes in the embed model; a float table
        # (the embedding in fp32, the per-layer input table in any form) by Gather
        assert (LOOKUP in ops) == variant.startswith("int4"), ops
        assert ("Gather" in ops) == (not variant or name == "gemma4-ple"), ops
        given = [v.name for v in embed.output]
        assert given[0] == "inputs_embeds" and set(given) <= {"inputs_embeds", "per_layer_inputs"}, given
        taken = [v.name for v in onnx.load(str(model), load_external_data=False).graph.input]
        assert "input_ids" not in taken and set(given) <= set(taken), taken
        assert ("per_layer_inputs" in given) == (name == "gemma4-ple"), given
    held = HELD.get((name, graph, dtype, variant))
    if held is not None:
        qmoe = [n for n in onnx.load(str(model), load_external_data=False).graph.node if n.op_type == "QMoE"]
        assert bool(qmoe) == held.startswith("QMoE"), held
        # router_weights: QMoE's input 14, the weights it mixes the chosen experts by (components.qmoe)
        assert all((len(n.input) > 14 and n.input[14] != "") == held.endswith("router_weights") for n in qmoe), held
    config = json.loads((result.path / "config.json").read_text())
    assert config["model_type"] == LOADED_AS.get(ours, ours)
    if ours in TWO_FILES:  # the wrapper's architecture makes transformers.js load the two files, text only
        assert config["architectures"] == ["Gemma4ForConditionalGeneration"]
        assert config["text_config"]["model_type"] == ours
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert manifest["model_type"]["decoder"] == manifest["decoder"]["spec"]["model_type"] == ours  # its own, kept
    assert (manifest["model_type"]["why"] is None) == (ours not in LOADED_AS)
    # a Qwen-VL package takes the one row [b, s] the plain class feeds, and says what it cannot take
    rows_fed = (name, graph, dtype, variant) in QWEN_VL
    assert (manifest["model_type"]["text_only"] is not None) == rows_fed
    if rows_fed:
        taken = next(v for v in onnx.load(str(model), load_external_data=False).graph.input if v.name == "position_ids")
        assert [d.dim_param or d.dim_value for d in taken.type.tensor_type.shape.dim] == ["batch_size", "seq"]
    assert result.report["model_type"] == manifest["model_type"]  # what the command's line reads
    engines = {e["name"]: e for e in result.report["engines"]}
    assert engines["transformers.js"]["status"] == "ran"
    rows = engines["transformers.js"]["prompts"]
    assert [r["name"] for r in rows] == ["position-0", "long-prompt"]
    reference = json.loads((result.path / "reference.json").read_text())["prompts"]
    session = DecoderSession(decoder)  # the decoder served by ropeexport generate: its own loop, policy keep
    for row, want in zip(rows, reference, strict=True):
        assert row["tokens"] == row["expected"] == want["tokens"]
        assert row["worst_rel"] is not None and row["worst_rel"] <= result.report["bound"]
        served = session.generate(want["prompt"], len(want["tokens"]), policy="keep").tokens
        assert list(served) == want["tokens"]
    top = check_folder(decoder)[1].position_spec().max_positions  # the long prompt: 256, or what the context leaves
    assert rows[1]["prompt_tokens"] == min(256, top - 18) > 100, (rows[1]["prompt_tokens"], top)


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


def _nothing_but(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.slow
def test_qmoe_at_an_accuracy_level_is_refused_with_the_forms_that_load(
    tmp_path: Path, built: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """An int4 mixture whose QMoE experts carry an accuracy level (onnxruntime-node's QMoE has no such attribute:
    ``test_onnxruntime_node_refuses_qmoe_with_an_accuracy_level``): refused by name, the two forms that load named.
    """  # noqa: D205
    decoder = built("qwen3_moe-qmoe", "gqa", "fp32", "int4-level4")
    capsys.readouterr()  # what making the checkpoint printed
    before = _nothing_but(tmp_path)
    code, _, err = run(["package", str(decoder), "--for", "transformers.js", "--out", str(tmp_path / "p")], capsys)
    assert code == 2 and err.startswith("ropeexport: error: DECODER: ") and err.count("\n") == 1, err
    for said in ("QMoE", "accuracy level 4", f"onnxruntime-node {ORT_NODE}", "--accuracy-level 0", "--graph fused"):
        assert said in err, (said, err)
    assert _nothing_but(tmp_path) == before


# onnxruntime-node, asked to open the model at argv[1]: {"version": its version, "said": "loaded" or its error}
_OPEN = ("import * as ort from 'onnxruntime-node'; let said = 'loaded'; try { await ort.InferenceSession.create("
         "process.argv[1]); } catch (error) { said = String(error?.message ?? error); } "
         "console.log(JSON.stringify({ version: ort.env.versions.node, said }));")  # fmt: skip


@pytest.mark.slow
@needs_node
def test_onnxruntime_node_refuses_qmoe_with_an_accuracy_level(tmp_path: Path, built: Callable[..., Path]) -> None:
    """The refusal's reason, measured on the pinned onnxruntime-node: the decoder's model fails to load for QMoE's
    accuracy_level alone, and loads without it. When this fails, onnxruntime-node takes the attribute: lift
    ``qmoe_refusal``.
    """  # noqa: D205
    model = onnx.load(str(built("qwen3_moe-qmoe", "gqa", "fp32", "int4-level4") / "model.onnx"))
    qmoe = [n for n in model.graph.node if n.op_type == "QMoE"]
    assert qmoe and all(any(a.name == "accuracy_level" for a in n.attribute) for n in qmoe)
    onnx.save(model, str(tmp_path / "with.onnx"))
    for node in qmoe:
        kept = [a for a in node.attribute if a.name != "accuracy_level"]
        del node.attribute[:]
        node.attribute.extend(kept)
    onnx.save(model, str(tmp_path / "without.onnx"))
    said = {}
    for name in ("with", "without"):
        done = subprocess.run(["node", "--input-type=module", "-e", _OPEN, str(tmp_path / f"{name}.onnx")],
                              cwd=node_dir(), capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        said[name] = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["with"]["version"] == ORT_NODE
    assert "Unrecognized attribute: accuracy_level for operator QMoE" in said["with"]["said"], said
    assert said["without"]["said"] == "loaded", said


_SMALL_MOE = {"vocab_size": 96, "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 256}  # fmt: skip
_GPT_OSS = {"model_type": "gpt_oss", **_SMALL_MOE, "head_dim": 8, "intermediate_size": 48, "num_local_experts": 4,
            "num_experts_per_tok": 2, "sliding_window": 6,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}  # fmt: skip
_DEEPSEEK = {"model_type": "deepseek_v3", **_SMALL_MOE, "num_key_value_heads": 4, "intermediate_size": 48,
             "moe_intermediate_size": 16, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2,
             "topk_group": 1, "first_k_dense_replace": 1, "q_lora_rank": 16, "kv_lora_rank": 16,
             "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8, "head_dim": 8}  # fmt: skip
_LLAMA4 = {"model_type": "llama4_text", **_SMALL_MOE, "head_dim": 16, "intermediate_size": 32,
           "intermediate_size_mlp": 48, "num_local_experts": 4, "num_experts_per_tok": 1}  # fmt: skip
# (what, config, form, block size, accuracy level, refused): only QMoE at an accuracy level is refused
QMOE_LEVELS = [("gpt_oss QMoE at level 4", _GPT_OSS, "gqa", 16, 4, True),
               ("gpt_oss QMoE at level 1", _GPT_OSS, "gqa", 16, 1, True),
               ("gpt_oss QMoE at level 0", _GPT_OSS, "gqa", 16, 0, False),
               ("gpt_oss per expert at level 4: fused", _GPT_OSS, "fused", 16, 4, False),
               ("gpt_oss per expert at level 4: 32 does not divide 48", _GPT_OSS, "gqa", 32, 4, False),
               ("deepseek_v3 QMoE at level 4", _DEEPSEEK, "gqa", 16, 4, True),
               ("deepseek_v3 per expert at level 4: decomposed", _DEEPSEEK, "decomposed", 16, 4, False),
               ("llama4_text at level 4: per expert in every form", _LLAMA4, "gqa", 16, 4, False)]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("what", "config", "graph", "block", "level", "refused"), QMOE_LEVELS,
                         ids=[q[0] for q in QMOE_LEVELS])  # fmt: skip
def test_only_qmoe_at_an_accuracy_level_is_refused(
    what: str, config: dict[str, object], graph: str, block: int, level: int, refused: bool
) -> None:
    spec, _ = resolve(DecoderRequest(config=config, graph=graph, weight_format="int4", block_size=block,
                                     accuracy_level=level))  # fmt: skip
    why = refusal(spec)
    assert (why is not None) == refused, why
    if refused:
        assert f"accuracy level {level}" in why and "--graph fused" in why, why


@pytest.mark.fast
def test_the_onnxruntime_node_the_refusal_measured_is_the_one_pinned() -> None:
    """``ORT_NODE`` (what ``qmoe_refusal`` says and measured) is the onnxruntime-node the lockfile installs."""
    lock = json.loads((node_dir() / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/onnxruntime-node"]["version"] == ORT_NODE


@pytest.mark.fast
@pytest.mark.parametrize("model_type", list(ARCHITECTURES))
def test_every_architecture_is_packaged_or_refused_with_transformersjs_source_cited(model_type: str) -> None:
    """A new architecture is a decision: packaged as itself (LOADED), packaged as the type whose class runs it
    (MAPPED), or refused; the last two with the line of transformers.js that says why.
    """  # noqa: D205
    groups = (LOADED, MAPPED, TJS_TWO_FILES, TJS_REFUSED)
    assert [model_type in group for group in groups].count(True) == 1, model_type
    why = (MAPPED[model_type][1] if model_type in MAPPED else TJS_TWO_FILES[model_type][2]
           if model_type in TJS_TWO_FILES else TJS_REFUSED.get(model_type))  # fmt: skip
    if why is not None:
        assert re.search(r"src/models/[\w/]+\.js:\d+", why), why


def _causal_lm_map(registry: str) -> dict[str, str]:
    """transformers.js's MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, read from its registry.js: {model_type: class}."""
    body = registry.split("export const MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = new Map([", 1)[1].split("]);", 1)[0]
    return dict(re.findall(r"\['([\w-]+)', '(\w+)'\]", body))


@pytest.mark.slow
@needs_node
def test_what_is_packaged_and_refused_agrees_with_transformersjs_source() -> None:
    """Read from the installed transformers.js: every type packaged has a causal-LM class; every type refused for
    having none has none; every ``file:line`` a refusal cites exists, and each ``'type' (Class, line N)`` it names is
    on that line of registry.js.
    """  # noqa: D205
    source = node_dir() / "node_modules" / "@huggingface" / "transformers"
    assert json.loads((source / "package.json").read_text())["version"] == VERSION
    registry = (source / "src" / "models" / "registry.js").read_text()
    classes = _causal_lm_map(registry)
    assert len(classes) > 50, "the causal-LM map was not found in registry.js"
    assert [t for t in LOADED if t not in classes] == []
    assert [t for t, why in TJS_REFUSED.items() if "no causal-LM class" in why and t in classes] == []
    # a mapped type has no class, or one that feeds it positions from 1 (START_ONE's line lists it, not its mapping)
    path, line = START_ONE.split(":")
    start_one = (source / path).read_text().splitlines()[int(line) - 1]
    assert re.search(r"start_index = \[.*\]\.includes\(self\.config\.model_type\) \? 1 : 0;", start_one), start_one
    shifted = set(re.findall(r"'(\w+)'", start_one.split("]")[0]))
    kept = {t: (t in classes) == (t in shifted) and m in classes and m not in shifted for t, (m, _) in MAPPED.items()}
    assert kept == dict.fromkeys(MAPPED, True), shifted
    assert [t for t, (m, _, _) in TJS_TWO_FILES.items() if t in classes or m not in classes] == []
    lines = registry.splitlines()
    for why in [*TJS_REFUSED.values(), *(why for _, why in MAPPED.values()), *(w for *_, w in TJS_TWO_FILES.values())]:
        for path, first, last in re.findall(r"(src/[\w/]+\.js):(\d+)(?:-(\d+))?", why):
            assert len((source / path).read_text().splitlines()) >= int(last or first), (path, first, last)
        for model_type, cls, line in re.findall(r"'(\w+)' \((\w+), line (\d+)\)", why):
            assert f"['{model_type}', '{cls}']" in lines[int(line) - 1], (model_type, cls, line)


def _normalized_keys(configs: list[str], model_type: str) -> tuple[int, dict[str, str]]:
    """transformers.js's normalized config of ``model_type``, read from its configs.js: (the 1-based line of its
    ``case``, {what it normalizes: the config.json key it reads}).
    """  # noqa: D205
    first = configs.index(f"        case '{model_type}':")
    found: dict[str, str] = {}
    for line in configs[first:]:
        if line.strip() == "break;":
            break
        found |= dict(re.findall(r"mapping\['(\w+)'\] = '(\w+)';", line))
    return first + 1, found


@pytest.mark.slow
@needs_node
@pytest.mark.parametrize("ours", sorted(MAPPED))
def test_a_mapped_type_runs_under_a_plain_class_that_reads_what_the_package_writes(ours: str) -> None:
    """Read from the installed transformers.js, for each type packaged as another (MAPPED): the class it is packaged
    under is a bare class (no forward or input preparation of its own: the plain decoder's), at the line cited; and
    every config key that type's normalized config reads (configs.js, the lines cited) is in the package's
    config.json with the decoder's value (exaone's ``num_layers``, which EXAONE 4's config lacks, included).
    """  # noqa: D205
    from tests.decoder.tiny import CONFIGS, LATENT_TEXT, VL_CONFIGS

    theirs, why = MAPPED[ours]
    source = node_dir() / "node_modules" / "@huggingface" / "transformers"
    cls = _causal_lm_map((source / "src" / "models" / "registry.js").read_text())[theirs]
    # the class's own file (a Qwen-VL type's reason also cites its wrapper's modeling_qwen2_vl.js)
    ((path, line),) = re.findall(rf"(src/models/{theirs}/modeling_{theirs}\.js):(\d+)", why)
    modeling = (source / path).read_text()
    assert re.fullmatch(rf"export class {cls} extends \w+ \{{\}}", modeling.splitlines()[int(line) - 1]), line
    bare = re.findall(r"^export class \w+ extends \w+ \{\}$", modeling, flags=re.M)
    assert bare == re.findall(r"^export class .*$", modeling, flags=re.M)  # every class of the file
    configs = (source / "src" / "configs.js").read_text().splitlines()
    case, keys = _normalized_keys(configs, theirs)
    ((first, last),) = re.findall(r"src/configs\.js:(\d+)-(\d+)", why)
    assert int(first) <= case < int(last) and "num_layers" in keys, (case, keys)
    configs = {**CONFIGS, **VL_CONFIGS, **LATENT_TEXT}  # a Qwen-VL text model's apart (tiny.VL_CONFIGS), ...
    name = next(n for n, (t, _) in configs.items() if t == ours)  # the tiny checkpoint's config
    config = {"model_type": ours, **configs[name][1]}
    spec, _ = resolve(DecoderRequest(config=config))
    written = package_config(spec, config, external=False)
    H, KV, d = geometry(spec, 0)
    want = {"num_heads": KV, "num_layers": spec.num_layers, "dim_kv": d, "num_attention_heads": H,
            "hidden_size": spec.hidden_size}  # fmt: skip
    assert written["model_type"] == theirs
    assert {k: written.get(key) for k, key in keys.items()} == {k: want[k] for k in keys}


# (tiny checkpoint, what is changed in the package's config.json, what transformers.js says): without the mapped type,
# or without the num_layers exaone's config reads (transformers.js then feeds no cache), the package does not load.
UNMAPPED = [("exaone4", {"model_type": "exaone4"}, "Unsupported model type: exaone4"),
            ("exaone4", {"num_layers": None}, "Missing the following inputs: past_key_values.0.key")]  # fmt: skip


@pytest.mark.slow
@needs_node
@pytest.mark.parametrize(("name", "change", "said"), UNMAPPED, ids=["own-type", "no-num_layers"])
def test_without_what_the_mapping_writes_transformersjs_fails(
    name: str, change: dict[str, object], said: str, tmp_path: Path, built: Callable[..., Path]
) -> None:
    decoder = built(name, "fused", "fp32", "")  # the generating row's decoder
    record, spec = check_folder(decoder)
    write_package(decoder, spec, record, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config = {k: v for k, v in (config | change).items() if v is not None}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(RuntimeError, match="transformers.js failed") as failed:
        node_greedy(tmp_path, spec, [1, 15, 29], 2)
    assert said in str(failed.value), failed.value


# transformers.js's generate on the package at argv[1]: a prompt of argv[2] tokens, argv[3] new ones; every position_ids
# it feeds the model recorded by wrapping onnxruntime-node's run (the same module instance transformers.js calls).
# Prints {"fed": [[first, last, count] per call], "said": "ok" or the error}.
_FED = ("import * as ort from 'onnxruntime-node'; import { AutoModelForCausalLM, Tensor, env } from "
        "'@huggingface/transformers'; const fed = []; const run = ort.InferenceSession.prototype.run; "
        "ort.InferenceSession.prototype.run = function (feeds, ...rest) { if (feeds.position_ids) "
        "fed.push(Array.from(feeds.position_ids.data, Number)); return run.call(this, feeds, ...rest); }; "
        "env.allowRemoteModels = false; env.localModelPath = ''; const n = Number(process.argv[2]); "
        "const model = await AutoModelForCausalLM.from_pretrained(process.argv[1], { dtype: 'fp32', device: 'cpu', "
        "local_files_only: true }); let said = 'ok'; try { await model.generate({ input_ids: new Tensor('int64', "
        "BigInt64Array.from({ length: n }, (_, i) => BigInt(1 + (i % 90))), [1, n]), attention_mask: new "
        "Tensor('int64', new BigInt64Array(n).fill(1n), [1, n]), max_new_tokens: Number(process.argv[3]), "
        "do_sample: false, eos_token_id: null }); } catch (error) { said = String(error?.message ?? error); } "
        "console.log(JSON.stringify({ fed: fed.map((p) => [p[0], p.at(-1), p.length]), said }));")  # fmt: skip
# Issue 42: (what, config.json's model_type or None as packaged, prompt tokens before the end of the context (0: it
# fills the context), new tokens, the first position fed, the error or None). The tiny gemma3 decoder's context is
# max_positions 512. As packaged (gemma2's class) positions count from 0, as transformers' Gemma3ForCausalLM and the
# decoder count, to the last position; under its own type transformers.js counts from 1 (START_ONE) and a prompt that
# fills the context is fed position 512, which the decoder refuses. When the second row fails, transformers.js no
# longer shifts gemma3_text: the mapping can go.
FED = [("packaged as gemma2: from 0 to the last position", None, 0, 1, 0, None),
       ("packaged as gemma2: a decode step at the last position", None, 1, 2, 0, None),
       ("as gemma3_text: from 1", "gemma3_text", 500, 2, 1, None),
       ("as gemma3_text: the full context is fed max_positions", "gemma3_text", 0, 1, 1,
        "position_ids must lie in [0, 511]")]  # fmt: skip


@pytest.mark.slow
@needs_node
@pytest.mark.parametrize(("what", "model_type", "short", "count", "first", "error"), FED, ids=[f[0] for f in FED])
def test_transformersjs_feeds_gemma3_positions_from_0_as_packaged(
    what: str, model_type: str | None, short: int, count: int, first: int, error: str | None, tmp_path: Path,
    built: Callable[..., Path],
) -> None:
    decoder = built("gemma3", "fused", "fp32", "")  # the generating row's decoder
    record, spec = check_folder(decoder)
    top = int(spec.position_spec().max_positions)
    write_package(decoder, spec, record, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "gemma2"
    if model_type is not None:
        (tmp_path / "config.json").write_text(json.dumps(config | {"model_type": model_type}))
    prompt = top - short
    done = subprocess.run(["node", "--input-type=module", "-e", _FED, str(tmp_path.resolve()), str(prompt), str(count)],
                          cwd=node_dir(), capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    # the prefill, then one call per new token but the last: each a run of consecutive positions from ``first``
    calls = [[first, first + prompt - 1, prompt]] + [[first + prompt + i] * 2 + [1] for i in range(count - 1)]
    assert said["fed"] == calls, said
    assert (said["said"] == "ok") == (error is None) and (error is None or error in said["said"]), said


@pytest.mark.slow
@pytest.mark.parametrize(("name", "graph", "dtype", "variant"), QWEN_VL,
                         ids=["-".join(filter(None, c)) for c in QWEN_VL])  # fmt: skip
def test_a_qwen_vl_package_fed_one_row_computes_what_the_decoder_fed_three_does(
    name: str, graph: str, dtype: str, variant: str, tmp_path: Path, built: Callable[..., Path]
) -> None:
    """The package's model (one Expand in front: ``transformersjs_rows``) fed position_ids [b, s] against the
    decoder's fed the three equal rows [3, b, s], call by call through the check's two prompts (prefill, then each
    decode step with the cache each returned): every output, logits and cache, bit-identical.
    """  # noqa: D205
    from ropeexport.decoder.greedy import run_scenario
    from ropeexport.decoder.scenarios import Scenario
    from ropeexport.decoder.transformersjs import model_file
    from ropeexport.decoder.transformersjs_check import STEPS, prompts
    from ropeexport.runtimes.ort import CPU, OrtRunner

    decoder = built(name, graph, dtype, variant)
    record, spec = check_folder(decoder)
    write_package(decoder, spec, record, tmp_path)
    theirs, ours = OrtRunner(decoder / "model.onnx", providers=[CPU]), OrtRunner(tmp_path / model_file(spec), [CPU])
    calls = 0

    def both(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        nonlocal calls
        axes = feeds["position_ids"]  # [3, b, s]: a text-only prompt's, every row the same
        assert axes.shape[0] == 3 and (axes == axes[:1]).all()
        want, got = theirs.infer(feeds), ours.infer(feeds | {"position_ids": axes[0]})
        assert want.keys() == got.keys()
        assert [k for k in want if not np.array_equal(want[k], got[k])] == []
        calls += 1
        return want

    for what, length in prompts(spec):
        run_scenario(both, spec, Scenario(what, (length,), STEPS, policy="keep"))
    assert calls == 2 * (1 + STEPS)


# Issue 42: (what, how the folder is written, the prompt's three rows fed or one, the first decode position over the
# prompt length n). As packaged (qwen2's plain class) transformers.js feeds one row from 0 and the first decode step at
# n, as transformers places a text-only prompt's; as transformers.js runs the Qwen-VL type itself (two files, split as
# tools/transformersjs_qwen_vl.py does) it feeds three rows and the first decode step at 3n (its rope delta max + 1 + n,
# src/models/qwen2_vl/modeling_qwen2_vl.js:44). When the second row fails, transformers.js places text-only Qwen-VL
# decode steps where transformers does: its own Qwen-VL class may then run these decoders (issue 42).
QWEN_FED = [("packaged as qwen2: one row, decode at n", "package", 1, 1),
            ("as qwen2_5_vl, two files: three rows, decode at 3n", "wrapper", 3, 3)]  # fmt: skip


@pytest.mark.slow
@needs_node
@pytest.mark.parametrize(("what", "written", "rows", "decode"), QWEN_FED, ids=[f[0] for f in QWEN_FED])
def test_transformersjs_places_qwen_vl_decode_steps_where_transformers_does_only_as_packaged(
    what: str, written: str, rows: int, decode: int, tmp_path: Path, built: Callable[..., Path],
    tiny_checkpoint: Callable[..., Path],
) -> None:
    decoder = built("qwen2_5_vl", "fused", "fp32", "")  # the generating row's decoder
    if written == "package":
        record, spec = check_folder(decoder)
        write_package(decoder, spec, record, tmp_path)
    else:
        from tests.toolmod import tool

        tool("transformersjs_qwen_vl").split(decoder, tiny_checkpoint("qwen2_5_vl"), tmp_path)
    prompt, count = 5, 3
    done = subprocess.run(["node", "--input-type=module", "-e", _FED, str(tmp_path.resolve()), str(prompt), str(count)],
                          cwd=node_dir(), capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    # [first, last, count] of each call's position_ids, flattened: the prefill, then one call per new token but the last
    calls = [[0, prompt - 1, rows * prompt]] + [[decode * prompt + i] * 2 + [rows] for i in range(count - 1)]
    assert said == {"fed": calls, "said": "ok"}, said


# (decoder's type, config.json's, why, the line ``package`` prints about it or None)
TYPE_LINES = [("llama", "llama", None, None),
              ("glm4", "glm", "bare class", "config.json says model_type 'glm', the decoder is 'glm4'")]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("ours", "config", "why", "line"), TYPE_LINES, ids=[t[0] for t in TYPE_LINES])
def test_the_command_says_when_config_json_names_another_type(
    ours: str, config: str, why: str | None, line: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    from ropeexport.api.packages import PackageResult
    from ropeexport.cli.package import print_result

    report = {"engine": "transformers.js", "decoder": {"name": "d"}, "model": "onnx/model.onnx", "bound": 2e-4,
              "model_type": {"decoder": ours, "config": config, "why": why}, "engines": []}  # fmt: skip
    assert print_result(PackageResult(Path("p"), True, report)) == 0
    printed = capsys.readouterr().out
    assert ("model_type" in printed) == (line is not None), printed
    assert line is None or line in printed, printed


_TEXT = {"vocab_size": 96, "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 48,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}  # fmt: skip
_CHUNKED = {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3]}
# (model_type, rope_parameters, config.json's type, whether the package is text only): a multi-axis (Qwen-VL) decoder's
# package says, in the command's output and its report's model_type, that image positions cannot be fed
TEXT_ONLY_ROWS = [("qwen2_vl_text", _CHUNKED, "qwen2", True), ("qwen2_5_vl_text", _CHUNKED, "qwen2", True),
                  ("qwen3_vl_text", {**_CHUNKED, "mrope_section": [3, 3, 2], "mrope_interleaved": True}, "qwen3", True),
                  ("qwen3", {"rope_type": "default", "rope_theta": 1e4}, "qwen3", False)]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("ours", "rope", "config", "text"), TEXT_ONLY_ROWS, ids=[t[0] for t in TEXT_ONLY_ROWS])
def test_a_qwen_vl_package_says_it_is_text_only(
    ours: str, rope: dict[str, object], config: str, text: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    from ropeexport.api.packages import PackageResult, _model_type
    from ropeexport.cli.package import print_result

    spec, _ = resolve(DecoderRequest(config={"model_type": ours, **_TEXT, "rope_parameters": rope}))
    types = _model_type(spec)  # what the manifest and the report record
    assert types["config"] == config and (types["text_only"] is not None) == text, types
    report = {"engine": "transformers.js", "decoder": {"name": "d"}, "model": "onnx/model.onnx", "bound": 2e-4,
              "model_type": types, "engines": []}  # fmt: skip
    assert print_result(PackageResult(Path("p"), True, report)) == 0
    printed = capsys.readouterr().out
    assert ("text only: position_ids [b, s]" in printed) == text, printed
    assert ("src/models/qwen2_vl/modeling_qwen2_vl.js:44" in printed) == text, printed  # why not its own Qwen-VL type


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
# gpt_oss's row is its int4 QMoE one (onnxruntime-web's WASM build has QMoE's CPU kernel); its fp32 fused row and
# the other mixtures in fp32 were run by hand (docs/status/verified.md).
BROWSER_CASES = [("llama", "fused", "fp32", ""), ("llama", "gqa", "fp32", ""), ("llama", "fused", "fp32", "int4"),
                 ("gemma3", "fused", "fp32", ""), ("gpt_oss", "gqa", "fp32", "int4-b16")]  # fmt: skip


@pytest.mark.slow
@needs_node  # the page imports transformers.js and onnxruntime-web from the same npm packages
@pytest.mark.parametrize(("name", "graph", "dtype", "variant"), BROWSER_CASES,
                         ids=["-".join(filter(None, c)) for c in BROWSER_CASES])  # fmt: skip
def test_headless_chromium_generates_the_decoders_tokens(
    name: str, graph: str, dtype: str, variant: str, tmp_path: Path, built: Callable[..., Path]
) -> None:
    from ropeexport.decoder.transformersjs import suffix
    from ropeexport.decoder.transformersjs_check import bound, ort_greedy
    from tests.toolmod import tool

    driver = tool("transformersjs_browser")
    why = driver.missing()
    if why is not None:
        pytest.skip(f"the browser cannot run here: {why}")
    decoder = built(name, graph, dtype, variant)
    result = package(decoder, tmp_path / "web" / name)
    spec = check_folder(decoder)[1]
    for ours in ort_greedy(result.path / "onnx" / FILES[dtype, variant], spec):  # both prompts
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
