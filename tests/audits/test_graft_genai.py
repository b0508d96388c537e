"""A grafted onnxruntime-genai model is loadable by onnxruntime-genai as written: graft of a builder model (its
genai_config.json beside it) with ``--out FOLDER`` writes the whole folder, and ``og.Model(FOLDER)`` generates.

Per case (tiny random checkpoints of real schedules, exported by onnxruntime-genai's builder as tools/audit_peers.py
does): the folder holds the config, the tokenizer files, the grafted model and its data; onnxruntime-genai's logits at
each generated step equal ONNX Runtime's on the same model over the whole sequence (no cache) to the dtype's noise;
and its logits are the float64 recompute's of the whole decoder from the checkpoint (``decoder.oracle``) on the same
sequence within the bound ``graft --checkpoint`` judges by, its token the float64 argmax wherever the top-two margin
is wider than twice that bound (a near tie either way is no error).

The builder's fp16 model for the CPU is not served past its first call by onnxruntime-genai 0.18 as the builder wrote
it (its attention-mask subgraph refuses a call after cached entries, as ``test_audit_builder`` finds for the proof's
calls): there the grafted folder must load, give the first call's logits, and fail the second call as the original
folder does, in the same words.
"""  # noqa: D205

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ropeexport.cli import main
from tests.toolmod import tool

og = pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai (the test extra) is the builder and the engine")
pytest.importorskip("transformers", reason="transformers (the test extra) makes the checkpoints")
peers = tool("audit_peers")

PROMPT = [5, 17, 33, 42, 99, 100, 7, 8]
STEPS = 16

# (schedule of tools/audit_peers.py, builder precision, graft's extra argv, the finding grafted, logits' noise
# (relative to the step's logit scale): float32 steps against a whole-sequence call, fp16 the same in half precision;
# None, or the words of onnxruntime-genai's failure on the builder's own folder (module doc))
CASES = [
    ("default (Llama 2)", "fp32", [], "float32-angles", 1e-5, None),
    ("linear x4", "fp32", ["--trust", "config"], "scaling-ignored", 1e-5, None),
    ("longrope (Phi-3)", "fp32", [], "float32-angles", 1e-5, None),
    ("llama3 (Llama 3.1)", "fp16", [], "float32-through-fp16", 1e-2, "Shape mismatch attempting to re-use buffer"),
]


def _builder(tmp: Path, schedule: str, precision: str) -> tuple[Path, Path]:
    """(the builder's model.onnx, the checkpoint folder) of a tiny random checkpoint of ``schedule``."""
    model_type, fields = peers.SCHEDULES[schedule]
    ckpt = peers.checkpoint(tmp / "checkpoint", model_type, fields)
    out = tmp / "og"
    built = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(out),
                            "-p", precision, "-e", "cpu", "-c", str(out / "cache")], capture_output=True, text=True,
                           timeout=600)  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    return out / "model.onnx", ckpt


def _served(folder: Path) -> tuple[list[int], list[np.ndarray], str | None]:
    """onnxruntime-genai's greedy tokens after PROMPT, the logits [vocab] it chose each from, and its error (None when
    it ran every step).
    """  # noqa: D205
    model = og.Model(str(folder))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(PROMPT) + STEPS, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(np.array([PROMPT], np.int32))
    tokens, logits = [], []
    while not generator.is_done():
        try:
            logits.append(np.asarray(generator.get_logits(), np.float64).reshape(-1))
        except RuntimeError as exc:  # onnxruntime-genai's own error (module doc)
            return tokens, logits, str(exc)
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    return tokens, logits, None


