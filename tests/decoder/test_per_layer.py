"""Gemma 4's per-layer input embeddings (``decoder.per_layer``): read from the config as transformers reads it, and
the graph against its float64 twin. The decoder built from a tiny checkpoint and verified by generation against float64
and transformers is ``test_decoder.py``'s ``gemma4-ple`` row (with shared key/value layers, as E2B / E4B have both).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.export import build_decoder_graph, cache_names
from ropeexport.decoder.oracle import decoder_float64, stored_float64
from ropeexport.decoder.parts import position_pieces
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.decoder.weights import cache_shapes, seeded_weights
from tests.decoder.test_shared_kv import ROPE
from tests.decoder.tiny import VARIANTS

PLE = {**VARIANTS["gemma4-ple"][1], "model_type": "gemma4_text", "rope_parameters": ROPE}
# (config changes, the spec's (per_layer_input, per_layer_vocab)): given, absent (the config class's 256 and 262144),
# and off (0)
READ = [
    ("given", {}, (4, 96)),
    ("class-defaults", {"hidden_size_per_layer_input": None, "vocab_size_per_layer_input": None}, (256, 262144)),
    ("off", {"hidden_size_per_layer_input": 0}, (0, 0)),
]


@pytest.mark.fast
@pytest.mark.parametrize(("changes", "wanted"), [r[1:] for r in READ], ids=[r[0] for r in READ])
def test_per_layer_inputs_are_read_as_transformers_reads_them(changes: dict[str, Any], wanted: tuple) -> None:
    config = {k: v for k, v in {**PLE, **changes}.items() if v is not None}
    spec, _ = resolve(DecoderRequest(config=config))
    assert (spec.per_layer_input, spec.per_layer_vocab) == wanted
    assert DecoderSpec.from_dict(spec.to_dict()) == spec  # decoder.json round-trips them


def _logits(spec: DecoderSpec, weights: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
    model = build_decoder_graph(spec, weights, "seeded")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds: dict[str, np.ndarray] = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                    "position_ids": np.arange(ids.shape[1])[None]}  # fmt: skip
    for i in {i for i in range(spec.num_layers) if spec.layers[i].attention.kv_from is None}:
        for name, (heads, width) in zip(cache_names(i)[:2], cache_shapes(spec, i), strict=True):
            feeds[name] = np.zeros((1, heads, 0, width), np.float32)
    return session.run(["logits"], feeds)[0].astype(np.float64)


@pytest.mark.fast
@pytest.mark.parametrize("graph", ["fused", "gqa"])
def test_the_per_layer_graph_matches_its_float64_twin(graph: str) -> None:
    spec, _ = resolve(DecoderRequest(config=PLE, graph=graph))
    weights = seeded_weights(spec)
    ids = np.random.default_rng(0).integers(0, spec.vocab_size, (1, 7))
    got = _logits(spec, weights, ids)
    truth = decoder_float64(spec, stored_float64(spec, weights), ids, np.arange(7)[None], np.ones_like(ids),
                            pieces=position_pieces(spec))  # fmt: skip
    scale = float(np.abs(truth).max())
    assert float(np.abs(got - truth).max()) <= 1e-4 * scale
    # the per-layer term is there to be judged: the same weights with every layer's term zero are far from the truth
    dropped = {k: 0 * v if k.endswith(".per_layer_projection") else v for k, v in weights.items()}
    assert float(np.abs(_logits(spec, dropped, ids) - truth).max()) > 1e-2 * scale
