"""The ``mistral_large4_text`` architecture (Mistral Large 4): its config read as transformers 5.23 reads it.

Each row is a tiny text config; every field read is compared with transformers' own ``MistralLarge4TextConfig`` of
the same keys, the logit scale with its attention's ``scaling``, the layers' MLP kinds with ``mlp_layer_types``, the
NoPE layers with ``no_rope_layers``, and the latent cache each reusing layer reads with the one transformers hands it
(measured: ``KVSharingDict`` watched through a forward pass, a config planted where it is not
``kv_source_layers[i]``). LeRoPE's frequencies are compared with transformers' rotary module's in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ropeexport.architectures import architecture
from ropeexport.architectures.deepseek_v3 import FIELDS
from ropeexport.architectures.mistral_large4_text import kv_sources
from ropeexport.architectures.sharing import cached_layers

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TINY = {"model_type": "mistral_large4_text", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
        "moe_intermediate_size": 16, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "kv_lora_rank": 16,
        "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8, "index_topk": 64, "index_head_dim": 16,
        "index_n_heads": 2, "max_position_embeddings": 64,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                            "original_max_position_embeddings": 16, "attention_factor": 1.0}}  # fmt: skip

# (label, the config's changes to TINY (None: the key left out))
CASES: list[tuple[str, dict[str, Any]]] = [
    ("defaults: layer 3 NoPE (every 4th), layer 0 dense (first_k_dense_replace 1), no sharing", {}),
    ("kv_source_layers [0, 1, 0, 1]: layers 2 and 3 both read layer 1 (the last storing RoPE layer)",
     {"no_rope_layers": [1, 1, 1, 1], "kv_source_layers": [0, 1, 0, 1], "routed_scaling_factor": 2.0}),
    ("a NoPE pair sharing: layer 3 reads layer 1; mlp_layer_types beside first_k_dense_replace (unread)",
     {"no_rope_layers": [1, 0, 1, 0], "kv_source_layers": [0, 1, 2, 1], "first_k_dense_replace": 2,
      "mlp_layer_types": ["dense", "sparse", "dense", "sparse"]}),
    ("indexer_types: layer 1 shared, layer 2 reads layer 1's latent with its own indexer (reuse_but_indexer)",
     {"no_rope_layers": [1, 1, 1, 0], "kv_source_layers": [0, 1, 1, 3], "indexer_types": ["full", "shared", "full",
                                                                                          "full"]}),
    ("index_topk_pattern FSSF: layers 1 and 2 shared (the reusing layer 2 then caches nothing of its own)",
     {"no_rope_layers": [1, 1, 1, 1], "kv_source_layers": [0, 1, 1, 3], "index_topk_pattern": "FSSF"}),
]  # fmt: skip


def _config(changes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (TINY | changes).items() if v is not None}


def _reads(theirs: Any) -> list[int | None]:
    """The layer whose latent each layer attends to in transformers (None: its own), watched through a forward
    pass: the tensor each ``shared_kv_states`` read hands out, matched to the layer that stored it.
    """  # noqa: D205
    from transformers.cache_utils import KVSharingDict
    from transformers.models.mistral_large4.modeling_mistral_large4 import MistralLarge4TextModel

    model = MistralLarge4TextModel(theirs).eval()
    current, stored, reads = [0], {}, [None] * theirs.num_hidden_layers
    for i, layer in enumerate(model.layers):
        layer.self_attn.register_forward_pre_hook(lambda *_, i=i: current.__setitem__(0, i))
    get, put = KVSharingDict.__getitem__, KVSharingDict.__setitem__

    def watched_get(self: Any, key: str) -> Any:
        value = get(self, key)
        reads[current[0]] = stored[id(value[0])]
        return value

    def watched_put(self: Any, key: str, value: Any) -> None:
        stored[id(value[0])] = current[0]
        put(self, key, value)

    try:
        KVSharingDict.__getitem__, KVSharingDict.__setitem__ = watched_get, watched_put  # type: ignore[method-assign]
        with torch.no_grad():
            model(input_ids=torch.tensor([[1, 2, 3]]))
    finally:
        KVSharingDict.__getitem__, KVSharingDict.__setitem__ = get, put  # type: ignore[method-assign]
    return reads


@pytest.mark.parametrize(("label", "changes"), CASES, ids=[c[0] for c in CASES])
def test_the_config_reads_as_transformers_reads_it(label: str, changes: dict[str, Any]) -> None:
    from ropeexport.decoder.config import from_config

    config = _config(changes)
    fields, sources = architecture(config).layout(config)
    theirs = transformers.MistralLarge4TextConfig(**{k: v for k, v in config.items() if k != "model_type"})
    for key, name, _ in FIELDS:
        if key != "norm_topk_prob":  # not a field of the config: always renormalised (the router's)
            assert fields[name] == getattr(theirs, key), f"{label}: {key}"
    assert fields["index_topk"] == theirs.index_topk and fields["final_softcap"] == theirs.final_logit_softcapping
    attention = transformers.models.mistral_large4.modeling_mistral_large4.MistralLarge4TextAttention(theirs, 0)
    assert fields["attn_scale"] == pytest.approx(attention.scaling, rel=1e-15), label
    spec = from_config(config, "large4", graph="decomposed")
    assert [layer.ffn.kind == "gated" for layer in spec.layers] == [k == "dense" for k in theirs.mlp_layer_types]
    assert {layer.ffn.router for layer in spec.layers if layer.ffn.kind == "moe"} <= {"grouped_softmax"}
    assert [layer.position is not None for layer in spec.layers] == [bool(f) for f in theirs.no_rope_layers]
    reads = [layer.attention.kv_from for layer in spec.layers]
    assert reads == kv_sources(config, theirs.num_hidden_layers) == _reads(theirs), label
    said = theirs.kv_source_layers
    planted = [i for i, j in enumerate(reads) if j is not None and j != said[i]]
    assert bool(planted) == ("layers 2 and 3" in label), (label, planted)  # where the two differ, transformers' holds
    # the indexer: its widths, its shared layers, and which layers keep a cache of their own (transformers'
    # kv_sharing_modes: every mode but "reuse", "reuse_but_indexer" keeping its indexer keys)
    a = spec.layers[0].attention
    assert (a.index_topk, a.index_n_heads, a.index_head_dim) == (theirs.index_topk, theirs.index_n_heads,
                                                                 theirs.index_head_dim), label  # fmt: skip
    assert [layer.attention.index_shared for layer in spec.layers] == [t == "shared" for t in theirs.indexer_types]
    assert cached_layers(spec.layers) == [i for i, m in enumerate(theirs.kv_sharing_modes) if m != "reuse"], label


@pytest.mark.fast
def test_lerope_frequencies_are_transformers_in_float64() -> None:
    # The yarn schedule times exp(alpha) (families.rope.schedules) against MistralLarge4TextRotaryEmbedding's
    # inv_freq * alpha.exp(), recomputed in float64 (transformers multiplies in float32: the buffers widened first)
    from transformers.models.mistral_large4.modeling_mistral_large4 import MistralLarge4TextRotaryEmbedding

    from ropeexport.families.rope.schedules import get_schedule

    config = transformers.MistralLarge4TextConfig(**{k: v for k, v in TINY.items() if k != "model_type"})
    rotary = MistralLarge4TextRotaryEmbedding(config)
    alpha = np.random.default_rng(3).standard_normal(4) * 0.3
    theirs = rotary.original_inv_freq.double().numpy() * np.exp(alpha)
    params = {k: v for k, v in TINY["rope_parameters"].items() if k not in ("rope_type", "rope_theta")}
    schedule = get_schedule("yarn")
    resolved = schedule.resolve(params | {"alpha": list(alpha)}, 8, 64)
    ours = schedule.frequencies(8, 1e4, resolved, 64)
    np.testing.assert_allclose(ours.inv_freq, theirs, rtol=1e-6)  # transformers' inv_freq buffer is float32
    assert ours.attention_factor == rotary.attention_scaling == 1.0
    plain = schedule.frequencies(8, 1e4, schedule.resolve(params, 8, 64), 64).inv_freq
    assert not np.allclose(plain, theirs, rtol=1e-3)  # alpha moves them: the comparison sees it


@pytest.mark.fast
def test_a_reusing_layer_keeps_only_its_indexer_cache_and_its_bytes_are_saved() -> None:
    # The tiny checkpoint's layers (tests/decoder/tiny.py LATENT_TEXT): layer 2 reads layer 0's latent with its own
    # indexer (transformers' reuse_but_indexer), layer 1's indexer shared (no indexer keys), layer 3 NoPE (its rope
    # key 0 wide); indexer keys 16 wide: (16 + 8 + 16) + (16 + 8) + 16 + (16 + 16) floats a token
    from ropeexport.decoder.config import from_config
    from ropeexport.decoder.export import layer_caches
    from ropeexport.decoder.weights import cache_bytes_per_token
    from tests.decoder.tiny import LATENT_TEXT

    config = {"model_type": "mistral_large4_text", **LATENT_TEXT["mistral_large4"][1]}
    spec = from_config(config, "large4", graph="decomposed").replace(latent_cache=True)
    assert cached_layers(spec.layers) == [0, 1, 2, 3]
    assert [past for past, *_ in layer_caches(spec, 2)] == ["past_key_values.2.index_key"]
    assert [past for past, *_ in layer_caches(spec, 1)] == ["past_key_values.1.key", "past_key_values.1.value"]
    unshared = from_config({**config, "kv_source_layers": None}, "large4", graph="decomposed").replace(
        latent_cache=True)  # fmt: skip
    assert cache_bytes_per_token(spec) == 4 * ((16 + 8 + 16) + (16 + 8) + 16 + (16 + 16))
    assert cache_bytes_per_token(unshared) - cache_bytes_per_token(spec) == 4 * (16 + 8)  # layer 2's latent, saved


def test_the_dsa_indexer_keeps_every_key_up_to_index_topk_in_transformers() -> None:
    # Where the indexer starts to matter (module doc of architectures.mistral_large4_text): transformers' indexer
    # keeps min(index_topk, T) of a query's T keys, so up to index_topk every key is kept (the masked future keys of
    # a prefill among them) and the output is the dense model's bit for bit; one key more and the indexer drops some
    # (the output moves). The indexer's weights are random, as the model's.
    from transformers.models.mistral_large4.modeling_mistral_large4 import MistralLarge4TextModel

    config = transformers.MistralLarge4TextConfig(**{k: v for k, v in TINY.items() if k != "model_type"})
    torch.manual_seed(0)
    model = MistralLarge4TextModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)

    def run(ids: list[int], topk: int) -> Any:
        for layer in model.layers:
            layer.self_attn.indexer.index_topk = topk
        with torch.no_grad():
            return model(input_ids=torch.tensor([ids])).last_hidden_state

    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5]
    assert torch.equal(run(ids[:8], 8), run(ids[:8], 64))  # T = 8 = index_topk: every key kept
    assert not torch.allclose(run(ids, 8), run(ids, 64), atol=1e-4)  # T = 9: the indexer drops keys


def test_the_indexers_rotation_carries_lerope_alpha(tiny_checkpoint) -> None:  # noqa: ANN001
    # transformers hands the indexer the attention's one cos / sin (LeRoPE's, alpha in it): each RoPE layer's indexer
    # piece has the attention piece's schedule, alpha included, in its own layout and heads; a NoPE layer's none
    import json

    from ropeexport.decoder.build import DecoderRequest, resolve
    from ropeexport.decoder.parts import index_pieces, position_pieces

    spec, _ = resolve(DecoderRequest(checkpoint=tiny_checkpoint("mistral_large4"), graph="decomposed",
                                     latent_cache=True))  # fmt: skip
    said = lambda piece: json.loads({p.key: p.value for p in piece.rotary.metadata_props}["ropeexport.spec"])  # noqa: E731
    index, attention = index_pieces(spec), position_pieces(spec)
    assert [p is None for p in index] == [False, True, False, True]  # layer 1 shared, layer 3 NoPE
    for i in (0, 2):
        ours, theirs = said(index[i]), said(attention[i])
        assert any(ours["scaling_params"]["alpha"]) and ours["scaling_params"] == theirs["scaling_params"], i
        assert (ours["layout"], ours["num_heads"], ours["num_kv_heads"]) == ("interleaved", 16, 1), ours


@pytest.mark.parametrize("shard", [b"", b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":1}"], ids=["empty", "bad-header"])
def test_a_shard_beside_the_config_that_does_not_read_is_one_line_naming_it(
    shard: bytes, tmp_path: Any, tiny_checkpoint: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # LeRoPE's alpha is read from the safetensors beside config.json (hf.learned_rope): a truncated or foreign shard
    # there is the user's bad input, one line naming the file, exit 2 (it had been safetensors' traceback)
    from ropeexport.cli import main

    (tmp_path / "config.json").write_bytes((tiny_checkpoint("mistral_large4") / "config.json").read_bytes())
    (tmp_path / "model.safetensors").write_bytes(shard)
    capsys.readouterr()  # the session's checkpoint writer's progress, when this test made it
    assert main(["build", "--hf-config", str(tmp_path / "config.json"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"ropeexport: error: {tmp_path / 'model.safetensors'}: "), err
    assert "is not a safetensors file that reads" in err and not (tmp_path / "out").exists(), err
