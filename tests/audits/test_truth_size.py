"""The transformers truth's size guard: the float64 model's bytes estimated from the config before anything is
loaded, and a model over the memory it may take refused in one line naming the size and the flag that raises it.
"""  # noqa: D205

from __future__ import annotations

from typing import Any

import pytest

from ropeexport.audits.hf_truth import GIB, check_size, float64_bytes
from ropeexport.errors import SpecError

TINY = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_hidden_layers": 2}  # fmt: skip

# (name, the config class and causal LM of transformers, the config's fields)
MODELS: list[tuple[str, str, str, dict[str, Any]]] = [
    ("llama, untied head", "LlamaConfig", "LlamaForCausalLM", TINY | {"tie_word_embeddings": False}),
    ("llama, tied head (counted once)", "LlamaConfig", "LlamaForCausalLM", TINY | {"tie_word_embeddings": True}),
    ("qwen3", "Qwen3Config", "Qwen3ForCausalLM", TINY | {"head_dim": 8}),
]


@pytest.mark.parametrize(("name", "config_class", "model_class", "fields"), MODELS, ids=[m[0] for m in MODELS])
def test_the_estimate_is_the_float64_models_own_bytes(name: str, config_class: str, model_class: str,
                                                      fields: dict[str, Any]) -> None:  # fmt: skip
    import torch
    import transformers

    config = getattr(transformers, config_class)(**fields)
    cls = getattr(transformers, model_class)
    model = cls._from_config(config, dtype=torch.float64)
    held = {id(t): t for t in (*model.parameters(), *model.buffers())}.values()
    built = sum(t.numel() * t.element_size() for t in held)
    assert all(t.dtype == torch.float64 for t in model.parameters())
    assert float64_bytes(cls, config) == built


# (name, the limit in GiB, None: allowed, else the words of the refusal)
LIMITS: list[tuple[str, float | None, list[str] | None]] = [
    ("under the limit", 1.0, None),
    ("over the limit", 1e-6, ["truth_gib", "LlamaForCausalLM", "GiB of weights", "--truth-gib 1e-06",
                              "--truth-gib above"]),
    ("zero", 0.0, ["truth_gib", "must be a positive number of GiB"]),
    ("negative", -1.0, ["truth_gib", "must be a positive number of GiB"]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "gib", "words"), LIMITS, ids=[c[0] for c in LIMITS])
def test_a_model_over_the_limit_is_refused_before_loading(name: str, gib: float | None,
                                                          words: list[str] | None) -> None:  # fmt: skip
    import transformers

    config = transformers.LlamaConfig(**TINY)
    if words is None:
        size = check_size(transformers.LlamaForCausalLM, config, gib)
        assert 0 < size <= (gib or 0) * GIB
        return
    with pytest.raises(SpecError) as refused:
        check_size(transformers.LlamaForCausalLM, config, gib)
    assert all(w in str(refused.value) for w in words), str(refused.value)
    assert "\n" not in str(refused.value)
