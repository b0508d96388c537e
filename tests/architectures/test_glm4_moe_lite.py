"""The ``glm4_moe_lite`` architecture (GLM-4.7-Flash): its config read as transformers reads it, its layers.

Each row is a tiny config (keys left out fall back to Glm4MoeLiteConfig's defaults, not DeepSeek V3's); every field
read is compared with transformers' own ``Glm4MoeLiteConfig`` of the same keys, the logit scale with
``Glm4MoeLiteAttention.scaling``, and each layer's MLP kind with the config's ``mlp_layer_types`` as transformers
fills it (``Glm4MoeLiteDecoderLayer`` builds the mixture where it says ``"sparse"``). Bad keys are one SpecError
naming the key.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from ropeexport.architectures.deepseek_v3 import FIELDS
from ropeexport.errors import SpecError
from tests.architectures.reading import assert_refused, read_both

transformers = pytest.importorskip("transformers")

TINY = {"model_type": "glm4_moe_lite", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
        "moe_intermediate_size": 16, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
        "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
        "mlp_layer_types": ["sparse", "dense", "sparse"], "q_lora_rank": 16, "kv_lora_rank": 16,
        "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 12, "max_position_embeddings": 256}  # fmt: skip
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "mscale": 0.707,
        "mscale_all_dim": 0.707, "rope_theta": 10000.0}  # fmt: skip

# (label, the config's changes to TINY (None: the key left out))
CASES: list[tuple[str, dict[str, Any]]] = [
    ("a dense layer between sparse ones (mlp_layer_types)", {}),
    ("mlp_layer_types left out: layer 0 dense, the rest sparse; router fields at GLM's defaults (not V3's)",
     {"mlp_layer_types": None, "n_group": None, "topk_group": None, "routed_scaling_factor": None,
      "norm_topk_prob": None, "n_shared_experts": None}),
    ("YaRN with mscale pairs: the softmax scale times mscale squared; first_k_dense_replace agreeing",
     {"rope_parameters": YARN, "mlp_layer_types": None, "first_k_dense_replace": 1}),
]  # fmt: skip


def _config(changes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (TINY | changes).items() if v is not None}


@pytest.mark.fast
@pytest.mark.parametrize(("label", "changes"), CASES, ids=[c[0] for c in CASES])
def test_the_config_reads_as_transformers_reads_it(label: str, changes: dict[str, Any]) -> None:
    config = _config(changes)
    arch, fields, sources, theirs = read_both(config, transformers.Glm4MoeLiteConfig)
    for key, name, _ in FIELDS:
        assert fields[name] == getattr(theirs, key), f"{label}: {key}"
        said = sources[name]
        assert said == key if key in config else "Glm4MoeLiteConfig" in said, (label, key, said)
    attention = transformers.models.glm4_moe_lite.modeling_glm4_moe_lite.Glm4MoeLiteAttention(theirs, 0)
    assert fields["attn_scale"] == pytest.approx(attention.scaling, rel=1e-15), label
    fields["position"] = {"num_heads": 4, "num_kv_heads": 1, "head_dim": 8}  # the encoding's, as ``hf`` reads it
    layer = arch.default_layer(fields)
    f = layer.ffn
    assert (layer.attention.kind, layer.attention.v_head_dim, f.router, f.groups, f.scaling, f.shared) == (
        "latent", theirs.v_head_dim, "grouped", theirs.n_group, theirs.routed_scaling_factor,
        theirs.n_shared_experts)  # fmt: skip
    assert arch.changes is not None
    per_layer, _ = arch.changes(config, "config.json", {"num_layers": config["num_hidden_layers"]})
    kinds = ["dense" if layer.with_fields(c).ffn.kind == "gated" else "sparse" for c in per_layer]
    assert kinds == theirs.mlp_layer_types, label
    widths = [layer.with_fields(c).ffn.inner for c in per_layer]
    assert widths == [theirs.intermediate_size if k == "dense" else theirs.moe_intermediate_size for k in kinds]


# (label, the config's changes, the key the one-line error names)
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("mlp_layer_types of the wrong length", {"mlp_layer_types": ["dense", "sparse"]}, "mlp_layer_types"),
    ("mlp_layer_types of an unknown kind", {"mlp_layer_types": ["dense", "moe", "sparse"]}, "mlp_layer_types"),
    ("first_k_dense_replace contradicting mlp_layer_types (transformers reads the latter only)",
     {"first_k_dense_replace": 1}, "first_k_dense_replace"),
    ("a partial rotary factor on the rope slice (transformers' rotation cannot apply it)",
     {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
     "rope_parameters.partial_rotary_factor"),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("label", "changes", "key"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_bad_key_is_named(label: str, changes: dict[str, Any], key: str) -> None:
    assert_refused(_config(changes), "glm", key, label)


@pytest.mark.fast
def test_a_tiny_model_of_the_full_config_keeps_its_first_layers_mlps() -> None:
    # transformers saves mlp_layer_types, one entry per layer (47 at its defaults): --num-layers keeps the first ones
    from ropeexport.decoder.config import from_config, shrink

    full = transformers.Glm4MoeLiteConfig().to_dict()
    tiny = shrink(full, num_layers=3, vocab_size=64)
    assert tiny["mlp_layer_types"] == full["mlp_layer_types"][:3] == ["dense", "sparse", "sparse"]
    spec = from_config(tiny, "glm")
    assert [layer.ffn.kind for layer in spec.layers] == ["gated", "moe", "moe"]


# (label, transformers' default config of the type, --hidden-size, heads then, or the key a refusal names): latent
# attention's rotary width is qk_rope_head_dim (64 in both), not hidden / heads (GLM-4.7-Flash's 2048 / 20 is 102.4:
# every width was refused as no multiple of 102); DeepSeek V3's config says it as head_dim
SHRINKS = [("glm4_moe_lite", "Glm4MoeLiteConfig", 512, 8),
           ("glm4_moe_lite, not a multiple of 64", "Glm4MoeLiteConfig", 500, "qk_rope_head_dim (64)"),
           ("deepseek_v3 as before", "DeepseekV3Config", 512, 8)]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("label", "kind", "hidden", "heads"), SHRINKS, ids=[s[0] for s in SHRINKS])
def test_a_latent_attention_config_shrinks_its_width_by_the_rotary_part_of_its_heads(
    label: str, kind: str, hidden: int, heads: int | str
) -> None:
    from ropeexport.decoder.config import from_config, shrink

    full = getattr(transformers, kind)().to_dict()
    if isinstance(heads, str):
        with pytest.raises(SpecError, match=rf"must be a multiple of {re.escape(heads)}") as error:
            shrink(full, num_layers=2, hidden_size=hidden, vocab_size=64)
        assert error.value.field == "hidden_size"
        return
    tiny = shrink(full, num_layers=2, hidden_size=hidden, vocab_size=64)
    attention = from_config(tiny, "tiny").layers[1].attention
    assert (tiny["hidden_size"], attention.num_heads, attention.num_kv_heads) == (hidden, heads, heads)
    assert (attention.kind, attention.head_dim, attention.qk_nope_head_dim) == (
        "latent", full["qk_rope_head_dim"], full["qk_nope_head_dim"])  # each head's geometry kept
