"""Models onnxruntime-genai's builder writes that audit / graft could not handle before, from tiny random checkpoints
(``tools/audit_peers.py`` makes them the same way): each case's audit exit code and finding, and graft's one line.

- Phi-4-mini's shape (phi3 with head_dim 32 and partial_rotary_factor 0.75: 12-wide caches): ONNX Runtime's
  GroupQueryAttention refuses caches that are not a multiple of 8 wide, so the model cannot run at all. The builder
  0.18 reads ``rope_parameters["type"]`` of a phi3 config, which transformers 5 writes as ``rope_type``: the case
  adds the key, as a user of the builder has to.
- a Llama exported in fp16 for the CPU (com.microsoft RotaryEmbedding, MultiHeadAttention): its attention-mask
  subgraph refuses any call after cached entries, so ``graft --checkpoint`` cannot place the proof's far calls.
"""  # noqa: D205

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ropeexport.cli import main
from tests.toolmod import tool

pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai (the test extra) is the builder")
pytest.importorskip("transformers", reason="transformers (the test extra) makes the checkpoints")
peers = tool("audit_peers")

PHI4_SHAPE = {"max_position_embeddings": 8192, "original_max_position_embeddings": 512, "rope_theta": 10000.0,
              "pad_token_id": 0, "hidden_size": 128, "partial_rotary_factor": 0.75,
              "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0 + i / 20 for i in range(12)],
                               "long_factor": [1.0 + i for i in range(12)]}}  # fmt: skip
LLAMA = {"max_position_embeddings": 4096, "rope_theta": 10000.0}

# (name, model_type, fields, builder precision, audit exit code, audit finding or None, graft argv, graft's words)
CASES: list[tuple[str, str, dict[str, Any], str, int, str | None, list[str], str]] = [
    ("phi4-mini-shape-fp32", "phi3", PHI4_SHAPE, "fp32", 1, "cannot-run", [], "a multiple of 8"),
    ("llama-fp16-cpu-checkpoint", "llama", LLAMA, "fp16", 0, None, ["--checkpoint", "{ckpt}"],
     "refuses the call 'last position'"),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("case", "model_type", "fields", "precision", "code", "finding", "argv", "words"), CASES,
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_builder_models_audit_and_graft_refuse_in_one_line(
    case, model_type, fields, precision, code, finding, argv, words, tmp_path: Path, capsys  # noqa: ANN001
) -> None:
    ckpt = peers.checkpoint(tmp_path / "checkpoint", model_type, fields)
    config = json.loads((ckpt / "config.json").read_text())
    if model_type == "phi3":
        config["rope_parameters"]["type"] = config["rope_parameters"]["rope_type"]
        (ckpt / "config.json").write_text(json.dumps(config))
    out = tmp_path / "og"
    built = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(out),
                            "-p", precision, "-e", "cpu", "-c", str(out / "cache")], capture_output=True, text=True,
                           timeout=600)  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    model = out / "model.onnx"
    capsys.readouterr()
    assert main(["audit", str(model), "--hf-config", str(ckpt / "config.json"), "--json"]) == code
    names = [f["name"] for s in json.loads(capsys.readouterr().out)["sites"] for f in s["findings"]]
    assert finding is None or finding in names, names
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    target = tmp_path / "fixed" / "model.onnx"
    argv = [a.replace("{ckpt}", str(ckpt)) for a in argv]
    assert main(["graft", str(model), "--hf-config", str(ckpt / "config.json"), "--out", str(target), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err and words in err, err
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing written, no empty folder


@pytest.mark.slow
def test_the_builders_fp16_cpu_model_is_a_precision_finding_graft_repairs(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """Llama 3.1's schedule and length in fp16 for the CPU: the builder computes its tables in float32 and rounds them
    to float16, which at 131072 positions is more than fp16's unit off: named as that, and grafted without --trust.
    """  # noqa: D205
    ckpt = peers.checkpoint(tmp_path / "checkpoint", "llama", peers.SCHEDULES["llama3 (Llama 3.1)"][1])
    out = tmp_path / "og"
    built = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(out),
                            "-p", "fp16", "-e", "cpu", "-c", str(out / "cache")], capture_output=True, text=True,
                           timeout=600)  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    config = str(ckpt / "config.json")
    capsys.readouterr()
    assert main(["audit", str(out / "model.onnx"), "--hf-config", config, "--json"]) == 1
    names = [f["name"] for s in json.loads(capsys.readouterr().out)["sites"] for f in s["findings"]]
    assert names == ["float32-through-fp16"], names
    fixed = tmp_path / "fixed" / "model.onnx"
    assert main(["graft", str(out / "model.onnx"), "--hf-config", config, "--out", str(fixed), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["proven"] and result["changed_schedule"] == [] and result["after"]["verdict"] == "exact"
