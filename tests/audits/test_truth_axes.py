"""The transformers truth of Qwen3.5 (``audits.hf_truth``) given M-RoPE position axes that differ, as a picture's
positions make them (issue 41: only equal axes, text's, had been tried; the patched module refused any other).

The truth's own calls feed text positions ([b, s]: three equal axes); a model fed [3, b, s] or transformers' [4, b, s]
(text, then temporal, height, width) with axes that differ must get each frequency its own axis's float64 angle,
recomposed as transformers' module recomposes them. Checked against transformers' own model in float64, whose
angles are float32 (about 6e-8 x position rad off: nothing at 16 positions), on a tiny random Qwen3.5 text model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.audits.hybrids import FAMILIES

N = 16  # tokens: a 4 x 4 picture's grid


def _text(n: int) -> Any:
    import torch

    return torch.arange(n).reshape(1, n)


def _grid(n: int) -> Any:  # [3, 1, n]: one frame (temporal 2), rows and columns of a 4-wide grid from 5
    import torch

    i = torch.arange(n)
    return torch.stack((torch.full((n,), 2), 5 + i // 4, 5 + i % 4)).reshape(3, 1, n)


# (the positions fed, whether their axes differ)
AXES: list[tuple[str, Callable[[int], Any], bool]] = [  # text's [1, s]: test_truth.py's calls
    ("equal axes [3, 1, s]", lambda n: _text(n).expand(3, 1, n), False),
    ("picture [3, 1, s]", _grid, True),
    ("text + picture [4, 1, s]", lambda n: __import__("torch").cat((_text(n)[None], _grid(n))), True),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """(the truth's model: float64, exact angles; transformers' own model in float64) of a random Qwen3.5."""
    transformers = pytest.importorskip("transformers")
    import torch

    from ropeexport.audits import hf_truth

    model_type, fields, *_ = FAMILIES["Qwen3.5"]
    folder = tmp_path_factory.mktemp("qwen3_5")
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, **fields)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    truth = hf_truth.TransformersTruth(folder / "config.json", folder, "fp32")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float64,
                                                               attn_implementation="eager").eval()  # fmt: skip
    return truth.load(), theirs


def _logits(model: Any, positions: Any) -> np.ndarray:
    import torch

    from ropeexport.audits.hf_truth import float64_throughout

    ids = torch.from_numpy(np.random.default_rng(7).integers(0, 160, (1, N)))
    with torch.no_grad(), float64_throughout():
        out = model(input_ids=ids, position_ids=positions, attention_mask=torch.ones(1, N, dtype=torch.int64),
                    use_cache=False).logits  # fmt: skip
    return out[0].numpy()


@pytest.mark.parametrize(("positions", "differ"), [(p, d) for _, p, d in AXES], ids=[a[0] for a in AXES])
def test_the_qwen3_5_truth_follows_each_axis_as_transformers_does(positions: Callable[[int], Any], differ: bool,
                                                                  models: tuple[Any, Any]) -> None:  # fmt: skip
    truth, theirs = models
    ours, want = _logits(truth, positions(N)), _logits(theirs, positions(N))
    scale = np.max(np.abs(want))
    assert np.max(np.abs(ours - want)) / scale < 1e-6, np.max(np.abs(ours - want)) / scale
    # the axes are read: a picture's positions give other logits than text's
    moved = np.max(np.abs(ours - _logits(truth, _text(N)))) / scale
    assert (moved > 1e-3) if differ else (moved < 1e-12), moved
