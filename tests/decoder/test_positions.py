"""Positions as typed inputs (``ropeexport.positions``), turned into tables once per distinct encoding.

A decoder declares its position input from ``DecoderSpec.positions`` and hands every layer the [batch, seq] rows; a
table is stored once per distinct encoding (``tests/decoder/test_layers.py``), and where the form looks rows up with
Gather (the decomposed form), ONNX Runtime's optimizer leaves one lookup per table for the whole model, however many
layers read it: cos and sin are computed once per model and encoding, as transformers' and onnxruntime-genai's model
builders compute them. The fused forms hand the shared tables to each RotaryEmbedding, which indexes them itself.
A feed of another rank is refused, never broadcast.
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.export import build_decoder_graph
from ropeexport.decoder.weights import seeded_weights
from ropeexport.errors import RuntimeInputError
from ropeexport.graph.onnx_io import save_model
from ropeexport.positions import ONE_AXIS, PositionInputs
from ropeexport.runtimes.ort import OrtRunner

CONFIG = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "num_hidden_layers": 4, "intermediate_size": 96, "vocab_size": 96,
          "max_position_embeddings": 512}  # fmt: skip
LOCAL = {"attention": "sliding", "window": 8}


def _lookups(model: onnx.ModelProto) -> collections.Counter[str]:
    """The nodes reading a cos/sin table, by op type, in the main graph and every subgraph."""
    tables = {t.name for t in model.graph.initializer if t.name.endswith(("cos_table", "sin_table"))}
    found: collections.Counter[str] = collections.Counter()

    def walk(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            found.update(node.op_type for _ in range(len(set(node.input) & tables)))
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    walk(attribute.g)

    walk(model.graph)
    return found


# (label, each layer as to_dict writes it (a "position" table: changes to the model's), distinct encodings)
CASES = [("four layers, one encoding", (), 1),
         ("Gemma 3's two encodings", [{**LOCAL, "position": {"theta": 1e4}}, {"position": {"theta": 1e6}}] * 2, 2)]


@pytest.mark.parametrize(("label", "layers", "encodings"), CASES, ids=[c[0] for c in CASES])
def test_tables_are_looked_up_once_per_encoding_where_the_runtime_runs_them(
    label: str, layers: list[dict[str, object]], encodings: int, tmp_path: Path
) -> None:
    spec, _ = resolve(DecoderRequest(config=CONFIG, graph="decomposed", name="positions"))
    if layers:
        layers = [{**layer, "position": {**spec.position, **layer["position"]}} for layer in layers]  # type: ignore[dict-item]
        spec = spec.replace(layers=layers)
    model = build_decoder_graph(spec, seeded_weights(spec), "seeded")
    written = _lookups(model)
    assert written == {"Gather": 2 * spec.num_layers}, label  # as written: each layer its own cos and sin lookups
    save_model(model, tmp_path)
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(tmp_path / "model.onnx"), options, providers=["CPUExecutionProvider"])
    assert _lookups(onnx.load(str(tmp_path / "optimized.onnx"))) == {"Gather": 2 * encodings}, label


def test_a_decoder_declares_its_position_input_and_refuses_another_rank(tmp_path: Path) -> None:
    spec, _ = resolve(DecoderRequest(config=CONFIG, name="positions"))
    assert spec.positions == ONE_AXIS and ONE_AXIS.dims == ["batch", "seq"]
    model = build_decoder_graph(spec, seeded_weights(spec), "seeded")
    declared = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    assert declared[spec.positions.name] == spec.positions.dims
    save_model(model, tmp_path)
    runner = OrtRunner(tmp_path / "model.onnx", providers=["CPUExecutionProvider"])
    feeds = {"input_ids": np.ones((1, 3), np.int64), "attention_mask": np.ones((1, 3), np.int64),
             "position_ids": np.zeros((3, 1, 3), np.int64)}  # multi-axis positions fed to a one-axis model
    for i in range(spec.num_layers):
        feeds |= {f"past_key_values.{i}.{n}": np.zeros((1, 2, 0, 16), np.float32) for n in ("key", "value")}
    with pytest.raises(RuntimeInputError, match="position_ids: expected rank 2"):
        runner.infer(feeds)
    assert PositionInputs(axes=3).dims == [3, "batch", "seq"]
