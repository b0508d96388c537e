"""The ``deepseek_v32`` (DeepSeek V3.2) and ``glm_moe_dsa`` (GLM-5) architectures: their configs read as
transformers 5.23 reads them, their layers (GLM-5's: its shared indexer layers as ``GlmMoeDsaConfig`` derives them).

Each row is a tiny config; every field read (DeepSeek V3's and the indexer's) is compared with transformers' own
``DeepseekV32Config`` of the same keys, the logit scale with ``DeepseekV32Attention.scaling``, each layer's MLP kind
with the config's ``mlp_layer_types`` as transformers fills it, and the indexer's widths with
``DeepseekV32Indexer``'s. Bad keys are one SpecError naming the key (the CLI's exit 2:
``tests/decoder/test_bad_decoder_inputs.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from ropeexport.architectures.deepseek_v3 import FIELDS
from tests.architectures.reading import assert_refused, read_both

transformers = pytest.importorskip("transformers")

TINY = {"model_type": "deepseek_v32", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
        "moe_intermediate_size": 16, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
        "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "q_lora_rank": 16,
        "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8, "index_topk": 4,
        "index_head_dim": 16, "index_n_heads": 2, "first_k_dense_replace": 1,
        "max_position_embeddings": 256}  # fmt: skip

# (label, the config's changes to TINY (None: the key left out))
CASES: list[tuple[str, dict[str, Any]]] = [
    ("the indexer's keys given, the first layer dense (first_k_dense_replace)", {}),
    ("the indexer's keys and first_k_dense_replace left out: DeepseekV32Config's defaults (2048, 128, 64; 3 dense)",
     {"index_topk": None, "index_head_dim": None, "index_n_heads": None, "first_k_dense_replace": None}),
    ("mlp_layer_types given (transformers reads it), agreeing with no first_k_dense_replace",
     {"first_k_dense_replace": None, "mlp_layer_types": ["sparse", "dense", "sparse"]}),
]  # fmt: skip


def _config(changes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (TINY | changes).items() if v is not None}


@pytest.mark.fast
@pytest.mark.parametrize(("label", "changes"), CASES, ids=[c[0] for c in CASES])
def test_the_config_reads_as_transformers_reads_it(label: str, changes: dict[str, Any]) -> None:
    from transformers.models.deepseek_v32 import modeling_deepseek_v32 as modeling

    config = _config(changes)
    arch, fields, sources, theirs = read_both(config, transformers.DeepseekV32Config)
    for key, name, _ in FIELDS:
        assert fields[name] == getattr(theirs, key), f"{label}: {key}"
    for key in ("index_topk", "index_head_dim", "index_n_heads"):
        assert fields[key] == getattr(theirs, key), f"{label}: {key}"
        assert sources[key] == key if key in config else "DeepseekV32Config" in sources[key], (label, sources[key])
    attention = modeling.DeepseekV32Attention(theirs, 0)
    assert fields["attn_scale"] == pytest.approx(attention.scaling, rel=1e-15), label
    fields["position"] = {"num_heads": 4, "num_kv_heads": 1, "head_dim": 8}  # the encoding's, as ``hf`` reads it
    layer = arch.default_layer(fields)
    a, index = layer.attention, attention.indexer
    assert (a.kind, a.index_topk, a.index_n_heads, a.index_head_dim, a.index_layout) == (
        "latent", index.index_topk, index.n_heads, index.head_dim, "half"), label  # fmt: skip
    assert arch.changes is not None
    per_layer, _ = arch.changes(config, "config.json", {"num_layers": config["num_hidden_layers"]})
    kinds = ["dense" if layer.with_fields(c).ffn.kind == "gated" else "sparse" for c in per_layer]
    assert kinds == theirs.mlp_layer_types, label
    assert layer.cache_shapes("fused", "latent") == ((1, 16), (1, 8), (1, index.head_dim))  # the indexer's keys third


# (label, the config's changes, the key the one-line error names)
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("index_topk 0", {"index_topk": 0}, "index_topk"),
    ("index_n_heads not an integer", {"index_n_heads": 2.5}, "index_n_heads"),
    ("index_head_dim below qk_rope_head_dim (the indexer rotates its first 8 dims)", {"index_head_dim": 6},
     "index_head_dim"),
    ("q_lora_rank null (the attention and its indexer read the query LoRA)", {"q_lora_rank": None}, "q_lora_rank"),
    ("first_k_dense_replace contradicting mlp_layer_types (transformers reads the latter)",
     {"mlp_layer_types": ["sparse", "dense", "sparse"]}, "first_k_dense_replace"),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("label", "changes", "key"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_bad_key_is_named(label: str, changes: dict[str, Any], key: str) -> None:
    config = {**_config({}), **changes}  # None kept: q_lora_rank null is a value here
    assert_refused(config, "v32", key, label)


# GLM-5 (glm_moe_dsa): DeepSeek V3.2's layers, its indexer's RoPE interleaved, "shared" layers reusing the previous
# full layer's selection. (label, the config's changes to TINY): indexer_types as GlmMoeDsaConfig derives them.
GLM = {**TINY, "model_type": "glm_moe_dsa", "num_hidden_layers": 5}
GLM_CASES: list[tuple[str, dict[str, Any]]] = [
    ("indexer_types given", {"indexer_types": ["full", "shared", "shared", "full", "shared"]}),
    ("index_topk_pattern", {"index_topk_pattern": "FSFSS"}),
    ("index_topk_freq 2 from offset 1", {"index_topk_freq": 2, "index_skip_topk_offset": 1}),
    ("nothing said: every layer full (freq 1)", {}),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("label", "changes"), GLM_CASES, ids=[c[0] for c in GLM_CASES])
def test_glm5s_shared_indexer_layers_are_transformers(label: str, changes: dict[str, Any]) -> None:
    config = {**GLM, **changes}
    arch, fields, _, theirs = read_both(config, transformers.GlmMoeDsaConfig)
    fields["position"] = {"num_heads": 4, "num_kv_heads": 1, "head_dim": 8}
    layer = arch.default_layer(fields)
    assert (layer.attention.index_layout, fields["index_n_heads"]) == ("interleaved", theirs.index_n_heads), label
    assert arch.changes is not None
    per_layer, _ = arch.changes(config, "config.json", {"num_layers": config["num_hidden_layers"]})
    shared = ["shared" if layer.with_fields(c).attention.index_shared else "full" for c in per_layer]
    assert shared == theirs.indexer_types, label
    assert [len(layer.with_fields(c).cache_shapes("fused")) for c in per_layer] == [
        2 if k == "shared" else 3 for k in shared]  # a shared layer caches no indexer keys  # fmt: skip


GLM_REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("a shared first layer (no selection before it)", {"index_topk_pattern": "SFFFF"}, "index_topk_pattern"),
    ("indexer_types of the wrong length", {"indexer_types": ["full", "shared"]}, "indexer_types"),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("label", "changes", "key"), GLM_REFUSED, ids=[r[0] for r in GLM_REFUSED])
def test_glm5s_bad_indexer_types_are_named(label: str, changes: dict[str, Any], key: str) -> None:
    assert_refused({**GLM, **changes}, "glm5", key, label)
