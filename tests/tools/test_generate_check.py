"""tools/generate_check.py's verdict: a generation passes when every new token is the float64 truth's argmax."""

from __future__ import annotations

import numpy as np
import pytest

from tests.toolmod import tool

# (label, the served tokens as the truth's argmax with these slots changed, agreement, first divergence)
CASES = [
    ("every token the argmax", (), "4/4", None),
    ("the third token another", (2,), "3/4", 2),
]


@pytest.mark.fast
@pytest.mark.parametrize(("label", "changed", "agreement", "first"), CASES, ids=[c[0] for c in CASES])
def test_a_generation_passes_only_when_every_token_is_the_truths_argmax(
    label: str, changed: tuple[int, ...], agreement: str, first: int | None
) -> None:
    truth = np.random.default_rng(0).standard_normal((4, 10))  # [N, vocab]
    tokens = [int(t) for t in truth.argmax(-1)]
    for slot in changed:
        tokens[slot] = (tokens[slot] + 1) % 10
    run = {"position_offset": 100, "tokens": tokens, "prefill_tokens_per_second": 1.0, "decode_ms_per_token": 1.0}
    record = tool("generate_check").judged(run, truth, 3)
    assert (record["agreement"], record["first_divergence"], record["passed"]) == (agreement, first, not changed)
    assert record["positions"] == "100-106"  # 3 prompt tokens and 4 new ones
    ordered = np.sort(truth, axis=-1)
    assert record["margin_min"] == pytest.approx(float((ordered[:, -1] - ordered[:, -2]).min()))