def _whole(model: Path, ids: list[int], kv_heads: int, head_size: int, dtype: type) -> np.ndarray:
    """ONNX Runtime's logits [n, vocab] of ``model`` on the whole sequence ``ids`` at once, an empty cache."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    feeds: dict[str, np.ndarray] = {"input_ids": np.array([ids], np.int64),
                                    "attention_mask": np.ones((1, len(ids)), np.int64)}  # fmt: skip
    for i in session.get_inputs():
        if i.name.startswith("past_key_values"):
            feeds[i.name] = np.zeros((1, kv_heads, 0, head_size), dtype)
        elif i.name == "position_ids":  # as onnxruntime-genai feeds it: cumsum(attention_mask) - 1
            feeds[i.name] = np.arange(len(ids), dtype=np.int64).reshape(1, -1)
    return np.asarray(session.run(["logits"], feeds)[0], np.float64)[0]


def _float64(config: Path, ckpt: Path, model: Path, ids: list[int]) -> tuple[np.ndarray, float]:
    """The float64 recompute's logits [n, vocab] of the whole decoder on ``ids`` (positions 0 .. n - 1), and the bound
    ``graft --checkpoint`` judges the model's logits by (relative to the call's logit scale).
    """  # noqa: D205
    from ropeexport.audits.prove import DecoderProof
    from ropeexport.decoder.oracle import decoder_float64

    proof = DecoderProof(config, ckpt, model)
    n = len(ids)
    logits = decoder_float64(proof.spec, proof.truth.weights64, np.array([ids]), np.arange(n).reshape(1, n),
                             np.ones((1, n), np.int64), pieces=proof.truth.pieces)[0]  # fmt: skip
    return logits, proof.tolerance


@pytest.mark.slow  # the builder, the audit, the graft and onnxruntime-genai per case (~15 s each)
@pytest.mark.parametrize(("schedule", "precision", "argv", "finding", "noise", "broken"), CASES,
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_a_grafted_builder_model_is_served_by_onnxruntime_genai_as_written(
    schedule: str, precision: str, argv: list[str], finding: str, noise: float, broken: str | None, tmp_path: Path,
    capsys,  # noqa: ANN001
) -> None:
    model, ckpt = _builder(tmp_path, schedule, precision)
    config = ckpt / "config.json"
    capsys.readouterr()
    assert main(["audit", str(model), "--hf-config", str(config), "--no-effects", "--json"]) == 1
    assert finding in [f["name"] for f in json.loads(capsys.readouterr().out)["findings"]]
    out = tmp_path / "fixed"
    assert main(["graft", str(model), "--hf-config", str(config), "--out", str(out), *argv]) == 0
    printed = capsys.readouterr().out
    files = {p.name for p in out.iterdir()}
    assert {"genai_config.json", "model.onnx", "model.onnx.data", "tokenizer.json", "tokenizer_config.json"} <= files
    assert "manifest.json" in files
    assert f"onnxruntime-genai folder {out}: {', '.join(sorted(files))}\n" in printed, printed  # every file it wrote
    assert (out / "genai_config.json").read_bytes() == (model.parent / "genai_config.json").read_bytes()
    tokens, served, error = _served(out)
    if broken is None:
        assert error is None and len(tokens) == STEPS, error
    else:  # the builder's own folder fails the same way: not the graft's doing
        assert error is not None and broken in error and len(served) >= 1, error
        original = _served(model.parent)
        assert original[2] is not None and broken in original[2] and len(original[1]) == len(served), original[2]
    decoder = json.loads((out / "genai_config.json").read_text())["model"]["decoder"]
    dtype = np.float16 if precision == "fp16" else np.float32
    whole = _whole(out / "model.onnx", PROMPT + tokens[:-1], decoder["num_key_value_heads"], decoder["head_size"],
                   dtype)[len(PROMPT) - 1 :]  # fmt: skip
    for step, (got, want) in enumerate(zip(served, whole, strict=True)):
        assert np.abs(got - want).max() <= noise * np.abs(want).max(), (step, np.abs(got - want).max())
    truth, bound = _float64(config, ckpt, out / "model.onnx", PROMPT + tokens[:-1])
    truth = truth[len(PROMPT) - 1 :][: len(served)]  # the rows each served token was chosen from
    scale = np.abs(truth).max()
    assert np.abs(np.array(served) - truth).max() <= bound * scale
    top2 = np.sort(truth, axis=1)[:, -2:]
    clear = [i for i in range(len(truth)) if top2[i, 1] - top2[i, 0] > 2 * bound * scale]  # no near tie: one answer
    assert len(clear) >= (STEPS // 2 if broken is None else 0), top2  # enough steps compared to mean something
    assert [tokens[i] for i in clear] == [int(truth[i].argmax()) for i in clear]
