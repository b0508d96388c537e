"""Each layer's cache geometry, read from one place (``LayerSpec.cache_shapes``) by every site that shapes a cache.

A latent layer (DeepSeek's MLA) caches keys nope + rope wide and values v_head_dim wide (or the latent and the rope
key); a standard layer's key and value are both [KV, head_dim]. The table says what each layer and form caches; the
latent rows agree with the component's own ``LatentSpec.cache_shapes``. A decoder whose layers differ in geometry
declares each layer's own cache in its graph and is served (``DecoderSession``, which allocated the default layer's
cache for every layer before) with the logits of one uncached run.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ropeexport.architectures.feedforward import FeedForward
from ropeexport.architectures.layers import AttentionLayer, LayerSpec
from ropeexport.components.latent import LatentSpec
from ropeexport.components.norm import NormSpec
from ropeexport.decoder import serve
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.export import build_decoder_graph, cache_names
from ropeexport.decoder.genai import genai_config, unservable
from ropeexport.decoder.weights import cache_shapes, seeded_weights
from ropeexport.errors import SpecError
from ropeexport.graph.onnx_io import save_model
from ropeexport.runtimes.ort import OrtRunner

MLP = FeedForward("gated", "silu", 48)
STANDARD = AttentionLayer(4, 2, 8)
# DeepSeek V3's widths, shrunk: 4 heads, rope 8 (head_dim), nope 8 (nope + rope 16: gqa's head size a multiple
# of 8), v 12, latent 24, query LoRA 20
LATENT = AttentionLayer(4, 4, 8, kind="latent", q_lora_rank=20, kv_lora_rank=24, qk_nope_head_dim=8, v_head_dim=12)

# (label, attention, graph, cache) -> ((key heads, key width), (value heads, value width))
CASES: list[tuple[str, AttentionLayer, str, str, tuple[tuple[int, int], tuple[int, int]]]] = [
    ("standard", STANDARD, "fused", "expanded", ((2, 8), (2, 8))),
    ("standard, gqa", STANDARD, "gqa", "expanded", ((2, 8), (2, 8))),
    ("standard, as computed", STANDARD, "", "expanded", ((2, 8), (2, 8))),
    ("latent expanded, decomposed", LATENT, "decomposed", "expanded", ((4, 16), (4, 12))),
    ("latent expanded, fused", LATENT, "fused", "expanded", ((4, 16), (4, 12))),
    ("latent expanded, gqa: values padded to the key's width", LATENT, "gqa", "expanded", ((4, 16), (4, 16))),
    ("latent expanded, as computed", LATENT, "", "expanded", ((4, 16), (4, 12))),
    ("latent cache: the latent and the rope key", LATENT, "decomposed", "latent", ((1, 24), (1, 8))),
    # Mistral Large 4's NoPE latent layer (no position): the rope slice is part of the nope one, its rope key 0 wide
    ("latent cache, NoPE: a rope key 0 wide", LATENT, "decomposed", "latent", ((1, 24), (1, 0))),
    ("latent expanded, NoPE: the same widths", LATENT, "decomposed", "expanded", ((4, 16), (4, 12))),
]


@functools.cache
def _piece() -> Any:
    """A rope piece over LATENT's rope slice (8 wide, one key head): what a RoPE latent layer rotates by."""
    import ropeexport as rx
    from ropeexport.catalog import recipe_for

    spec = rx.spec("rope", artifact="block", head_dim=8, num_heads=4, num_kv_heads=1, max_positions=64,
                   graph="decomposed")  # fmt: skip
    return recipe_for(spec).piece_of(spec)


