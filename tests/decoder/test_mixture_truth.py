"""A mixture's float64 truth over several calls at once (``decoder.oracle``, ``components.mixing``).

Every call of a layer is routed first, then each expert is read once and applied to each call's tokens alone: the
logits of every call, and the near ties and flips of its routing, must be bit for bit those of the call computed by
itself from the weights held whole (the twins ``moe64``, ``shared_moe64``, ``branch64`` one call at a time), and no
expert may be read twice in one pass. One row per router kind.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ropeexport.decoder import oracle
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.oracle import Feed, Routing, Stored64, decoders_float64, stored_float64
from ropeexport.decoder.parts import position_pieces
from ropeexport.decoder.scenarios import Scenario
from ropeexport.decoder.weights import seeded_weights
from tests.decoder.test_shared_kv import ROPE
from tests.decoder.tiny import CONFIGS, VARIANTS

# name in tests/decoder/tiny.py -> what its mixture is
ROUTERS = {
    "gpt_oss": "softmax of the top k by logits plus a bias, clamped SwiGLU experts",
    "qwen3_moe": "softmax over all E at the top k, gated experts; dense and sparse layers mixed",
    "deepseek_v3": "sigmoid scores, group-limited top k by score plus correction, shared expert",
    "llama4": "top 1 by logits, its sigmoid scaling the input, shared expert",
    "gemma4-moe": "Gemma 4's mixture beside the MLP, routed from the residual stream",
}


class CountedReads(Stored64):
    """``Stored64`` counting each (weight, expert) it reads alone."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.expert_reads: Counter[tuple[str, int]] = Counter()

    def expert(self, name: str, e: int) -> np.ndarray:  # noqa: D102
        self.expert_reads[name, e] += 1
        return super().expert(name, e)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.int64)  # -0.0 and 0.0 told apart, as every NaN payload


def _feeds(vocab: int) -> list[Feed]:
    """Three calls of other shapes: two rows of 7 tokens (logits from slot 2), one token, one row of 5."""
    rng = np.random.default_rng(3)
    out = []
    for b, s, first in ((2, 7, 2), (1, 1, 0), (1, 5, 0)):
        out.append(Feed(rng.integers(0, vocab, (b, s)), np.tile(np.arange(s), (b, 1)), np.ones((b, s), np.int64),
                        first))  # fmt: skip
    return out


@pytest.mark.fast
@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_every_call_routed_first_then_each_expert_read_once_gives_each_calls_own_truth(name: str) -> None:
    model_type, fields = {**CONFIGS, **VARIANTS}[name]
    # Gemma 4's RoPE nested by layer type, as transformers saves it (its config class not imported: seconds)
    config = {"model_type": model_type, **fields, **({"rope_parameters": ROPE} if "gemma4" in name else {})}
    spec, _ = resolve(DecoderRequest(config=config))
    weights, pieces = seeded_weights(spec), position_pieces(spec)
    moe = [i for i, layer in enumerate(spec.layers) if layer.ffn.kind == "moe"]
    assert moe, name
    feeds = _feeds(spec.vocab_size)
    # the first call takes one token the other way at the last mixture layer; near ties collected within a wide bound
    # (every token has one at 1.0 x its largest |logit|: the lists are long, their order checked too)
    routing = lambda: [Routing(frozenset({(moe[-1], 1, 4)}), 1.0, []), None, Routing(bound=1.0)]  # noqa: E731
    together_routing = routing()
    counted = CountedReads(spec, weights)
    together = decoders_float64(spec, counted, feeds, pieces, together_routing)
    whole = stored_float64(spec, weights)
    for j, feed in enumerate(feeds):
        alone_routing = routing()[j]
        (alone,) = decoders_float64(spec, whole, [feed], pieces, [alone_routing])
        assert np.array_equal(_bits(together[j]), _bits(alone)), f"{name}: call {j}'s logits differ"
        if alone_routing is not None:
            assert together_routing[j] is not None and together_routing[j].ties == alone_routing.ties, j
            assert alone_routing.ties, "no near tie collected: the bound checks nothing"
    assert counted.expert_reads, "no expert read alone: the pass did not go through Stored64.expert"
    twice = {key: n for key, n in counted.expert_reads.items() if n > 1}
    assert not twice, f"experts read more than once in one pass: {sorted(twice)[:4]}"


