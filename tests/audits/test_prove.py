"""The whole-decoder proof (``audit.prove``, ``graft --checkpoint``) on decoders built from tiny random checkpoints.

The foreign models here are ropeexport's own decoders exported with a planted schedule fault (LongRoPE built as the
default schedule: one table, no switch, no attention factor), in both graph forms, which the audit reads as
RotaryEmbedding (opset 23) and gathered-table sites. Each must fail the float64 recompute of the whole decoder where
its fault shows, and the grafted model must pass every call, the last position and both sides of the switch
included. A right model passes as it is; bad checkpoints are one line, exit 2, nothing written.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ropeexport as rx
from ropeexport.audits.prove import DecoderProof, Feeder
from ropeexport.cli import main
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.checkpoint import load_checkpoint
from ropeexport.decoder.export import build_decoder_graph
from ropeexport.graph.onnx_io import save_model
from tests.decoder.tiny import checkpoint, hf_config, torch, transformers

CALLS = ["start", "last position", "L = original", "L = original + 1"]


@pytest.fixture
def phi3(tiny_checkpoint) -> Path:  # noqa: ANN001
    """A tiny Phi-3 checkpoint: LongRoPE, max 256 positions, original 64."""
    return tiny_checkpoint("phi3-longrope")


def _decoder(folder: Path, ckpt: Path, graph: str, unscaled: bool) -> Path:
    spec, _ = resolve(DecoderRequest(checkpoint=ckpt, graph=graph))
    weights = load_checkpoint(spec, ckpt)
    if unscaled:  # the planted fault: the config's LongRoPE ignored
        spec = spec.replace(position={**spec.position, "scaling": "default", "scaling_params": {}})
    save_model(build_decoder_graph(spec, weights, str(ckpt)), folder)
    return folder / "model.onnx"


@pytest.mark.parametrize("graph", ["fused", "decomposed"])
def test_a_right_decoder_passes_every_call(graph: str, phi3: Path, tmp_path: Path) -> None:
    model = _decoder(tmp_path, phi3, graph, unscaled=False)
    proof = DecoderProof(phi3 / "config.json", phi3, model).run({"original": model})
    assert [c["call"] for c in proof["calls"]] == CALLS
    assert [c["positions"] for c in proof["calls"]] == [[0, 7], [248, 255], [56, 63], [57, 64]]
    assert [c["regime"] for c in proof["calls"]] == ["short", "long", "short", "long"]
    assert proof["passed"] == {"original": True} and proof["calls_run"] == {"original": 4}
    assert max(c["models"]["original"]["rel"] for c in proof["calls"]) <= 1e-5


# (the budget: the cache of a call after this many entries (None: the default), the calls run, the verdict: a call
# not run is never counted as passed)
BUDGETS = [(None, CALLS, "proven (every call, positions up to 255)"),
           (57, ["start", "L = original", "L = original + 1"], "proven up to position 64; 1 far call not run"),
           (56, ["start", "L = original"], "proven up to position 63; 2 far calls not run"),
           (0, ["start"], "proven up to position 7; 3 far calls not run")]  # fmt: skip


@pytest.mark.parametrize(("entries", "run", "verdict"), BUDGETS, ids=["default", "past-57", "past-56", "no-cache"])
def test_a_call_whose_cache_passes_the_budget_is_not_run_and_says_so(entries: int | None, run: list[str], verdict: str,
                                                                     phi3: Path, tmp_path: Path) -> None:  # fmt: skip
    import onnxruntime as ort

    model = _decoder(tmp_path, phi3, "fused", unscaled=False)
    budget = 4.0
    if entries is not None:  # exactly the cache of a call after ``entries`` entries: that call runs, one more does not
        spec = DecoderProof(phi3 / "config.json", phi3, model).spec
        session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        budget = Feeder(session, spec, model).cache_bytes(entries) / 2**30
    proof = DecoderProof(phi3 / "config.json", phi3, model, cache_gib=budget).run({"original": model})
    records = {c["call"]: c["models"]["original"] for c in proof["calls"]}
    assert [name for name, r in records.items() if "passed" in r] == run and proof["calls_run"]["original"] == len(run)
    for name in set(CALLS) - set(run):
        assert "more than the proof's" in records[name]["not_run"] and "--proof-cache-gib" in records[name]["not_run"]
    said = proof["verdict"]["original"]
    assert said["text"].startswith(verdict) and proof["passed"]["original"] is (run == CALLS), said
    assert said["verdict"] == ("proven" if run == CALLS else "partial") and said["not_run"] == len(CALLS) - len(run)
    if run != CALLS:  # the most cache a call held back would take, against the budget given
        most = max(r["cache_gib"] for r in records.values() if "not_run" in r)
        assert said["cache_gib"] == most > budget
        assert f"(cache would need {most:.3g} GiB, over --proof-cache-gib {budget:g})" in said["text"], said


NEITHER = "the model takes neither a cache nor position_ids: its tokens always sit at 0 .. n - 1"
# (per call: a record as ``judge`` gives it, the verdict, its words)
VERDICTS = [
    ([{"passed": True}, {"passed": True}], "proven", "proven (every call, positions up to 255)"),
    ([{"passed": True}, {"not_run": "x", "cache_gib": 16.25}], "partial",
     "proven up to position 7; 1 far call not run (cache would need 16.2 GiB, over --proof-cache-gib 4)"),
    ([{"passed": True}, {"not_run": NEITHER}], "partial", f"proven up to position 7; 1 far call not run ({NEITHER})"),
    ([{"passed": False}, {"not_run": "x", "cache_gib": 16.25}], "not proven",
     "NOT proven: 1 of 1 calls run fail; 1 far call not run (cache would need 16.2 GiB, over --proof-cache-gib 4)"),
    ([{"passed": True}, {"passed": False}], "not proven", "NOT proven: 1 of 2 calls run fail"),
    ([{"not_run": "x", "cache_gib": 1.0}, {"not_run": "x", "cache_gib": 16.25}], "not proven",
     "NOT proven: no call run; 2 far calls not run (cache would need 16.2 GiB, over --proof-cache-gib 4)"),
]  # fmt: skip


@pytest.mark.parametrize(("records", "verdict", "text"), VERDICTS,
                         ids=["proven", "cache", "neither", "fails", "fails-no-skip", "none-run"])  # fmt: skip
def test_a_call_not_run_is_never_counted_as_proven(records: list[dict], verdict: str, text: str) -> None:
    from ropeexport.audits.proof_verdict import verdict as judged

    calls = [{"positions": p, "models": {"m": r}} for p, r in zip([[0, 7], [248, 255]], records, strict=True)]
    said = judged(calls, "m", 4.0)
    assert (said["verdict"], said["text"]) == (verdict, text)
    assert said["proven_up_to"] == {"proven": 255, "partial": 7}.get(verdict)


def test_a_graft_proven_short_of_its_far_calls_says_so_and_exits_3(phi3: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """The planted model grafted with a budget that holds back the last position: proven up to position 64, never
    "proven"; exit 3 (verified, but part of the check could not run here), the grafted model written.
    """  # noqa: D205
    import onnxruntime as ort

    model = _decoder(tmp_path / "planted", phi3, "fused", unscaled=True)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    budget = Feeder(session, DecoderProof(phi3 / "config.json", phi3, model).spec, model).cache_bytes(57) / 2**30
    argv = ["graft", str(model), "--hf-config", str(phi3 / "config.json"), "--trust", "config", "--checkpoint",
            str(phi3), "--proof-cache-gib", str(budget)]  # fmt: skip
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "fixed.onnx"), "--json"]) == 3
    result = json.loads(capsys.readouterr().out)
    assert not result["proven"] and result["verdict"] == "partial" and (tmp_path / "fixed.onnx").is_file()
    assert result["text"].startswith("proven up to position 64; 1 far call not run (cache would need ")
    assert result["decoder"]["verdict"]["original"]["verdict"] == "not proven"  # LongRoPE ignored: fails where run
    assert main([*argv, "--out", str(tmp_path / "again.onnx")]) == 3
    head = capsys.readouterr().out.splitlines()[0]
    assert head.endswith(f"replaced, {result['text']}") and ", proven\n" not in head + "\n", head


@pytest.mark.parametrize("bad", ["0", "-1", "nan"])
def test_a_bad_cache_budget_is_one_line_and_exit_2(bad: str, phi3: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    model = _decoder(tmp_path / "m", phi3, "fused", unscaled=False)
    capsys.readouterr()
    code = main(["graft", str(model), "--hf-config", str(phi3 / "config.json"), "--out", str(tmp_path / "g.onnx"),
                 "--checkpoint", str(phi3), "--proof-cache-gib", bad])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "proof-cache-gib" in err and "positive" in err, err
    assert not (tmp_path / "g.onnx").exists()


@pytest.mark.parametrize("graph", ["fused", "decomposed"])
def test_a_graft_is_proven_against_the_whole_decoder(graph: str, phi3: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    model = _decoder(tmp_path / "planted", phi3, graph, unscaled=True)
    out = tmp_path / "fixed" / "model.onnx"
    argv = ["graft", str(model), "--hf-config", str(phi3 / "config.json"), "--out", str(out), "--trust", "config",
            "--checkpoint", str(phi3), "--json"]  # fmt: skip
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["proven"] and result["decoder"]["passed"] == {"original": False, "grafted": True}
    calls = {c["call"]: c["models"] for c in result["decoder"]["calls"]}
    assert list(calls) == CALLS
    for name, models in calls.items():
        assert models["grafted"]["passed"] and models["grafted"]["rel"] <= 1e-5, name
        assert not models["original"]["passed"] and models["original"]["rel"] > 1e-2, name  # fault everywhere
    # the switch was added: stacked tables where RotaryEmbedding / Gather read rows by position
    assert all(r["regime_length"] == "switch at 64" for r in result["replaced"])
    assert main(["graft", str(model), "--hf-config", str(phi3 / "config.json"), "--out", str(tmp_path / "again.onnx"),
                 "--trust", "config", "--checkpoint", str(phi3)]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "whole decoder against float64" in text and "L = original + 1 (positions 57..64, long)" in text


@pytest.mark.parametrize("unscaled", [False, True], ids=["positions-right", "positions-wrong-too"])
def test_a_miss_outside_the_encoding_is_said(unscaled: bool, phi3: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """A model whose MLP weight is not the checkpoint's fails the float64 decoder before and after the graft: when
    both miss by the same amount the output says the difference lies outside the positional encoding; when the graft
    repaired a positional fault too (the original misses by more), it does not.
    """  # noqa: D205
    spec, _ = resolve(DecoderRequest(checkpoint=phi3, graph="fused"))
    weights = dict(load_checkpoint(spec, phi3))
    weights["layers.0.down_proj"] = weights["layers.0.down_proj"] * 1.5  # not the checkpoint the proof reads
    if unscaled:
        spec = spec.replace(position={**spec.position, "scaling": "default", "scaling_params": {}})
    save_model(build_decoder_graph(spec, weights, str(phi3)), tmp_path / "m")
    argv = ["graft", str(tmp_path / "m" / "model.onnx"), "--hf-config", str(phi3 / "config.json"), "--out",
            str(tmp_path / "fixed.onnx"), "--trust", "config", "--checkpoint", str(phi3)]  # fmt: skip
    assert main(argv) == 1
    text = capsys.readouterr().out
    assert "NOT proven" in text
    assert ("the difference lies outside the positional encoding" in text) is not unscaled, text


# (the weight planted, the stage where the grafted model's hidden states must first depart from the truth's, the
# truth: ropeexport's float64 decoder traced, or transformers' float64 model read by hooks)
PLANTED = [("embed", "the embedding", "oracle"), ("layers.0.down_proj", "layer 0's MLP", "oracle"),
           ("layers.1.down_proj", "layer 1's MLP", "oracle"), ("layers.1.o_proj", "layer 1's attention", "oracle"),
           ("layers.1.v_proj", "layer 1's attention", "oracle"), ("embed", "the embedding", "transformers"),
           ("layers.1.down_proj", "layer 1's MLP", "transformers"),
           ("layers.1.o_proj", "layer 1's attention", "transformers")]  # fmt: skip
SAID = {"oracle": "the float64 recompute", "transformers": "transformers' float64 model"}


@pytest.mark.parametrize(("weight", "stage", "truth"), PLANTED, ids=[f"{p[0]}-{p[2]}" for p in PLANTED])
def test_where_the_models_first_differ_is_the_planted_layer(weight: str, stage: str, truth: str, phi3: Path,
                                                            tmp_path: Path, capsys) -> None:  # noqa: ANN001  # fmt: skip
    """One weight not the checkpoint's (x 1.5): the proof misses by the same amount before and after the graft, and
    the grafted model's residual stream, against the truth's (ropeexport's float64 recompute traced, or
    transformers' float64 model read by hooks), first departs in the planted sublayer.
    """  # noqa: D205
    spec, _ = resolve(DecoderRequest(checkpoint=phi3, graph="fused"))
    weights = dict(load_checkpoint(spec, phi3))
    weights[weight] = weights[weight] * 1.5
    save_model(build_decoder_graph(spec, weights, str(phi3)), tmp_path / "m")
    argv = ["graft", str(tmp_path / "m" / "model.onnx"), "--hf-config", str(phi3 / "config.json"), "--trust",
            "config", "--checkpoint", str(phi3), "--truth", truth]  # fmt: skip
    assert main([*argv, "--out", str(tmp_path / "fixed.onnx"), "--json"]) == 1
    where = json.loads(capsys.readouterr().out)["decoder"]["first_difference"]
    assert where["first_differs"] == stage and where["call"] == "start" and where["truth"] == truth, where
    assert (where["agrees_through"] is None) is (stage == "the embedding"), where
    assert where["relative"] > 1e-3  # the planted change, far past the float32 noise the stages before it agree to
    assert [p.name for p in tmp_path.iterdir() if "locate" in p.name] == []  # the graph's copy is gone
    assert main([*argv, "--out", str(tmp_path / "again.onnx")]) == 1
    first = stage == "the embedding"
    words = (f"depart from {SAID[truth]} already at {stage}" if first
             else f"agree with {SAID[truth]} through ")  # fmt: skip
    text = capsys.readouterr().out
    assert words in text and (first or f"first depart from it in {stage}" in text), text


def test_a_model_with_neither_cache_nor_positions_is_placed_at_zero_only() -> None:
    inputs = [SimpleNamespace(name="input_ids", shape=["b", "s"], type="tensor(int64)"),
              SimpleNamespace(name="attention_mask", shape=["b", "s"], type="tensor(int64)")]  # fmt: skip
    session = SimpleNamespace(get_inputs=lambda: inputs,
                              get_outputs=lambda: [SimpleNamespace(name="logits", type="tensor(float)")])  # fmt: skip
    feeder = Feeder(session, SimpleNamespace(num_layers=2), Path("m.onnx"))
    assert feeder.placeable(0) is None
    assert "neither a cache nor position_ids" in feeder.placeable(248)


def _planted(tmp: Path, phi3: Path) -> Path:
    return _decoder(tmp / "planted", phi3, "fused", unscaled=True)


def _vocabulary(folder: Path, size: int) -> Path:
    """The tiny Phi-3 checkpoint with another vocabulary (its other tensors as the config says)."""
    config = hf_config("phi3-longrope")
    config.vocab_size = size
    torch.manual_seed(1)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


def _exported_from_another(tmp: Path, phi3: Path) -> Path:
    """A planted model exported from a checkpoint of 128 tokens, proven against Phi-3's 96-token checkpoint."""
    return _decoder(tmp / "other-model", _vocabulary(tmp / "other", 128), "fused", unscaled=True)


# (name, the model grafted, the --checkpoint argv, a phrase of the one line)
BAD = [
    ("checkpoint-not-a-folder", _planted, lambda t, _: ["--checkpoint", str(t / "absent")], "is not a folder"),
    ("checkpoint-of-another-model", _planted, lambda t, _: ["--checkpoint", str(checkpoint(t / "llama", "llama"))],
     "tensor"),
    ("checkpoint-of-another-vocabulary", _planted, lambda t, _: ["--checkpoint", str(_vocabulary(t / "v", 128))],
     "has shape [128, 32]"),
    ("model-exported-from-another-checkpoint", _exported_from_another, lambda _, p: ["--checkpoint", str(p)],
     "not the checkpoint the model was exported from"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "model", "extra", "phrase"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_checkpoint_is_one_line_and_exit_2(case, model, extra, phrase, phi3: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001, E501
    model = model(tmp_path, phi3)
    argv = extra(tmp_path, phi3)
    capsys.readouterr()  # what making the models and checkpoints printed
    before = sorted(p.name for p in tmp_path.rglob("*"))
    out = tmp_path / "fixed.onnx"
    code = main(["graft", str(model), "--hf-config", str(phi3 / "config.json"), "--out", str(out), "--trust",
                 "config", *argv])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "Traceback" not in err, err
    assert err.startswith("ropeexport: error: --checkpoint") and phrase in err, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before and not out.exists()


def test_a_call_refused_while_reading_the_cache_window_is_one_line_and_exit_2(
    phi3: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, _ = resolve(DecoderRequest(checkpoint=phi3, graph="fused"))
    proto = build_decoder_graph(spec, load_checkpoint(spec, phi3), str(phi3))
    # an output only ``Feeder.keeps`` asks for (it runs every output, each judged call the logits alone): input_ids
    # reshaped to 3 values, which a call of 8 tokens is not; ONNX Runtime builds the session and refuses the run
    proto.graph.node.append(helper.make_node("Reshape", ["input_ids", "probe_shape"], ["probe"], name="probe_node"))
    proto.graph.initializer.append(numpy_helper.from_array(np.array([3], np.int64), "probe_shape"))
    proto.graph.output.append(helper.make_tensor_value_info("probe", TensorProto.INT64, [3]))
    save_model(proto, tmp_path / "model")
    model, out = tmp_path / "model" / "model.onnx", tmp_path / "fixed.onnx"
    capsys.readouterr()
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code = main(["graft", str(model), "--hf-config", str(phi3 / "config.json"), "--out", str(out), "--trust",
                 "config", "--checkpoint", str(phi3)])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "Traceback" not in err, err
    said = f"{str(model)!r} refuses the call that reads which layers keep a window of their cache (8 tokens at "
    assert err.startswith(f"ropeexport: error: MODEL: {said}positions 0-7 on an empty cache"), err
    assert "Reshape 'probe_node'" in err, err  # ONNX Runtime's reason, in one line
    assert sorted(p.name for p in tmp_path.rglob("*")) == before and not out.exists()


def test_the_api_takes_a_checkpoint(phi3: Path, tmp_path: Path) -> None:
    model = _decoder(tmp_path / "right", phi3, "decomposed", unscaled=False)
    result = rx.graft(model, phi3 / "config.json", tmp_path / "same.onnx", checkpoint=phi3)
    assert result.replaced == [] and result.proven and result.decoder["passed"]["grafted"]


# (signal, the exit it gives, what --out is): SIGKILL ends the process where it is; SIGINT and SIGTERM unwind it
# (exit 130 / 143); a model with genai_config.json beside it given a folder: the onnxruntime-genai folder, whole
INTERRUPTS = [("SIGKILL", -9, "file"), ("SIGINT", 130, "file"), ("SIGTERM", 143, "file"), ("SIGKILL", -9, "folder"),
              ("SIGTERM", 143, "folder")]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("name", "code", "form"), INTERRUPTS, ids=[f"{i[0]}-{i[2]}" for i in INTERRUPTS])
def test_an_interrupted_graft_never_leaves_an_unproven_model(name: str, code: int, form: str, phi3: Path,
                                                             tmp_path: Path) -> None:  # fmt: skip
    import os
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    from ropeexport.store import Store

    model = _decoder(tmp_path / "planted", phi3, "fused", unscaled=True)
    out = tmp_path / "fixed" / "model.onnx"
    if form == "folder":
        (model.parent / "genai_config.json").write_text('{"model": {"decoder": {"filename": "model.onnx"}}}')
    given = out if form == "file" else out.parent
    marker = tmp_path / "proving"
    script = tmp_path / "graft.py"
    # The proof of the grafted model is where the process is stopped: the grafted file exists by then, unproven.
    script.write_text(textwrap.dedent(f"""
        import pathlib, sys, time
        from ropeexport.audits import prove
        real = prove.DecoderProof.run
        def run(self, models):
            if "grafted" in models:
                pathlib.Path({str(marker)!r}).write_text("here")
                time.sleep(600)
            return real(self, models)
        prove.DecoderProof.run = run
        from ropeexport.cli import main
        sys.exit(main(["graft", {str(model)!r}, "--hf-config", {str(phi3 / "config.json")!r}, "--out",
                       {str(given)!r}, "--trust", "config", "--checkpoint", {str(phi3)!r}]))
    """))
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, str(script)], env=os.environ | {"PYTHONPATH": str(root)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    # (SIGINT as a terminal gives it: a suite run in the background of a shell without job control ignores it)
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "the graft never reached its proof"
        time.sleep(0.05)
    proc.send_signal(getattr(signal, name))
    assert proc.wait(timeout=120) == code
    err = proc.stderr.read().decode()
    if code > 0:  # its last word, and no traceback (a library may have warned on stderr before)
        assert err.strip().splitlines()[-1] == f"ropeexport: {'interrupted' if code == 130 else 'terminated'}", err
        assert "Traceback" not in err, err
    assert not out.exists() and not out.with_name("model.onnx.data").exists()
    Store(out.parent).clean()  # what SIGKILL left, the next writer removes; Ctrl-C and SIGTERM left nothing at all
    assert not out.parent.exists() or [p.name for p in out.parent.iterdir()] == []
    if form == "folder":  # no half folder: its work folder beside it, removed by the next writer of the name
        Store(tmp_path).clean(only="fixed")
        assert not [p.name for p in tmp_path.iterdir() if "fixed" in p.name]