@pytest.mark.fast
@pytest.mark.parametrize(("label", "attention", "graph", "cache", "shapes"), CASES, ids=[c[0] for c in CASES])
def test_a_layers_cache_shapes(label: str, attention: AttentionLayer, graph: str, cache: str,
                               shapes: tuple[tuple[int, int], tuple[int, int]]) -> None:  # fmt: skip
    nope = "NoPE" in label
    layer = LayerSpec(attention, MLP, position=None if nope else {"encoding": "rope"})
    assert layer.cache_shapes(graph, cache) == shapes, label
    if attention.kind == "latent" and graph:  # the component caches what the layer says
        a = attention
        widths = (a.qk_nope_head_dim + a.head_dim, 0) if nope else (a.qk_nope_head_dim, a.head_dim)
        piece = None if nope else _piece()
        component = LatentSpec(a.num_heads, a.kv_lora_rank, *widths, a.v_head_dim, NormSpec("rms", 1e-6, "fp32"),
                               q_lora_rank=a.q_lora_rank, cache=cache, graph=graph, position=piece)  # fmt: skip
        declared = [(int(s[1]), int(s[3])) for s in component.cache_shapes().values()]
        assert tuple(declared) == shapes, label


@pytest.mark.fast
def test_an_unknown_latent_cache_is_named() -> None:
    with pytest.raises(SpecError) as error:
        LayerSpec(LATENT, MLP).cache_shapes("fused", "compressed")
    assert error.value.field == "latent_cache"


LLAMA = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 3, "intermediate_size": 48, "vocab_size": 96, "max_position_embeddings": 256}  # fmt: skip


def _mixed(graph: str) -> Any:
    """LLAMA with layer 1 of 2 heads of 16, 1 key/value head (Gemma 4's per-layer head_dim)."""
    spec, _ = resolve(DecoderRequest(config=LLAMA, graph=graph, name="cache-shapes"))
    wider = {**spec.position, "num_heads": 2, "num_kv_heads": 1, "head_dim": 16}
    return spec.replace(layers=[{}, {"position": wider}, {}])


@pytest.mark.parametrize("graph", ["fused", "gqa", "decomposed"])
def test_a_mixed_geometry_decoder_declares_and_serves_each_layers_cache(
    graph: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _mixed(graph)
    weights = seeded_weights(spec)
    model = build_decoder_graph(spec, weights, "seeded")
    declared = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.input}
    for i in range(spec.num_layers):
        for name, (heads, width) in zip(cache_names(i)[:2], cache_shapes(spec, i), strict=True):
            assert declared[name] == ["batch", heads, "past", width], name
    assert cache_shapes(spec, 1) == ((1, 16), (1, 16)) and cache_shapes(spec, 0) == ((2, 8), (2, 8))
    save_model(model, tmp_path)
    # The session serves the folder's model; its spec is given here, not read from a built folder's decoder.json.
    monkeypatch.setattr(serve, "check_folder", lambda folder: ({"config": dict(LLAMA)}, spec))
    session = serve.DecoderSession(tmp_path, threads=1)
    ids = np.random.default_rng(0).integers(0, spec.vocab_size, 7)
    session.append(ids[:5])
    session.append(ids[5:6])
    served = session.append(ids[6:7]).copy()  # [1, vocab]: token 6 after two cached calls
    feeds: dict[str, np.ndarray] = {"input_ids": ids[None].astype(np.int64),
                                    "attention_mask": np.ones((1, 7), np.int64),
                                    "position_ids": np.arange(7, dtype=np.int64)[None]}  # fmt: skip
    for i in range(spec.num_layers):
        for name, (heads, width) in zip(cache_names(i)[:2], cache_shapes(spec, i), strict=True):
            feeds[name] = np.zeros((1, heads, 0, width), np.float32)
    whole = OrtRunner(tmp_path / "model.onnx", providers=["CPUExecutionProvider"]).infer(feeds)["logits"][0, -1:]
    np.testing.assert_allclose(served, whole, rtol=0, atol=1e-4)


