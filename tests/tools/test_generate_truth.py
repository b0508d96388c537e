"""tools/generate_truth.py: a built decoder's greedy generation to its last position against the float64 truth's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.toolmod import tool

# (what the runtime's generation is made, whether the float64 truth must agree, the first step that differs)
CASES = [("as generated", True, None), ("its second token replaced", False, 1)]


@pytest.mark.parametrize(("case", "agrees", "first_differing"), CASES, ids=[c[0] for c in CASES])
def test_the_runtimes_tokens_are_checked_step_by_step_at_the_last_positions(
    seeded_decoder: Path, monkeypatch: pytest.MonkeyPatch, case: str, agrees: bool, first_differing: int | None
) -> None:
    from ropeexport.decoder.serve import DecoderSession

    if not agrees:  # a runtime that picked another token at step 1 (and went on from the one it picked before)
        real = DecoderSession.generate

        def generate(self: DecoderSession, *args: Any, **kwargs: Any) -> Any:
            out = real(self, *args, **kwargs)
            tokens = list(out.tokens)
            tokens[1] = (tokens[1] + 1) % self.spec.vocab_size
            return replace(out, tokens=tokens)

        monkeypatch.setattr(DecoderSession, "generate", generate)
    out = tool("generate_truth").work(seeded_decoder, [5, 6, 7, 8, 9, 10], 4, True)
    assert out["last_position"] == out["max_positions"] - 1 == out["position_offset"] + 6 + 4 - 1
    assert out["equal"] is agrees, out["differ"]
    assert (out["differ"][0]["step"] if out["differ"] else None) == first_differing, out["differ"]
