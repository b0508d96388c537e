"""Gemma 4's shared key/value layers (``architectures.sharing``): which layer each reads, and the graph's cache.

The rule is transformers' own: each config's ``kv_from`` per layer is compared with what ``Gemma4TextConfig.
kv_sharing_modes`` says (the reusing layers read the storing layer of their type). The graph: a reusing layer has no
``past_key_values.{i}`` input or ``present.{i}`` output, and its attention reads the storing layer's cache input. The
decoders built from a tiny checkpoint and verified by generation against float64 and transformers are rows of
``test_decoder.py`` (gqa, gqa fp16; fused in the ``gemma4-ple`` row), ``test_quantized.py`` (int4) and
``test_serve.py`` (served).
"""

from __future__ import annotations

from typing import Any

import pytest

from ropeexport.architectures.sharing import cached_layers
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.export import build_decoder_graph
from ropeexport.decoder.genai import unservable
from ropeexport.decoder.weights import cache_shapes, expected, seeded_weights
from ropeexport.dtypes import DTYPES
from tests.decoder.tiny import CONFIGS

S, F = "sliding_attention", "full_attention"
ROPE = {S: {"rope_type": "default", "rope_theta": 1e4},
        F: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6}}  # as transformers saves it
# (name, layer_types, num_kv_shared_layers): the tiny checkpoint's, one shared layer, runs of one type, and a 35-layer
# stack of four sliding layers to one full with its last 20 shared (E2B's counts as its model card gives them)
RULE = [
    ("tiny-two-types", [S, F, S, F], 2),
    ("one-shared", [S, F, S, F], 1),
    ("runs", [S, S, F, S, S, F], 3),
    ("35-layers-20-shared", [S, S, S, S, F] * 7, 20),
]


def _config(types: list[str], shared: int, **more: Any) -> dict[str, Any]:
    return {**CONFIGS["gemma4"][1], "model_type": "gemma4_text", "num_hidden_layers": len(types), "layer_types": types,
            "num_kv_shared_layers": shared, "rope_parameters": ROPE, **more}  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("types", "shared"), [r[1:] for r in RULE], ids=[r[0] for r in RULE])
def test_each_shared_layer_reads_the_layer_transformers_names(types: list[str], shared: int) -> None:
    import transformers

    config = _config(types, shared)
    spec, _ = resolve(DecoderRequest(config=config))
    modes = transformers.AutoConfig.for_model(**config).kv_sharing_modes
    storing = {types[i]: i for i, mode in enumerate(modes) if mode == "store"}
    wanted = [storing[types[i]] if mode == "reuse" else None for i, mode in enumerate(modes)]
    assert [layer.attention.kv_from for layer in spec.layers] == wanted
    assert cached_layers(spec.layers) == [i for i, mode in enumerate(modes) if mode != "reuse"]


@pytest.mark.fast
@pytest.mark.parametrize("graph", ["fused", "gqa"])
def test_a_shared_layer_has_no_cache_and_attends_over_the_storing_layers(graph: str) -> None:
    spec, _ = resolve(DecoderRequest(config=_config([S, F, S, F], 2, use_double_wide_mlp=True), graph=graph))
    model = build_decoder_graph(spec, seeded_weights(spec), "seeded")
    inputs = [i.name for i in model.graph.input if i.name.startswith("past_key_values.")]
    outputs = [o.name for o in model.graph.output if o.name.startswith("present.")]
    assert inputs == [f"past_key_values.{i}.{t}" for i in (0, 1) for t in ("key", "value")]
    assert outputs == [f"present.{i}.{t}" for i in (0, 1) for t in ("key", "value")]
    kernel = "GroupQueryAttention" if graph == "gqa" else "Attention"
    for reader, stored in ((2, 0), (3, 1)):  # each reusing layer's attention reads the storing layer's cache
        (node,) = [n for n in model.graph.node if n.op_type == kernel and n.name.startswith(f"layers.{reader}/")]
        assert f"past_key_values.{stored}.key" in node.input and f"past_key_values.{stored}.value" in node.input
    names = expected(spec)  # no key or value weights of their own; the MLP twice as wide (use_double_wide_mlp)
    assert not any(f"layers.{i}.{w}" in names for i in (2, 3) for w in ("k_proj", "v_proj", "k_norm"))
    assert names["layers.2.up_proj"][1] == 2 * names["layers.0.up_proj"][1]
    # the cache one token adds: the storing layers' alone (layers 0 and 1: 2 x 8 and 1 x 16 wide, keys and values)
    width = DTYPES[spec.dtype].np_dtype(0).itemsize
    per_token = sum(2 * h * w * width for i in cached_layers(spec.layers) for h, w in cache_shapes(spec, i)[:1])
    every = sum(2 * h * w * width for i in range(spec.num_layers) for h, w in cache_shapes(spec, i)[:1])
    assert (per_token, every) == (2 * 4 * (2 * 8 + 1 * 16), 2 * 2 * 4 * (2 * 8 + 1 * 16))


@pytest.mark.fast
def test_onnxruntime_genai_refuses_layers_without_a_cache() -> None:
    spec, _ = resolve(DecoderRequest(config=_config([S, F, S, F], 2), graph="gqa"))
    assert unservable(spec).startswith("onnxruntime-genai feeds and fetches a cache pair past_key_values.%d")
    assert "layers 2-3 read an earlier layer's keys and values" in unservable(spec)
