"""The float64 truth of a generation's calls computed once per run of calls that extend one another
(``oracle.chained_float64``): each call's logits equal its own whole recompute, and a run breaks exactly where some
row's regime changes (a LongRoPE switch, each new L of dynamic NTK), never inside a static schedule.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.oracle import Feed, Stored64, chained, chained_float64, decoders_float64, extends
from ropeexport.decoder.parts import position_pieces
from ropeexport.decoder.weights import seeded_weights
from tests.decoder.test_mixed_regimes import DYNAMIC
from tests.decoder.test_planted import LLAMA, MISTRAL, PHI3
from tests.decoder.tiny import CONFIGS as TINY
from tests.decoder.tiny import VL_CONFIGS
from tests.toolmod import tool

GEMMA3 = {"model_type": TINY["gemma3"][0], **TINY["gemma3"][1]}
BLOOM = {"model_type": "bloom", "vocab_size": 96, "n_layer": 2, "hidden_size": 32, "n_head": 4}
QWEN3_VL = {"model_type": VL_CONFIGS["qwen3_vl"][0], **VL_CONFIGS["qwen3_vl"][1]}  # position_ids [3, b, s] fed
# name -> (config, the runs a scenario's calls fall in: "one" for every scenario, or "regimes": a new run exactly
# where some row's regime differs from the call before's)
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "llama": (LLAMA, "one"),
    "mistral-window": (MISTRAL, "one"),
    "bloom-alibi": (BLOOM, "one"),
    "gemma3-two-tables": (GEMMA3, "one"),
    "qwen3-vl-mrope": (QWEN3_VL, "one"),
    "phi3-longrope": (PHI3, "regimes"),
    "llama-dynamic": (DYNAMIC, "regimes"),
}
# float64 sums of other lengths differ in their last bits (BLAS blocks a matrix product by its shape)
SAME = 1e-12


TRUTH_ROWS = tool("truth_rows")  # every scenario's calls through a stand-in runtime, and their feeds
_calls, _feeds = TRUTH_ROWS.calls, TRUTH_ROWS.feeds


@pytest.fixture(scope="module", params=list(CASES))
def decoder(request: pytest.FixtureRequest) -> tuple[str, Any, Stored64, list[Any]]:
    spec, _ = resolve(DecoderRequest(config=CASES[request.param][0], name=request.param))
    return request.param, spec, Stored64(spec, seeded_weights(spec)), position_pieces(spec)


def test_each_call_is_its_own_recompute(decoder: tuple[str, Any, Stored64, list[Any]]) -> None:
    _, spec, weights64, pieces = decoder
    for name, calls in _calls(spec):
        feeds = _feeds(calls)
        shared = chained_float64(spec, weights64, feeds, pieces)
        alone = decoders_float64(spec, weights64, feeds, pieces)
        for call, got, want in zip(calls, shared, alone, strict=True):
            assert got.shape == want.shape, (name, call.index)
            scale = float(np.abs(want).max())
            assert np.abs(got - want).max() <= SAME * scale, (name, call.index, np.abs(got - want).max() / scale)


def test_a_run_breaks_exactly_where_a_regime_changes(decoder: tuple[str, Any, Stored64, list[Any]]) -> None:
    label, spec, _, pieces = decoder
    runs_of = CASES[label][1]
    for name, calls in _calls(spec):
        starts = [run[0] for run in chained(spec, _feeds(calls), pieces)]
        if runs_of == "one":
            assert starts == [0], (name, starts)
        else:
            changed = [j for j in range(1, len(calls)) if calls[j].regimes != calls[j - 1].regimes]
            assert starts == [0, *changed], (name, starts, [c.regimes for c in calls])


def test_the_schedule_crossings_are_runs_of_their_own() -> None:
    """The scenarios that cross LongRoPE's switch or run above dynamic NTK's threshold do break (the table above is
    not vacuous), and a later call computed under the earlier call's tables would be wrong by more than the
    tolerance: what ``extends`` guards against.
    """  # noqa: D205
    for config, crossing in ((PHI3, "decode-across-switch"), (DYNAMIC, "decode-across-switch")):
        spec, _ = resolve(DecoderRequest(config=config, name="crossing"))
        pieces = position_pieces(spec)
        calls = dict(_calls(spec))[crossing]
        feeds = _feeds(calls)
        runs = chained(spec, feeds, pieces)
        assert len(runs) > 1, crossing
        j = runs[1][0]  # the first call under the new tables
        assert not extends(spec, feeds[j], feeds[j - 1], pieces)
        before = feeds[j - 1]
        weights64 = Stored64(spec, seeded_weights(spec))
        own = decoders_float64(spec, weights64, [before], pieces)[0]
        later = Feed(feeds[j].input_ids, feeds[j].position_ids, feeds[j].attention_mask, before.first)
        taken = decoders_float64(spec, weights64, [later], pieces)[0][:, : own.shape[1]]
        assert np.abs(taken - own).max() > 1e-4 * np.abs(own).max(), crossing  # the decoder tolerance, fp32


def test_a_different_token_or_batch_starts_a_new_run() -> None:
    spec, _ = resolve(DecoderRequest(config=LLAMA, name="llama"))
    pieces = position_pieces(spec)
    calls = dict(_calls(spec))["decode-64"]
    short, long = _feeds(calls)[:2]
    assert extends(spec, long, short, pieces)
    other = long.input_ids.copy()
    other[0, 0] = (other[0, 0] + 1) % spec.vocab_size
    assert not extends(spec, Feed(other, long.position_ids, long.attention_mask), short, pieces)
    moved = Feed(long.input_ids, long.position_ids + 1, long.attention_mask)
    assert not extends(spec, moved, short, pieces)
    twice = Feed(*(np.concatenate([a, a]) for a in (long.input_ids, long.position_ids, long.attention_mask)))
    assert not extends(spec, twice, short, pieces)
