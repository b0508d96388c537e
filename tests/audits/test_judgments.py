"""Judgments that can fail: an audit whose compared rows cannot tell the config's schedule from a neighbour's is
refused (saying how many positions it needs), and a graft proof whose float64 logits cannot show a position error is
"cannot prove", never "proven".

The outside check's cases, rebuilt: a theta-5e5 spec with max_positions 1 against a theta-1e4 model with 4096-row
tables audited "exact" and grafted "proven" (row 0 is the same for every theta); ``graft --checkpoint`` of a tied int4
model whose head scales are 0 (every logit 0) said "proven".
"""  # noqa: D205

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import ropeexport as rx
from ropeexport.audits.neighbours import smallest_positions
from ropeexport.audits.proof_verdict import judge_call, verdict
from ropeexport.cli import main
from tests.audits.planted import HEADS, KV, D, P, gqa_model, rotary_ms_model, tables, write_config

SPEC = {"encoding": "rope", "head_dim": D, "num_heads": HEADS, "num_kv_heads": KV}

# (case, the spec's theta and max_positions, the model's table dtype, the audit's exit code, a phrase of its output)
POSITIONS = [
    ("theta-5e5-spec-1-position-fp32", 5e5, 1, "float32", 2,
     "max_positions 1 (the spec's max_positions) is too few to judge float32 tables: row 0 of theta 500000, unscaled "
     "and of theta 505000 (1% apart) agree within two units of float32, so either would be exact; the audit needs "
     "at least 2 positions"),
    ("exact-spec-1-position-fp32", 1e4, 1, "float32", 2, "needs at least 2 positions"),
    ("theta-5e5-spec-2-positions-fp32", 5e5, 2, "float32", 1, "theta 10000 where the config says 500000"),
    ("exact-spec-4-positions-fp16", 1e4, 4, "float16", 2,
     "rows 0 .. 3 of theta 10000, unscaled and of theta 10100 (1% apart) agree within two units of float16"),
    ("exact-spec-6-positions-fp16", 1e4, 6, "float16", 0, ""),
]  # fmt: skip


def _positions_case(tmp: Path, theta: float, positions: int, dtype: str) -> tuple[Path, Path]:
    """A theta-1e4 model with 4096-row tables (GroupQueryAttention float32, or com.microsoft RotaryEmbedding float16)
    and a spec of ``theta`` over ``positions`` positions.
    """  # noqa: D205
    exact = tables(rx.from_hf_config(write_config(tmp, "default"))[0], P)
    if dtype == "float32":
        model = gqa_model(tmp / "model.onnx", *exact)
    else:
        model = rotary_ms_model(tmp / "model.onnx", *(t.astype(np.float16) for t in exact))
    spec = tmp / "spec.json"
    spec.write_text(json.dumps(SPEC | {"theta": theta, "max_positions": positions}))
    return model, spec


@pytest.mark.parametrize(("case", "theta", "positions", "dtype", "code", "phrase"), POSITIONS,
                         ids=[p[0] for p in POSITIONS])  # fmt: skip
def test_too_few_positions_to_tell_a_schedule_apart_is_refused(case: str, theta: float, positions: int, dtype: str,
                                                               code: int, phrase: str, tmp_path: Path,
                                                               capsys) -> None:  # noqa: ANN001
    model, spec = _positions_case(tmp_path, theta, positions, dtype)
    assert main(["audit", str(model), "--spec", str(spec), "--no-effects"]) == code
    captured = capsys.readouterr()
    if code == 2:
        err = captured.err.strip()
        assert err.count("\n") == 0 and err.startswith("ropeexport: error: --spec: ") and phrase in err, err
        out = tmp_path / "fixed.onnx"
        assert main(["graft", str(model), "--spec", str(spec), "--out", str(out), "--trust", "config"]) == 2
        assert not out.exists() and "too few to judge" in capsys.readouterr().err  # graft "proven" before
    else:
        assert phrase in captured.out, captured.out


