"""A mixture of experts' calls judged against the routing they took (``decoder.verify``, its module doc).

A runtime stands in here as the float64 truth with one token routed the other way: at a near tie (its k-th and
(k + 1)-th router logits within the tolerance of its scale) the verification finds that routing and judges the call
against it; at a token that is no near tie, nothing excuses it and the call fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.greedy import Call
from ropeexport.decoder.oracle import Routing, decoder_float64, stored_float64
from ropeexport.decoder.parts import position_pieces
from ropeexport.decoder.verify import _routed, judge_call
from ropeexport.decoder.weights import seeded_weights
from ropeexport.report.views import CallRecord

CONFIG = {"model_type": "gpt_oss", "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 8, "num_hidden_layers": 2, "intermediate_size": 48, "vocab_size": 96, "num_local_experts": 4,
          "num_experts_per_tok": 2, "sliding_window": 6, "max_position_embeddings": 256,
          "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 150000.0,
                              "original_max_position_embeddings": 64}}  # fmt: skip
TOLERANCE = 2e-2  # fp16's: its near ties are what a runtime in fp16 may route either way


@pytest.fixture(scope="module")
def setting() -> tuple:  # type: ignore[type-arg]
    spec, _ = resolve(DecoderRequest(config=CONFIG, dtype="fp16"))
    weights64 = stored_float64(spec, seeded_weights(spec))
    pieces = position_pieces(spec)

    def truth(ids, pos, mask, flips=frozenset(), bound=0.0, ties=None):  # noqa: ANN001, ANN202
        routing = Routing(flips, bound, ties if ties is not None else [])
        return decoder_float64(spec, weights64, ids, pos, mask, pieces=pieces, routing=routing)

    ids = np.random.default_rng(0).integers(0, spec.vocab_size, (2, 40))  # 160 routings: 5 near ties at fp16's bound
    pos, mask = np.tile(np.arange(40), (2, 1)), np.ones((2, 40), np.int64)
    ties: list = []
    truth(ids, pos, mask, frozenset(), TOLERANCE, ties)
    return truth, ids, pos, mask, ties


def _call(ids: np.ndarray, pos: np.ndarray, mask: np.ndarray, logits: np.ndarray) -> Call:
    return Call(0, "prefill", ids, pos, mask, 0, logits, "base", None)


def test_a_runtime_that_took_a_near_tie_the_other_way_is_judged_against_that_routing(setting: tuple) -> None:  # type: ignore[type-arg]
    truth, ids, pos, mask, ties = setting
    assert ties, "the seeded model has no near tie at fp16's bound (the case this test is for)"
    plain = truth(ids, pos, mask)
    # a near tie whose flip shows against the float64 routing: past fp16's bound
    for tie in sorted(ties, key=lambda t: t[3]):
        layer, row, slot, margin = tie
        flip = (layer, row, slot)
        call = _call(ids, pos, mask, truth(ids, pos, mask, frozenset({flip})))
        if not CallRecord(judge_call(call, plain, None, TOLERANCE)).passed:
            break
    else:
        pytest.fail(f"no near tie's flip moves the logits past {TOLERANCE} of their scale: {ties}")
    full, kept, records = _routed(call, truth, TOLERANCE, frozenset(), routed=True)
    assert kept == {flip}
    assert records == [{"layer": layer, "row": row, "slot": slot, "margin": margin}]
    # that routing's truth is the runtime's logits exactly
    assert CallRecord(judge_call(call, full, None, 1e-12)).passed
    # the next call starts from the flips kept: found again at once, with no search
    again, kept_again, _ = _routed(call, truth, TOLERANCE, kept, routed=True)
    assert kept_again == kept and np.array_equal(again, full)


def test_a_flip_where_there_is_no_near_tie_is_not_excused(setting: tuple) -> None:  # type: ignore[type-arg]
    truth, ids, pos, mask, ties = setting
    tied = {(layer, row, slot) for layer, row, slot, _ in ties}
    free = next((1, 0, s) for s in range(39, 0, -1) if (1, 0, s) not in tied)  # layer 1: a token far from a tie
    runtime = truth(ids, pos, mask, frozenset({free}))
    call = _call(ids, pos, mask, runtime)
    assert not CallRecord(judge_call(call, truth(ids, pos, mask), None, TOLERANCE)).passed
    full, kept, _ = _routed(call, truth, TOLERANCE, frozenset(), routed=True)
    assert free not in kept
    assert not CallRecord(judge_call(call, full, None, TOLERANCE)).passed
