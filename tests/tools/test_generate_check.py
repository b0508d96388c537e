"""tools/generate_check.py: ``ropeexport generate``'s greedy tokens judged against the float64 truth's argmax."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.toolmod import tool

# (label, the served tokens as the truth's argmax with these slots changed, the tolerance over the logit scale,
#  agreement, first divergence, whether that step is a near tie)
JUDGED = [
    ("every token the argmax", (), 1e-4, "4/4", None, None),
    ("the third token another", (2,), 1e-4, "3/4", 2, False),
    ("another within the tolerance", (2,), 1.0, "3/4", 2, True),
]


@pytest.mark.fast
@pytest.mark.parametrize(("label", "changed", "bound", "agreement", "first", "tie"), JUDGED, ids=[c[0] for c in JUDGED])
def test_a_generation_passes_only_when_every_token_is_the_truths_argmax(
    label: str, changed: tuple[int, ...], bound: float, agreement: str, first: int | None, tie: bool | None
) -> None:
    truth = np.random.default_rng(0).standard_normal((4, 10))  # [N, vocab]
    tokens = [int(t) for t in truth.argmax(-1)]
    for slot in changed:
        tokens[slot] = (tokens[slot] + 1) % 10
    run = {"position_offset": 100, "tokens": tokens, "prefill_tokens_per_second": 1.0, "decode_ms_per_token": 1.0}
    record = tool("generate_check").judged(run, truth, 3, bound)
    assert (record["agreement"], record["first_divergence"], record["passed"]) == (agreement, first, not changed)
    assert [d["near_tie"] for d in record["differ"]] == ([] if tie is None else [tie])
    assert record["positions"] == "100-106"  # 3 prompt tokens and 4 new ones
    ordered = np.sort(truth, axis=-1)
    assert record["margin_min"] == pytest.approx(float((ordered[:, -1] - ordered[:, -2]).min()))


@pytest.fixture(scope="module")
def served(seeded_decoder: Path) -> dict[str, Any]:
    """``ropeexport generate`` run once, as a user runs it (its own process), ending at the decoder's last position."""
    check = tool("generate_check")
    out: dict[str, Any] = {}

    def once(folder: Path, prompt: list[int], new: int, offset: int) -> dict[str, Any]:
        out.update(check.generated(folder, prompt, new, offset))
        return dict(out)

    check.check(seeded_decoder, None, [5, 6, 7, 8, 9, 10], 4, far=True, serve=once)
    return out


# (what the served generation is made, whether the float64 truth must agree, the first step that differs)
CHECKED = [("as generated", True, None), ("its second token replaced", False, 1)]


@pytest.mark.parametrize(("case", "agrees", "first_differing"), CHECKED, ids=[c[0] for c in CHECKED])
def test_the_served_tokens_are_checked_step_by_step_at_the_last_positions(
    seeded_decoder: Path, served: dict[str, Any], case: str, agrees: bool, first_differing: int | None
) -> None:
    tokens = list(served["tokens"])
    if not agrees:  # a server that picked another token at step 1 (and went on from the one it picked before)
        tokens[1] = (tokens[1] + 1) % 128

    def serve(folder: Path, prompt: list[int], new: int, offset: int) -> dict[str, Any]:
        assert (prompt, new, offset) == (served["prompt"], len(tokens), served["position_offset"])
        return {**served, "tokens": tokens}

    out = tool("generate_check").check(seeded_decoder, None, [5, 6, 7, 8, 9, 10], 4, far=True, serve=serve)
    (run,) = out["runs"]
    assert run["positions"] == f"{out['max_positions'] - 10}-{out['max_positions'] - 1}"  # the last new token's
    assert out["passed"] is agrees, run["differ"]
    assert run["first_divergence"] == first_differing, run["differ"]


# (engine, --prompt-length): each engine's own loop at positions 0 .. judged by the same truth (onnxruntime-genai
# takes no offset); --prompt-length's ids 1 .. N past the seeded vocabulary (128) taken into it
ENGINES = [("onnxruntime-genai", 6), ("ort", 140)]


@pytest.mark.parametrize(("engine", "length"), ENGINES, ids=[e[0] for e in ENGINES])
def test_each_engines_own_loop_is_judged_by_the_float64_truth(
    seeded_decoder: Path, tmp_path: Path, engine: str, length: int
) -> None:
    if engine == "onnxruntime-genai":
        pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai (the test extra) is the engine under test")
    out = tmp_path / "out.json"
    code = tool("generate_check").main([str(seeded_decoder), "--prompt-length", str(length), "--max-new-tokens", "4",
                                        "--engine", engine, "--json", str(out)])  # fmt: skip
    result = json.loads(out.read_text())
    run = result["runs"][0]  # ort also runs the generation ending at the last position
    assert (code, result["engine"], run["positions"]) == (0, engine, f"0-{length + 4 - 1}")
    assert len(result["runs"]) == (1 if engine == "onnxruntime-genai" else 2)
    assert max(result["prompt"]) < 128 and len(result["prompt"]) == length  # taken into the vocabulary
    assert all(r["agreement"] == "4/4" for r in result["runs"]), result["runs"]


# (argv past the folder, what the one line names): refused before anything runs, exit 2
REFUSED = [(["--far", "--engine", "onnxruntime-genai"], "--far"), (["--prompt-length", "0"], "--prompt-length"),
           (["--prompt-length", "3", "--prompt-ids", "1,2"], "--prompt-length")]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("argv", "named"), REFUSED, ids=[" ".join(r[0]) for r in REFUSED])
def test_what_the_tool_cannot_run_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    with pytest.raises(SystemExit) as stopped:
        tool("generate_check").main([str(tmp_path), *argv])
    assert stopped.value.code == 2
    assert named in capsys.readouterr().err.strip().splitlines()[-1]