DECODE = Scenario("decode", (6, 4), 5, about="two rows of 6 and 4 tokens, left-padded, then 5 greedy steps")


def test_a_mixtures_verification_reads_each_expert_once_for_every_call(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:  # fmt: skip
    # Qwen3-MoE in fp32 run by ONNX Runtime: every call's float64 routing in one pass (``verify.verify_decoder``), each
    # call judged as the call computed alone judges it (``verify_scenario`` without that pass: a recompute per call)
    from ropeexport.decoder.export import build_decoder_graph
    from ropeexport.decoder.greedy import run_scenario
    from ropeexport.decoder.verify import tolerance, verify_decoder, verify_scenario
    from ropeexport.graph.onnx_io import save_model
    from ropeexport.runtimes.ort import OrtRunner

    spec, _ = resolve(DecoderRequest(config={"model_type": "qwen3_moe", **CONFIGS["qwen3_moe"][1]}))
    weights, pieces = seeded_weights(spec), position_pieces(spec)
    save_model(build_decoder_graph(spec, weights, "test"), tmp_path)
    infer = OrtRunner(tmp_path / "model.onnx", providers=["CPUExecutionProvider"]).infer
    reads: Counter[tuple[str, int]] = Counter()
    real = Stored64.expert

    def counted(self: Stored64, name: str, e: int) -> np.ndarray:
        reads[name, e] += 1
        return real(self, name, e)

    monkeypatch.setattr(Stored64, "expert", counted)
    (record,) = verify_decoder(infer, spec, weights, pieces, chosen=[DECODE])
    assert record["passed"] and not any("routing_flips" in c for c in record["calls"]), record["summary"]
    assert reads and max(reads.values()) == 1, sorted(k for k, n in reads.items() if n > 1)[:4]
    calls = run_scenario(infer, spec, DECODE)
    assert len(calls) == 6

    def alone(calls, routings):  # noqa: ANN001, ANN202
        c, bound = calls[0], tolerance(spec)  # the first call alone, not the run of calls extending it
        found = [Routing(flips, bound, []) for flips in routings]
        feeds = [Feed(c.input_ids, c.fed_positions, c.attention_mask, c.first)] * len(routings)
        return [[(logits, routing.ties)] for logits, routing in
                zip(decoders_float64(spec, Stored64(spec, weights), feeds, pieces, found), found, strict=True)]

    by_call = verify_scenario(spec, DECODE, calls, [None] * len(calls), None, [None] * len(calls), alone)
    assert len(oracle.chained(spec, [Feed(c.input_ids, c.fed_positions, c.attention_mask, c.first) for c in calls],
                              pieces)) < len(calls)  # the one pass computed some calls as part of a longer one
    _close(by_call["calls"], record["calls"])


def _close(got: Any, want: Any) -> None:
    """``got`` is ``want``, its floats within 1e-9 of them (a call computed alone sums its float64 attention over
    its own length, not its run's: ``oracle.chained_float64``), everything else equal.
    """  # noqa: D205
    if isinstance(want, dict):
        assert got.keys() == want.keys(), (got.keys(), want.keys())
        for key in want:
            _close(got[key], want[key])
    elif isinstance(want, list):
        assert len(got) == len(want), (got, want)
        for a, b in zip(got, want, strict=True):
            _close(a, b)
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), (got, want)
    else:
        assert got == want, (got, want)


T, U = (1, 0, 1), (1, 0, 3)  # two router near ties: (layer, row, slot), at slots 1 and 3 of the sequence
NEAR = [(2, 0, j) for j in range(1, 7)]  # six near ties of layer 2, at slots 1-6, the closest first
S = frozenset