# DeepSeek V3's shape, tiny (tests/decoder/tiny.py's deepseek_v3 widths: 4 heads, keys 8 nope + 8 rope, values 8, latent
# 16; one dense layer, one of experts): per form and cache, each layer's (key, value) cache as the graph
# declares it, and the bytes one token adds to a layer's cache in fp16 (the widths summed over heads, 2 bytes each).
DEEPSEEK = {"model_type": "deepseek_v3", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 48,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "moe_intermediate_size": 16,
            "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
            "first_k_dense_replace": 1, "q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
            "qk_rope_head_dim": 8, "v_head_dim": 8, "head_dim": 8, "max_position_embeddings": 256}  # fmt: skip
DEEPSEEK_CACHES = [
    ("expanded, decomposed: keys nope + rope, values v", "decomposed", False, ((4, 16), (4, 8)), 2 * 4 * (16 + 8)),
    ("expanded, gqa: values padded to the key's width", "gqa", False, ((4, 16), (4, 16)), 2 * 4 * (16 + 16)),
    ("latent: the normed latent and the rotated rope key", "decomposed", True, ((1, 16), (1, 8)), 2 * (16 + 8)),
]


@pytest.mark.fast
@pytest.mark.parametrize(("label", "graph", "latent", "shapes", "per_token"), DEEPSEEK_CACHES,
                         ids=[c[0] for c in DEEPSEEK_CACHES])  # fmt: skip
def test_a_deepseek_decoders_cache_bytes_a_token_read_from_its_graph(label: str, graph: str, latent: bool,
                                                                     shapes: Any, per_token: int) -> None:  # fmt: skip
    spec, _ = resolve(DecoderRequest(config=DEEPSEEK, graph=graph, dtype="fp16", latent_cache=latent))
    assert spec.latent_cache is latent and spec.name.endswith("-latent") is latent, label
    model = build_decoder_graph(spec, seeded_weights(spec), "seeded")
    declared = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.input}
    for i in range(spec.num_layers):
        key, value = (declared[name] for name in cache_names(i)[:2])
        assert (tuple(key[1::2]), tuple(value[1::2])) == shapes, (label, i)
        assert key[0::2] == value[0::2] == ["batch", "past"]
        assert 2 * (key[1] * key[3] + value[1] * value[3]) == per_token, (label, i)


# (label, the spec, a fragment of why onnxruntime-genai gets no genai_config.json, or "" when it gets one): its config
# says one head geometry and one [KV, head_size] cache for every layer, so a decoder whose layers differ (Gemma 4's)
# or that has latent attention (DeepSeek V3's, even where nope 0 makes the widths agree) is not packaged for it
GENAI = [
    ("llama: one geometry", lambda: resolve(DecoderRequest(config=LLAMA))[0], ""),
    ("layer 1 of its own head_dim (Gemma 4's)", lambda: _mixed("fused"), "one head geometry for every layer"),
    ("deepseek_v3, gqa", lambda: resolve(DecoderRequest(config=DEEPSEEK, graph="gqa"))[0], "layer 0's latent"),
    ("deepseek_v3, latent cache", lambda: resolve(DecoderRequest(config=DEEPSEEK, graph="decomposed",
                                                                 latent_cache=True))[0], "layer 0's latent"),
    ("deepseek_v3 with nope 0: widths agree", lambda: resolve(DecoderRequest(config={**DEEPSEEK, "qk_nope_head_dim": 0},
                                                                             graph="fused"))[0], "layer 0's latent"),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("label", "make", "why"), GENAI, ids=[c[0] for c in GENAI])
def test_onnxruntime_genai_gets_a_config_only_for_one_cache_geometry(label: str, make: Any, why: str) -> None:
    spec = make()
    said = unservable(spec)
    assert (why in said) if why else said == "", (label, said)
    if why:  # genai_config itself refuses it, naming the layers
        with pytest.raises(SpecError) as refused:
            genai_config(spec, {})
        assert refused.value.field == "layers" and refused.value.message == said
    else:
        decoder = genai_config(spec, {})["model"]["decoder"]
        assert decoder["num_key_value_heads"] == spec.layers[0].attention.num_kv_heads
