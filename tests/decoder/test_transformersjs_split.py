"""``decoder.transformersjs_split``: a decoder graph split into ``embed_tokens`` and ``decoder_model_merged``.

Tiny hand-made graphs shaped as a decoder's start (token lookups times a constant, then what reads them), driven by a
table: the two models run one after the other give the whole graph's outputs bit for bit, the embed model holds the
lookups alone, and a graph that reads ``input_ids`` any other way is refused naming the node. The whole Gemma 4
decoders run in transformers.js in ``test_transformersjs.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ropeexport.decoder.transformersjs_split import split
from ropeexport.errors import SpecError
from ropeexport.runtimes.ort import load_onnxruntime

VOCAB, HIDDEN, PER_LAYER = 11, 4, 6
_RNG = np.random.default_rng(0)
_TABLES = {"embed": _RNG.standard_normal((VOCAB, HIDDEN)).astype(np.float32),
           "embed_per_layer": _RNG.standard_normal((VOCAB, PER_LAYER)).astype(np.float32),
           "embed_scale": np.float32(2.0), "per_layer_embed_scale": np.float32(0.5),
           "project": _RNG.standard_normal((HIDDEN, PER_LAYER)).astype(np.float32),
           "head": _RNG.standard_normal((HIDDEN, VOCAB)).astype(np.float32)}  # fmt: skip


def _model(nodes: list[onnx.NodeProto], outputs: list[str]) -> onnx.ModelProto:
    """A graph of ``nodes`` over input_ids [batch, seq] and _TABLES, its ``outputs`` float [batch, seq, ?]."""
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    outs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", "seq", None]) for name in outputs]
    used = {i for n in nodes for i in n.input}
    tables = [numpy_helper.from_array(np.asarray(v), k) for k, v in _TABLES.items() if k in used]
    graph = helper.make_graph(nodes, "decoder", [ids], outs, tables)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)  # ORT 1.31 reads <= 13


def _lookup(table: str, scale: str, out: str) -> list[onnx.NodeProto]:
    return [helper.make_node("Gather", [table, "input_ids"], [f"{out}_raw"], name=f"{out}_gather"),
            helper.make_node("Mul", [f"{out}_raw", scale], [out], name=f"{out}_mul")]  # fmt: skip


def _plain() -> onnx.ModelProto:
    return _model([*_lookup("embed", "embed_scale", "h"), helper.make_node("MatMul", ["h", "head"], ["logits"])],
                  ["logits"])  # fmt: skip


def _per_layer() -> onnx.ModelProto:  # Gemma 4's per-layer inputs: the token's own row plus a projection of h
    return _model([*_lookup("embed", "embed_scale", "h"), *_lookup("embed_per_layer", "per_layer_embed_scale", "p"),
                   helper.make_node("MatMul", ["h", "project"], ["hp"]), helper.make_node("Add", ["hp", "p"], ["q"]),
                   helper.make_node("MatMul", ["h", "head"], ["logits"])], ["logits", "q"])  # fmt: skip


def _ids_read_elsewhere() -> onnx.ModelProto:
    shape = helper.make_node("Shape", ["input_ids"], ["ids_shape"], name="reads_ids")
    return _model([*_lookup("embed", "embed_scale", "h"), shape, helper.make_node("MatMul", ["h", "head"], ["logits"])],
                  ["logits"])  # fmt: skip


def _unscaled() -> onnx.ModelProto:
    gather = helper.make_node("Gather", ["embed", "input_ids"], ["h"], name="bare_gather")
    return _model([gather, helper.make_node("MatMul", ["h", "head"], ["logits"])], ["logits"])


# (case, the graph, the embed model's outputs, or the words of the refusal)
CASES: list[tuple[str, Callable[[], onnx.ModelProto], list[str] | str]] = [
    ("embeddings alone", _plain, ["inputs_embeds"]),
    ("with per-layer inputs", _per_layer, ["inputs_embeds", "per_layer_inputs"]),
    ("input_ids read by another node", _ids_read_elsewhere, "node 'reads_ids' (Shape)"),
    ("a lookup not times a scale", _unscaled, "node 'bare_gather' (Gather)"),
]


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    ort = load_onnxruntime()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


@pytest.mark.fast
@pytest.mark.parametrize(("case", "make", "expected"), CASES, ids=[c[0] for c in CASES])
def test_the_split_gives_the_graphs_outputs_or_is_refused(
    case: str, make: Callable[[], onnx.ModelProto], expected: list[str] | str
) -> None:
    model = make()
    before = model.SerializeToString()
    if isinstance(expected, str):
        with pytest.raises(SpecError, match="cannot be split") as refused:
            split(model)
        assert expected in str(refused.value), refused.value
        return
    embed, decoder = split(model)
    assert model.SerializeToString() == before  # the decoder's own graph is not changed
    onnx.checker.check_model(embed)
    onnx.checker.check_model(decoder)
    assert [v.name for v in embed.graph.output] == expected
    assert {n.op_type for n in embed.graph.node} == {"Gather", "Mul"}
    assert [v.name for v in decoder.graph.input] == expected  # input_ids is gone; what the embed model gives is fed
    ids = np.array([[3, 0, 10, 7]], np.int64)
    whole = _run(model, {"input_ids": ids})
    parts = _run(decoder, _run(embed, {"input_ids": ids}))
    assert whole.keys() == parts.keys()
    for name in whole:
        np.testing.assert_array_equal(parts[name], whole[name])