def _six(taken: int) -> list[tuple[tuple[int, ...], int, float, bool]]:
    """NEAR's ties all met from call 1 on, 1e-7 x (j + 1) apart, the runtime taking the ``taken``-th closest."""
    return [(tie, 1, 1e-7 * (j + 1), j == taken) for j, tie in enumerate(NEAR)]


# (case, the near ties: (the flip, the call they are met from, their margin, whether the runtime took it), the passes
# wanted: (the call recomputed from, the routings in that pass)): a scenario of 5 calls, each extending the one
# before. Call k's truth under a routing is the runtime's logits, off by 1 (past the bound) for every tie met by then
# that the runtime took and the routing leaves out, and for every tie the routing takes that the runtime did not.
PASSES = [("no tie met", [], []),
          ("a tie at call 1, kept after", [(T, 1, 1e-6, True)], [(1, {S({T})})]),
          ("a second tie at call 3", [(T, 1, 1e-6, True), (U, 3, 1e-6, True)],
           [(1, {S({T})}), (3, {S({U}), S({T, U})})]),
          ("six ties, the closest taken: one pass of the closest four", _six(0), [(1, {S({t}) for t in NEAR[:4]})]),
          ("six ties, the fifth closest taken: a second pass", _six(4),
           [(1, {S({t}) for t in NEAR[:4]}), (1, {S({t}) for t in NEAR[4:]})])]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("case", "ties", "passes"), PASSES, ids=[c[0] for c in PASSES])
def test_a_near_tie_costs_one_pass_whatever_the_calls_after_it(
    case: str, ties: list[tuple[tuple[int, ...], int, float, bool]], passes: list[tuple[int, set[frozenset[Any]]]]
) -> None:
    # ``verify_scenario`` given the float64 routing's truths ahead: a call the runtime computed under a flipped tie is
    # judged by a recompute of its candidates (the closest ties' first, four a pass, until one passes) from that call
    # on; the calls after it read the routing kept from that pass (before: a pass per candidate, then one per later
    # call).
    from ropeexport.decoder.greedy import Call
    from ropeexport.decoder.verify import CANDIDATES, verify_scenario

    assert CANDIDATES == 4  # the passes wanted above are counted in fours
    spec, _ = resolve(DecoderRequest(config={"model_type": "qwen3_moe", **CONFIGS["qwen3_moe"][1]}))
    rng = np.random.default_rng(0)
    calls = []
    for k in range(5):
        ids, mask = np.zeros((1, k + 2), np.int64), np.ones((1, k + 2), np.int64)
        logits = rng.standard_normal((1, 1, 32)).astype(np.float32)
        calls.append(Call(k, "decode", ids, np.cumsum(mask, 1) - 1, mask, k + 1, logits, ("short",), None))

    def truth(k: int, flips: frozenset[Any]) -> tuple[np.ndarray, list[Any]]:
        met = [(tie, margin, taken) for tie, at, margin, taken in ties if k >= at]
        off = sum(1.0 for tie, _, taken in met if (tie in flips) != taken)
        return calls[k].logits.astype(np.float64) + off, [(*tie, margin) for tie, margin, _ in met]

    seen: list[tuple[int, set[frozenset[Any]]]] = []

    def recompute(run: list[Any], routings: list[frozenset[Any]]) -> list[list[Any]]:
        k = run[0].index
        seen.append((k, set(routings)))
        return [[truth(j, flips) for j in range(k, 5)] for flips in routings]  # the calls from k on: one run

    aheads = [truth(k, frozenset()) for k in range(5)]
    scenario = Scenario("decode", (1,), 4, about="a 1-token prompt, then 4 steps")
    record = verify_scenario(spec, scenario, calls, [None] * 5, None, [None] * 5, recompute, aheads)
    assert record["passed"], record["summary"]
    assert seen == passes
    kept = [sorted((f["layer"], f["row"], f["slot"]) for f in c.get("routing_flips", [])) for c in record["calls"]]
    assert kept == [sorted(tie for tie, at, _, taken in ties if k >= at and taken) for k in range(5)], kept
