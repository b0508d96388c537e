"""A multimodal wrapper's checkpoint (Qwen3.5's ``qwen3_5``, a vision tower beside the text model) read by the
transformers truth as its text model: the same layers read from its text_config, the same sizes, and the same float64
logits as a text-only checkpoint of the same weights. (Gemma 3n's wrapper, ``gemma3n``, is read the same way by
ropeexport, but its vision tower needs timm, which this environment does not install: not run here.)
"""  # noqa: D205

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.audits.hybrids import FAMILIES

VISION = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64,
          "patch_size": 4, "spatial_merge_size": 1, "temporal_patch_size": 1}  # fmt: skip


def _qwen3_5(folder: Path) -> tuple[Path, Path]:
    """A random ``qwen3_5`` wrapper checkpoint and a ``qwen3_5_text`` one of its text model's weights."""
    import torch
    import transformers

    _, text, *_ = FAMILIES["Qwen3.5"]
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model("qwen3_5", text_config=dict(text), vision_config=VISION)
    transformers.Qwen3_5ForConditionalGeneration(config).save_pretrained(folder / "wrapper")
    inner = transformers.AutoModelForCausalLM.from_pretrained(str(folder / "wrapper"))  # its text model's weights
    inner.save_pretrained(folder / "text")
    return folder / "wrapper", folder / "text"


# (wrapper model_type, its text model's, the two checkpoints)
WRAPPERS: list[tuple[str, str, Callable[[Path], tuple[Path, Path]]]] = [("qwen3_5", "qwen3_5_text", _qwen3_5)]


@pytest.mark.parametrize(("wrapper", "text", "make"), WRAPPERS, ids=[w[0] for w in WRAPPERS])
def test_a_wrappers_checkpoint_is_its_text_models_truth(wrapper: str, text: str,
                                                        make: Callable[[Path], tuple[Path, Path]],
                                                        tmp_path: Path) -> None:  # fmt: skip
    from ropeexport.audits.hf_truth import TransformersTruth
    from ropeexport.audits.truth import Call, call_ids

    outer, inner = make(tmp_path)
    assert json.loads((outer / "config.json").read_text())["model_type"] == wrapper
    assert json.loads((inner / "config.json").read_text())["model_type"] == text
    truths = [TransformersTruth(p / "config.json", p, "fp32") for p in (outer, inner)]
    named = [t.spec.position.name for t in truths]  # a spec is named after its checkpoint's folder: set aside
    shapes = [t.spec.__class__(**{**vars(t.spec), "position": t.spec.position.replace(name="")}) for t in truths]
    assert shapes[0] == shapes[1] and all(named)
    assert [{k: s.replace(name="") for k, s in t.specs.items()} for t in truths][0] == {
        k: s.replace(name="") for k, s in truths[1].specs.items()}
    assert truths[0].layers.types == truths[1].layers.types
    calls = [Call(k, past, "positions", call_ids(truths[0].spec.vocab_size, k, past, "positions"))
             for k, past in enumerate((0, 3000))]  # fmt: skip
    got = [t.logits(calls) for t in truths]
    for a, b in zip(*got, strict=True):
        assert np.abs(a).max() > 0 and np.array_equal(a, b)
