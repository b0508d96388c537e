"""Planted mistakes a decoder exporter makes, each caught by the generation check and by the scenario that should.

Each row exports a decoder with one thing wrong (the spec it was built from differs from the truth's) and verifies
it against the true spec: the listed scenarios must fail, and the verdict must be failed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ropeexport.catalog import recipe_for
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.export import build_decoder_graph
from ropeexport.decoder.verify import verify_decoder
from ropeexport.decoder.weights import seeded_weights
from ropeexport.graph.onnx_io import save_model
from ropeexport.report.views import ScenarioRecord
from ropeexport.runtimes.ort import OrtRunner

_LONGROPE = {"type": "longrope", "short_factor": [1.0, 1.1, 1.2, 1.3], "long_factor": [2.0, 3.0, 4.0, 5.0]}
LLAMA = {
    "model_type": "llama",
    "hidden_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "intermediate_size": 48,
    "vocab_size": 96,
    "max_position_embeddings": 256,
}
PHI3 = {**LLAMA, "model_type": "phi3", "original_max_position_embeddings": 64, "rope_scaling": _LONGROPE}
MISTRAL = {**LLAMA, "model_type": "mistral", "sliding_window": 6}  # fmt: skip
# Ministral 3: YaRN x4 over 64 positions and the query scale's steps at 64, 128 and 192
MINISTRAL3 = {**LLAMA, "model_type": "ministral3", "rope_parameters": {
    "rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6, "original_max_position_embeddings": 64,
    "llama_4_scaling_beta": 0.1}}  # fmt: skip


# Llama 4: layers 0-2 chunked over 8 slots with RoPE and the L2 q/k norm, layer 3 NoPE with the temperature (a step
# every 4 positions); experts on layers 1 and 3
LLAMA4 = {**LLAMA, "model_type": "llama4_text", "num_hidden_layers": 4, "head_dim": 8, "intermediate_size": 24,
          "intermediate_size_mlp": 48, "num_local_experts": 4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
          "attention_chunk_size": 8, "floor_scale": 4, "attn_scale": 0.1}  # fmt: skip


def _layers(change: Callable[[Any, Any], dict[str, Any]]) -> Callable[[Any], Any]:
    """Every layer with the fields ``change(spec, layer)`` gives it."""
    return lambda spec: spec.replace(layers=[layer.with_fields(change(spec, layer)) for layer in spec.layers])


def _query_scale(**changes: Any) -> Callable[[Any], Any]:
    return lambda spec: spec.replace(query_scale=None if changes.get("drop") else {**spec.default.query_scale,
                                                                                    **changes})


def _position(**changes: Any) -> Callable[[Any], Any]:
    return lambda spec: spec.replace(position={**spec.position, **changes})


CASES: list[tuple[str, dict[str, Any], Callable[[Any], Any], set[str]]] = [
    ("theta off by 1%", LLAMA, lambda s: _position(theta=s.position["theta"] * 1.01)(s),
     {"decode-64", "far-positions"}),
    ("sliding window ignored", MISTRAL, lambda s: s.replace(sliding_window=0), {"decode-64", "left-padded"}),
    ("LongRoPE without its schedule", PHI3, _position(scaling="default", scaling_params={}),
     {"far-positions", "decode-across-switch"}),
    ("interleaved pairs for half pairs", LLAMA, _position(layout="interleaved"), {"decode-64", "chunked-prefill"}),
    ("no sliding window where one is", LLAMA, lambda s: s.replace(sliding_window=4), {"decode-64"}),
    # Ministral 3's query scale dropped (a Mistral exporter's), its steps over the extended length, or a beta 20% off
    ("query scale dropped", MINISTRAL3, _query_scale(drop=True),
     {"far-positions", "query-scale-step-128", "query-scale-step-192", "prompt-across-switch"}),
    ("query scale over factor x original", MINISTRAL3, _query_scale(original_max_position_embeddings=256),
     {"far-positions", "query-scale-step-128", "query-scale-step-192"}),
    ("query scale's beta 20% off", MINISTRAL3, _query_scale(beta=0.12), {"far-positions", "query-scale-step-192"}),
    # Llama 4's chunk boundaries off by one (chunks of 9), its NoPE layer rotated, its temperature dropped
    ("chunks one slot too long", LLAMA4, _layers(lambda s, layer: {"window": 9} if layer.chunk else {}),
     {"decode-64", "chunked-prefill"}),
    ("NoPE layer rotated", LLAMA4, _layers(lambda s, layer: {"position": dict(s.position)} if layer.position is None
                                           else {}), {"decode-64"}),
    ("temperature dropped", LLAMA4, _layers(lambda s, layer: {"query_scale": None}), {"decode-64", "far-positions"}),
]  # fmt: skip


@pytest.mark.parametrize(("label", "config", "wrong", "caught_by"), CASES, ids=[c[0] for c in CASES])
def test_planted_decoder_mistake_fails(
    label: str, config: dict[str, Any], wrong: Callable[[Any], Any], caught_by: set[str], tmp_path: Path
) -> None:
    spec, _ = resolve(DecoderRequest(config=config, name="planted"))
    weights = seeded_weights(spec)
    save_model(build_decoder_graph(wrong(spec), weights, "seeded"), tmp_path)
    position = spec.position_spec()
    runner = OrtRunner(tmp_path / "model.onnx", providers=["CPUExecutionProvider"])
    results = verify_decoder(runner.infer, spec, weights, recipe_for(position).piece(position))
    failed = {r.name for r in map(ScenarioRecord, results) if not r.passed}
    assert caught_by <= failed, f"{label}: failed only {sorted(failed)}"