def test_the_config_field_is_named_for_a_config(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    model, _ = _positions_case(tmp_path, 1e4, 1, "float32")
    config = tmp_path / "one.json"
    config.write_text(json.dumps(json.loads((tmp_path / "default.json").read_text()) | {"max_position_embeddings": 1}))
    assert main(["audit", str(model), "--hf-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ropeexport: error: --hf-config: max_positions 1 (the config's max_position_embeddings)")


# (config, dtype, the fewest positions, the neighbour that needs them): the rule's figures (``audits.neighbours``)
NEEDED = [
    ("default", "float32", 2, "theta 10100"), ("default", "float16", 6, "theta 10100"),
    ("default", "bfloat16", 41, "theta 10100"), ("llama3-128k", "float32", 2, "theta 505000"),
    ("llama3-128k", "float16", 1871, "llama3 factor 8.08"), ("linear", "float16", 21, "theta 10100"),
    ("yarn", "float16", 31, "yarn factor 4.04"), ("dynamic", "float16", 6, "theta 10100"),
    ("longrope", "float16", 7, "theta 10100"),
]  # fmt: skip


@pytest.mark.parametrize(("config", "dtype", "needed", "neighbour"), NEEDED, ids=[f"{c}-{d}" for c, d, *_ in NEEDED])
def test_the_fewest_positions_tell_every_neighbour_apart_and_one_fewer_does_not(
    config: str, dtype: str, needed: int, neighbour: str, tmp_path: Path
) -> None:
    from ropeexport.audits.neighbours import neighbours, told_apart

    spec = rx.from_hf_config(write_config(tmp_path, config))[0]
    got, words = smallest_positions(spec, dtype)
    assert got == needed and words.startswith(neighbour), (got, words)
    near = dict(neighbours(spec))
    assert all(told_apart(spec, other, needed, dtype) for other in near.values())
    assert not told_apart(spec, near[words], needed - 1, dtype)


def _int4_tied(tmp: Path, ckpt: Path, scales: float | None) -> Path:
    """ropeexport's own int4 decoder of a tied checkpoint (its embedding gathered from the LM head's 4-bit table),
    the head's scales multiplied by ``scales`` (None: as built).
    """  # noqa: D205
    from ropeexport.decoder.build import DecoderRequest, resolve
    from ropeexport.decoder.checkpoint import load_checkpoint
    from ropeexport.decoder.export import build_decoder_graph
    from ropeexport.graph.onnx_io import save_model

    spec, _ = resolve(DecoderRequest(checkpoint=ckpt, graph="fused", weight_format="int4"))
    save_model(build_decoder_graph(spec, load_checkpoint(spec, ckpt), str(ckpt)), tmp / "built")
    path = tmp / "built" / "model.onnx"
    if scales is not None:
        model = onnx.load(str(path))
        (head,) = [t for t in model.graph.initializer if t.name == "lm_head_scales"]
        head.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(head) * np.float32(scales), head.name))
        onnx.save(model, str(path))
    return path


@pytest.mark.parametrize(("scales", "code"), [(None, 0), (0.0, 2)], ids=["as-built", "head-scales-0"])
def test_a_proof_whose_logits_cannot_show_a_position_error_is_never_proven(scales: float | None, code: int,
                                                                          tmp_path: Path, capsys,
                                                                          tiny_checkpoint) -> None:  # noqa: ANN001
    ckpt = tiny_checkpoint("llama-biases")  # tie_word_embeddings
    model = _int4_tied(tmp_path, ckpt, scales)
    out = tmp_path / "fixed.onnx"
    argv = ["graft", str(model), "--hf-config", str(ckpt / "config.json"), "--checkpoint", str(ckpt), "--out",
            str(out), "--json"]  # fmt: skip
    assert main(argv) == code
    captured = capsys.readouterr()
    if code == 0:  # the control: the same model as built is proven on its own int4 terms
        assert json.loads(captured.out)["proven"]
        return
    err = captured.err.strip()
    assert err.count("\n") == 0 and err.startswith("ropeexport: error: --checkpoint: cannot prove: "), err
    assert "every float64 logit is 0" in err and not out.exists()
    from ropeexport.audits.prove import DecoderProof

    judged = DecoderProof(ckpt / "config.json", ckpt, model).run({"original": model})  # the API: its verdict
    said = judged["verdict"]["original"]
    assert said["verdict"] == "cannot prove" and said["text"].startswith("CANNOT prove")
    assert not judged["passed"]["original"]


TRUTH = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]])
# (case, float64 logits, the model's logits, cannot_prove's words or None)
CALLS: list[tuple[str, np.ndarray, np.ndarray, str | None]] = [
    ("all-zero", np.zeros((2, 3)), np.zeros((2, 3)), "every float64 logit is 0"),
    ("constant", np.full((2, 3), 1.5), np.full((2, 3), 1.5), "every float64 logit is 1.5"),
    ("not-finite", TRUTH * np.array([1.0, np.nan, 1.0]), TRUTH, "the float64 logits are not finite"),
    ("infinite", TRUTH + np.array([0.0, np.inf, 0.0]), TRUTH, "not finite"),
    ("ordinary", TRUTH, TRUTH, None),
]  # fmt: skip


@pytest.mark.parametrize(("case", "truth", "got", "words"), CALLS, ids=[c[0] for c in CALLS])
def test_a_call_that_cannot_show_an_error_is_never_passed(case: str, truth: np.ndarray, got: np.ndarray,
                                                          words: str | None) -> None:  # fmt: skip
    record: dict[str, Any] = judge_call(got, truth, 1e-4)
    calls = [{"call": "start", "positions": [0, 7], "models": {"m": record}}]
    said = verdict(calls, "m", 4.0)
    if words is None:
        assert record["passed"] and said["verdict"] == "proven"
        return
    assert record["passed"] is False and words in record["cannot_prove"]
    assert said["verdict"] == "cannot prove" and said["proven_up_to"] is None and words in said["text"]
