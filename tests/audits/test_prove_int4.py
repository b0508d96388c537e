"""The decoder proof on int4 models: the weights the model holds (MatMulNBits, dequantized) are the recompute's.

``audit.prove.held_weights`` reads them by the layer and projection their names give. Checked on ropeexport's own
int4 decoders (what it reads is exactly what ``WeightFormat.read64`` gives, fused q | k | v and gate | up split) and
on onnxruntime-genai's builder's ``-p int4`` model of a tiny Llama: before, ``graft --checkpoint`` judged its int4
rounding against the checkpoint (0.29-0.38 of the logit scale, never proven); now it is judged on its own terms, at
the bound of its accuracy level.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from ropeexport.audits.prove import held_weights
from ropeexport.cli import main
from ropeexport.components.linear import is_weight
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.checkpoint import seeded_weights
from ropeexport.decoder.export import build_decoder_graph
from ropeexport.decoder.oracle import stored_float64
from tests.toolmod import tool

LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 160,
         "max_position_embeddings": 512}  # fmt: skip
PHI3 = {**LLAMA, "model_type": "phi3", "pad_token_id": 0}  # fused qkv and gate_up in the checkpoint


@pytest.mark.parametrize(("config", "graph", "block", "symmetric"), [(LLAMA, "fused", 32, True),
                                                                     (PHI3, "gqa", 128, False)])  # fmt: skip
def test_held_weights_are_what_the_int4_decoder_holds(config: dict, graph: str, block: int, symmetric: bool) -> None:
    spec, _ = resolve(DecoderRequest(config=config, graph=graph, weight_format="int4", block_size=block,
                                     symmetric=symmetric))  # fmt: skip
    weights = seeded_weights(spec)
    held, level = held_weights(build_decoder_graph(spec, weights, "seeded"), spec)
    truth = stored_float64(spec, weights)
    projections = {k for k in weights if is_weight(k)}
    assert set(held) == projections and level == 0
    for name in projections:
        assert np.array_equal(held[name], truth[name]), name


@pytest.mark.slow
@pytest.mark.parametrize(("extra", "bound", "original_worst"), [([], 0.25, 0.1), (["accuracy_level=1"], 1e-4, 1e-4)],
                         ids=["builder-default-level-4", "level-1"])  # fmt: skip
def test_the_builders_int4_model_is_proven_on_its_own_terms(
    extra: list[str], bound: float, original_worst: float, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai (the test extra) is the builder")
    peers = tool("audit_peers")
    ckpt = peers.checkpoint(tmp_path / "checkpoint", "llama", {"max_position_embeddings": 4096, "rope_theta": 1e4})
    out = tmp_path / "og"
    options = ["--extra_options", *extra] if extra else []
    built = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(out),
                            "-p", "int4", "-e", "cpu", "-c", str(out / "cache"), *options], capture_output=True,
                           text=True, timeout=600)  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    model = onnx.load(str(out / "model.onnx"))
    assert sum(n.op_type == "MatMulNBits" for n in model.graph.node) == 11  # 2 x (qkv, o, gate, up, down), lm_head
    capsys.readouterr()
    fixed = tmp_path / "fixed" / "model.onnx"
    argv = ["graft", str(out / "model.onnx"), "--hf-config", str(ckpt / "config.json"), "--out", str(fixed),
            "--checkpoint", str(ckpt), "--json"]  # fmt: skip
    assert main(argv) == 0  # grafted and proven
    proof = json.loads(capsys.readouterr().out)["decoder"]
    assert proof["tolerance"]["rel"] == bound and "int4 projections as the model holds them" in proof["reference"]
    assert proof["passed"]["grafted"]
    worst = max(c["models"]["original"]["rel"] for c in proof["calls"])
    assert worst < original_worst  # the int4 rounding against the checkpoint measured 0.29-0.38 before
