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


# (engine, prompt, wrap): each engine's generation at positions 0 .. judged by the same truth (onnxruntime-genai
# takes no offset); --prompt-length's ids 1 .. N past the vocabulary (128) wrapped into it
ENGINES = [("onnxruntime-genai", [5, 6, 7, 8, 9, 10], False), ("ort", list(range(1, 141)), True)]


@pytest.mark.parametrize(("engine", "prompt", "wrap"), ENGINES, ids=[e[0] for e in ENGINES])
def test_each_engines_own_loop_is_judged_by_the_float64_truth(
    seeded_decoder: Path, engine: str, prompt: list[int], wrap: bool
) -> None:
    if engine == "onnxruntime-genai":
        pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai (the test extra) is the engine under test")
    out = tool("generate_truth").work(seeded_decoder, prompt, 4, False, engine, wrap)
    assert out["engine"] == engine and out["position_offset"] == 0 and out["last_position"] == len(prompt) + 4 - 1
    assert len(out["runtime"]["tokens"]) == 4 and out["equal"] is True, out["differ"]


# (argv past the folder, what the one line names): refused before any worker runs, exit 2
REFUSED = [(["--prompt-ids", "1,2", "--far", "--engine", "onnxruntime-genai"], "--far"),
           (["--prompt-length", "0"], "--prompt-length")]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("argv", "named"), REFUSED, ids=[r[1] for r in REFUSED])
def test_what_the_tool_cannot_run_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    with pytest.raises(SystemExit) as stopped:
        tool("generate_truth").main([str(tmp_path), *argv])
    assert stopped.value.code == 2
    assert named in capsys.readouterr().err.strip().splitlines()[-1]
