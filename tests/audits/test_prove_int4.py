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
from ropeexport.decoder.export import build_decoder_graph
from ropeexport.decoder.oracle import stored_float64
from ropeexport.decoder.weights import seeded_weights
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


# (values a row holds, block size, zero points, the scales' dtype, the data reshaped from the LM head's
# [rows, blocks, block / 2] as the builder's tied table is)
TABLES = [(64, 32, False, np.float32, True), (80, 32, True, np.float32, False), (128, 16, True, np.float16, False),
          (256, 128, False, np.float16, True), (40, 16, False, np.float32, False)]  # fmt: skip


def _table_model(width: int, block: int, zero: bool, dtype: type, reshaped: bool, rows: int = 24,
                 **attributes: int) -> onnx.ModelProto:  # fmt: skip
    """One GatherBlockQuantized of ``rows`` random rows by input_ids (a TABLES case; ``attributes`` override the
    builder's bits=4, gather_axis=0, quantize_axis=1).
    """  # noqa: D205
    from onnx import TensorProto, helper, numpy_helper

    blocks = -(-width // block)
    rng = np.random.default_rng(width + block)
    data = rng.integers(0, 256, (rows, width // 2), dtype=np.uint8)
    scales = (rng.standard_normal((rows, blocks)) * 0.05).astype(dtype)
    inits = [numpy_helper.from_array(scales, "scales")]
    nodes = []
    if reshaped:
        inits += [numpy_helper.from_array(data.reshape(rows, blocks, block // 2), "head_Q4"),
                  numpy_helper.from_array(np.array([rows, width // 2], np.int64), "shape")]  # fmt: skip
        nodes.append(helper.make_node("Reshape", ["head_Q4", "shape"], ["table"]))
    else:
        inits.append(numpy_helper.from_array(data, "table"))
    names = ["table", "input_ids", "scales"]
    if zero:
        inits.append(numpy_helper.from_array(rng.integers(0, 256, (rows, -(-blocks // 2)), dtype=np.uint8), "zero"))
        names.append("zero")
    attributes = {"bits": 4, "block_size": block, "gather_axis": 0, "quantize_axis": 1, **attributes}
    nodes.append(helper.make_node("GatherBlockQuantized", names, ["rows"], "gbq", domain="com.microsoft",
                                  **attributes))  # fmt: skip
    out = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [rows])],
                              [helper.make_tensor_value_info("rows", out, [rows, width])], inits)  # fmt: skip
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)  # ORT 1.31 reads IR 10 (onnx writes 14)


@pytest.mark.parametrize(("width", "block", "zero", "dtype", "reshaped"), TABLES,
                         ids=["builder-tied", "zero-points-3-blocks", "fp16-zero-points", "fp16-reshaped",
                              "short-last-block"])  # fmt: skip
def test_a_block_quantized_table_is_read_as_onnx_runtime_gathers_it(width: int, block: int, zero: bool, dtype: type,
                                                                    reshaped: bool) -> None:  # fmt: skip
    """``held.BlockTable`` against ORT's own GatherBlockQuantized on every row: the same values, bit for bit."""
    import onnxruntime as ort

    from ropeexport.audits.prove import block_tables
    from ropeexport.graph.initializers import Initializers

    rows = 24
    model = _table_model(width, block, zero, dtype, reshaped, rows)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"input_ids": np.arange(rows, dtype=np.int64)})[0]
    table = block_tables(model)["embed"]
    assert (table.rows, table.width, table.block_size) == (rows, width, block)
    held = table.read(Initializers(model, None), 0, rows)
    assert held.shape == (rows, width) and np.array_equal(held, got.astype(np.float64))
    assert np.array_equal(table.read(Initializers(model, None), 5, 9), held[5:9])  # rows read alone


# (attributes a table the proof cannot read has, the words of its one line)
UNREAD = [({"bits": 8}, "of 8 bits"), ({"gather_axis": 1}, "gathered along axis 1"),
          ({"quantize_axis": 0}, "quantized along axis 0"), ({"block_size": 24}, "blocks of 24")]  # fmt: skip


@pytest.mark.parametrize(("attributes", "words"), UNREAD, ids=["8-bits", "gather-axis", "quantize-axis", "block"])
def test_a_table_the_proof_cannot_read_is_refused_with_the_reason(attributes: dict, words: str) -> None:
    from ropeexport.audits.prove import block_tables
    from ropeexport.errors import SpecError

    with pytest.raises(SpecError, match="GatherBlockQuantized 'gbq'") as caught:
        block_tables(_table_model(64, 32, False, np.float32, True, **attributes))
    assert words in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.slow
def test_the_builders_tied_int4_embedding_is_read_from_its_table(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A checkpoint with tied embeddings: the builder's ``-p int4`` gathers the embedding from the LM head's own
    4-bit weight (GatherBlockQuantized). Read from the model, the graft is proven at level 1 (1e-4); with the
    checkpoint's embedding instead (the table not read, as before) it was NOT proven, departing at the embedding. A
    wrong scale planted in the table (the head's own left right) is caught: the tied recompute cannot match both.
    """  # noqa: D205
    import ropeexport.decoder.held as held_module
    from ropeexport.audits.prove import DecoderProof

    pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai (the test extra) is the builder")
    peers = tool("audit_peers")
    ckpt = peers.checkpoint(tmp_path / "checkpoint", "llama", {"max_position_embeddings": 4096, "rope_theta": 1e4,
                                                               "tie_word_embeddings": True})  # fmt: skip
    out = tmp_path / "og"
    built = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(out),
                            "-p", "int4", "-e", "cpu", "-c", str(out / "cache"), "--extra_options", "accuracy_level=1"],
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    model = out / "model.onnx"
    proto = onnx.load(str(model), load_external_data=False)
    gathers = [n for n in proto.graph.node if n.op_type == "GatherBlockQuantized"]
    assert len(gathers) == 1 and gathers[0].input[2] == "lm_head.MatMul.weight_scales"  # the head's, shared
    argv = ["graft", str(model), "--hf-config", str(ckpt / "config.json"), "--checkpoint", str(ckpt)]
    capsys.readouterr()
    with monkeypatch.context() as patched:  # as before: the checkpoint's embedding, the model's table not read
        patched.setattr(held_module, "block_tables", lambda model: {})
        assert main([*argv, "--out", str(tmp_path / "before")]) == 1
        text = capsys.readouterr().out
        assert "NOT proven" in text and "already at the embedding" in text, text
    assert main([*argv, "--out", str(tmp_path / "fixed"), "--json"]) == 0
    proof = json.loads(capsys.readouterr().out)["decoder"]
    assert proof["tolerance"]["rel"] == 1e-4 and proof["passed"] == {"original": True, "grafted": True}
    assert "its embedding and its head, tied to it, as the model's 4-bit table holds it" in proof["reference"]
    assert max(c["models"]["grafted"]["rel"] for c in proof["calls"]) < 1e-5
    # planted: the table reads its own copy of the scales, one block's scale doubled
    planted = tmp_path / "planted" / "model.onnx"
    whole = onnx.load(str(model))
    scales = onnx.numpy_helper.to_array(next(t for t in whole.graph.initializer if t.name == gathers[0].input[2]))
    wrong = scales.copy()
    wrong[7, 0] *= 2
    whole.graph.initializer.append(onnx.numpy_helper.from_array(wrong, "planted_scales"))
    next(n for n in whole.graph.node if n.op_type == "GatherBlockQuantized").input[2] = "planted_scales"
    planted.parent.mkdir()
    onnx.save(whole, str(planted), save_as_external_data=True, location="model.onnx.data")
    judged = DecoderProof(ckpt / "config.json", ckpt, planted).run({"original": planted})
    assert judged["verdict"]["original"]["verdict"] == "not proven", judged["verdict"]
    assert max(c["models"]["original"]["rel"] for c in judged["calls"]) > 1e-3
