"""A mixture of experts' calls judged against the routing they took (``decoder.verify``, its module doc).

A runtime stands in here as the float64 truth with one token routed the other way: at a near tie (its k-th and
(k + 1)-th router logits within the tolerance of its scale) the verification finds that routing and judges the call
against it; at a token that is no near tie, nothing excuses it and the call fails. Then whole decoders of the four
routers (gpt-oss, DeepSeek, Qwen3-MoE, Llama 4), built and run in ONNX Runtime, with a near tie planted at one known
token: the runtime routes it the other way, and verification reports the flip and passes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.checkpoint import load_checkpoint
from ropeexport.decoder.export import build_decoder_graph
from ropeexport.decoder.greedy import Call, run_scenario
from ropeexport.decoder.oracle import Routing, decoder_float64, stored_float64
from ropeexport.decoder.parts import position_pieces
from ropeexport.decoder.scenarios import Scenario
from ropeexport.decoder.verify import CANDIDATES, _routed, judge_call, verify_decoder
from ropeexport.decoder.weights import seeded_weights
from ropeexport.graph.onnx_io import save_model
from ropeexport.report.views import CallRecord, ScenarioRecord
from ropeexport.runtimes.ort import OrtRunner

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

    def truth(ids, pos, mask, flips=frozenset(), bound=0.0, ties=None, first=0):  # noqa: ANN001, ANN202
        routing = Routing(flips, bound, ties if ties is not None else [])
        return decoder_float64(spec, weights64, ids, pos, mask, pieces=pieces, routing=routing)[:, first:]

    ids = np.random.default_rng(0).integers(0, spec.vocab_size, (2, 40))  # 160 routings: 5 near ties at fp16's bound
    pos, mask = np.tile(np.arange(40), (2, 1)), np.ones((2, 40), np.int64)
    ties: list = []
    truth(ids, pos, mask, frozenset(), TOLERANCE, ties)
    return truth, ids, pos, mask, ties


def _call(ids: np.ndarray, pos: np.ndarray, mask: np.ndarray, logits: np.ndarray) -> Call:
    return Call(0, "prefill", ids, pos, mask, 0, logits, "base", None)


def _recompute(truth: Any, passes: list[int]) -> Any:
    """``verify.Recompute`` of a lone call from ``setting``'s truth: each routing recomputed with its near ties
    collected at fp16's bound; ``passes`` told how many routings each pass computed.
    """  # noqa: D205

    def recompute(calls: list[Call], routings: list[frozenset[Any]]) -> list[list[Any]]:
        passes.append(len(routings))
        c, out = calls[0], []
        for flips in routings:
            ties: list[Any] = []
            out.append([(truth(c.input_ids, c.position_ids, c.attention_mask, flips, TOLERANCE, ties, c.first), ties)])
        return out

    return recompute


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
    passes: list[int] = []
    known: dict[Any, Any] = {}
    full, kept, records = _routed([call], 0, known, _recompute(truth, passes), TOLERANCE, frozenset())
    assert kept == {flip}
    assert records == [{"layer": layer, "row": row, "slot": slot, "margin": margin}]
    # the float64 routing, then the candidates its near ties allow, the closest first, four a pass until one passes
    at = sorted(ties, key=lambda t: (t[3], t[:3])).index(tie)
    assert passes == [1, *[min(CANDIDATES, len(ties) - j) for j in range(0, at + 1, CANDIDATES)]], (passes, at)
    # that routing's truth is the runtime's logits exactly
    assert CallRecord(judge_call(call, full, None, 1e-12)).passed
    # the next call starts from the flips kept: found again at once, with no search and no pass
    again, kept_again, _ = _routed([call], 0, known, _recompute(truth, passes), TOLERANCE, kept)
    assert kept_again == kept and np.array_equal(again, full) and len(passes) == 2


def test_a_flip_where_there_is_no_near_tie_is_not_excused(setting: tuple) -> None:  # type: ignore[type-arg]
    truth, ids, pos, mask, ties = setting
    tied = {(layer, row, slot) for layer, row, slot, _ in ties}
    free = next((1, 0, s) for s in range(39, 0, -1) if (1, 0, s) not in tied)  # layer 1: a token far from a tie
    runtime = truth(ids, pos, mask, frozenset({free}))
    call = _call(ids, pos, mask, runtime)
    assert not CallRecord(judge_call(call, truth(ids, pos, mask), None, TOLERANCE)).passed
    full, kept, _ = _routed([call], 0, {}, _recompute(truth, []), TOLERANCE, frozenset())
    assert free not in kept
    assert not CallRecord(judge_call(call, full, None, TOLERANCE)).passed


# --- a whole decoder, built and run in ONNX Runtime, with a near tie planted at a known token -----------------------

NEAR_TIE = Scenario("near-tie", (12,), 0, about="one prefill of 12 tokens, a near tie planted at one of them")


def _router_inputs(spec: Any, weights: dict[str, np.ndarray], sequence: Any = None) -> np.ndarray:
    """float64 [T, n]: the first mixture layer's router inputs over ``NEAR_TIE``'s prompt (the prompt run_scenario
    feeds, seed 0), or over ``sequence`` (input_ids, position_ids, attention_mask [1, T]), read by a spy on the
    float64 mixtures.
    """  # noqa: D205
    import ropeexport.decoder.oracle as oracle
    from ropeexport.decoder.greedy import _prompt

    ids, mask, pos = _prompt(spec, NEAR_TIE, np.random.default_rng(0)) if sequence is None else (
        sequence[0], sequence[2], sequence[1])  # fmt: skip
    seen: list[np.ndarray] = []
    real = {name: getattr(oracle, name) for name in ("moe_mixing", "shared_mixing")}

    def spy(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> np.ndarray:
            seen.append(np.asarray(args[1]))  # moe_mixing(spec, x, ...), shared_mixing(router, x, ...)
            return real[name](*args, **kwargs)

        return call

    for name in real:
        setattr(oracle, name, spy(name))
    try:
        oracle.decoder_float64(spec, stored_float64(spec, weights), ids, pos, mask, pieces=position_pieces(spec))
    finally:
        for name, function in real.items():
            setattr(oracle, name, function)
    return seen[0].reshape(-1, seen[0].shape[-1])


def _plant_near_tie(name: str, spec: Any, weights: dict[str, np.ndarray]) -> tuple[int, int]:
    """(layer, slot): the first mixture layer's router set so that exactly one token of ``NEAR_TIE``'s prompt has a
    near tie at its k-th / (k + 1)-th expert (a router without a bias: ``_plant_without_bias``).

    Experts 2 and 3 get the same router column v and, as the bias their choice adds (gpt-oss's router bias,
    DeepSeek's e_score_correction_bias), b = 1e-3 and the next float32 after it: in float64 expert 3 leads by one
    float32 ulp of b (1.2e-10), while in float32 both round to one value (b is small beside the logit or score it is
    added to) and TopK takes the lower index, expert 2. Experts 0 and 1 get v + u and v - u and a bias c more: both
    lead the pair (neither of it chosen) until the token whose gap is the largest, c set between the largest and the
    second over the prompt (h, the router inputs, read in float64), so exactly one token puts the pair at the
    boundary. DeepSeek's other group (experts 4-7) is never kept (a correction of -10). Shapes: h [T, n], the
    router's weight [n, E].
    """  # noqa: D205
    layer = next(i for i, layer in enumerate(spec.layers) if layer.ffn.kind == "moe")
    h = _router_inputs(spec, weights)
    if name in ("qwen3_moe", "llama4"):
        return layer, _plant_without_bias(h, weights, f"layers.{layer}.router_proj", spec.layers[layer].ffn.top_k)
    rng = np.random.default_rng(1)
    v, u = (rng.normal(size=h.shape[1]) / np.sqrt(h.shape[1]) / np.abs(h).mean() for _ in range(2))
    b, w = np.float32(1e-3), f"layers.{layer}.router_proj"
    if name == "gpt_oss":  # choice = logits: the pair's gap to experts 0 and 1 is u . h + c and -u . h + c
        gaps = np.abs(h @ u)
        bias = f"layers.{layer}.router_bias"
    else:  # DeepSeek: choice = sigmoid(logits) + correction; the gap below the pair of the lower of 0 and 1
        sig = lambda z: 1.0 / (1.0 + np.exp(-z))  # noqa: E731
        gaps = sig(h @ v) - np.minimum(sig(h @ (v + u)), sig(h @ (v - u)))
        bias = f"layers.{layer}.router_correction"
    ranked = np.sort(gaps)[::-1]
    c = (ranked[0] + ranked[1]) / 2
    columns = np.zeros((h.shape[1], weights[w].shape[1]), np.float32)
    columns[:, :4] = np.stack([v + u, v - u, v, v], axis=1)
    biases = np.full(weights[w].shape[1], -10.0, np.float32)  # DeepSeek's second group: never kept
    biases[:4] = [b + c, b + c, b, np.nextafter(b, np.float32(1))]
    weights[w], weights[bias] = columns.astype(weights[w].dtype), biases.astype(weights[bias].dtype)
    return layer, int(np.argmax(gaps))


def _plant_without_bias(h: np.ndarray, weights: dict[str, np.ndarray], w: str, k: int, t: int | None = None) -> int:
    """A router without a bias (Qwen3-MoE's softmax top 2, Llama 4's sigmoid top 1): its columns solved on the
    prompt's router inputs h [T, n] (T <= n: any logits per token are reachable) for exact logits per token: the pair
    (experts 2 and 3) 1 at the middle token, -1 elsewhere; expert 1 -2 there, 2 elsewhere; expert 0 3 everywhere
    (top 2) or 0 (top 1). The pair's columns are one but for the component j where that token's |h| is largest: a
    1e-6 there, and the next float32 after it in the direction of h's sign, so that in float64 expert 3 leads by
    about 1e-13 while float32 cannot tell the two apart and TopK takes expert 2; the pair stands at the k-th /
    (k + 1)-th boundary at that token only (``t``, default the middle one). The token's slot.
    """  # noqa: D205
    T = h.shape[0]
    t = T // 2 if t is None else t
    j = int(np.argmax(np.abs(h[t])))
    at = np.arange(T) == t
    solve = lambda target, rest=h: np.linalg.lstsq(rest, target, rcond=None)[0]  # noqa: E731
    small = np.float32(1e-6)
    others = [i for i in range(h.shape[1]) if i != j]
    pair = np.zeros(h.shape[1])
    pair[others] = solve(np.where(at, 1.0, -1.0) - float(small) * h[:, j], h[:, others])
    pair[j] = small
    columns = np.stack([solve(np.full(T, 3.0 if k == 2 else 0.0)), solve(np.where(at, -2.0, 2.0)), pair, pair],
                       axis=1).astype(np.float32)  # fmt: skip
    columns[j, 3] = np.nextafter(small, np.float32(np.sign(h[t, j])))
    weights[w] = columns.astype(weights[w].dtype)
    return t


ROUTERS = [("gpt_oss", "fused"),  # softmax over the top 2 of 4 by logits with a bias
           ("deepseek_v3", "decomposed"),  # sigmoid scores, group-limited top 2 by score + correction bias
           ("qwen3_moe", "fused"),  # softmax over all 4, the top 2: no bias
           ("llama4", "fused")]  # top 1 by logits, its sigmoid scaling the input: no bias


@pytest.mark.parametrize(("name", "graph"), ROUTERS, ids=[n for n, _ in ROUTERS])
def test_a_whole_decoder_that_routes_a_planted_near_tie_the_other_way_is_judged_a_tie_not_a_failure(
    name: str, graph: str, tmp_path: Path, tiny_checkpoint: Any
) -> None:
    ckpt = tiny_checkpoint(name)
    spec, _ = resolve(DecoderRequest(checkpoint=ckpt, graph=graph))
    weights = dict(load_checkpoint(spec, ckpt))
    layer, slot = _plant_near_tie(name, spec, weights)
    save_model(build_decoder_graph(spec, weights, "test"), tmp_path)
    runner = OrtRunner(tmp_path / "model.onnx", providers=["CPUExecutionProvider"])
    (record,) = verify_decoder(runner.infer, spec, weights, position_pieces(spec), chosen=[NEAR_TIE])
    result = ScenarioRecord(record)
    (call,) = result.calls
    # ONNX Runtime took expert 2 where float64 takes 3: judged against that routing, reported, passed
    assert result.passed and call.float64.rel <= 1e-4, record["summary"]
    flips = [f.data for f in call.routing_flips or []]
    assert [(f["layer"], f["row"], f["slot"]) for f in flips] == [(layer, 0, slot)], flips
    assert 0 < flips[0]["margin"] < 1e-9, flips  # one float32 ulp of the planted bias or weight, no more
    assert [(f.key_in, f.key_out) for f in call.routing_flips or []] == [(None, None)]  # a router's: no keys
    # the flip is no rounding: against the float64 routing the runtime's logits are far outside fp32's bound
    (ran,) = run_scenario(runner.infer, spec, NEAR_TIE)
    plain = decoder_float64(spec, stored_float64(spec, weights), ran.input_ids, ran.fed_positions, ran.attention_mask,
                            pieces=position_pieces(spec))  # fmt: skip
    assert np.abs(ran.logits - plain).max() > 1e-2 * np.abs(plain).max()


def _plant_group_tie(spec: Any, weights: dict[str, np.ndarray]) -> tuple[int, int]:
    """(layer, slot): DeepSeek's router of ``deepseek_v3-groups`` (3 groups of 4, the best group kept) set so that
    at exactly one token of ``NEAR_TIE``'s prompt its best two groups tie: groups A (experts 0-3) and B (4-7) get the
    same two experts (0, 1 and 4, 5: router column v, correction b; the rest -10), but expert 5's correction is the
    next float32 after b, so in float64 B leads A by one float32 ulp of b (1.2e-10) and in float32 their scores are
    one value (TopK keeps the lower index, A). Group C (8, 9: v + u, b + c) beats both at every token but the one
    whose gap sig(v . h) - sig((v + u) . h) is the largest (c set between the largest and the second over the
    prompt): there the kept group is B in float64 and A in ONNX Runtime. Shapes: h [T, n], the router [n, E].
    """  # noqa: D205
    layer = next(i for i, layer in enumerate(spec.layers) if layer.ffn.kind == "moe")
    h = _router_inputs(spec, weights)
    rng = np.random.default_rng(1)
    v, u = (rng.normal(size=h.shape[1]) / np.sqrt(h.shape[1]) / np.abs(h).mean() for _ in range(2))
    sig = lambda z: 1.0 / (1.0 + np.exp(-z))  # noqa: E731
    gaps = sig(h @ v) - sig(h @ (v + u))
    ranked = np.sort(gaps)[::-1]
    c, b, w = (ranked[0] + ranked[1]) / 2, np.float32(1e-3), f"layers.{layer}.router_proj"
    columns = np.zeros((h.shape[1], weights[w].shape[1]), np.float32)
    columns[:, [0, 1, 4, 5]] = v[:, None]
    columns[:, [8, 9]] = (v + u)[:, None]
    biases = np.full(weights[w].shape[1], -10.0, np.float32)
    biases[[0, 1, 4]], biases[5], biases[[8, 9]] = b, np.nextafter(b, np.float32(1)), b + c
    bias = f"layers.{layer}.router_correction"
    weights[w], weights[bias] = columns.astype(weights[w].dtype), biases.astype(weights[bias].dtype)
    return layer, int(np.argmax(gaps))


def test_a_tie_between_deepseeks_expert_groups_taken_the_other_way_is_reported_and_passes(
    tmp_path: Path, tiny_checkpoint: Any
) -> None:
    ckpt = tiny_checkpoint("deepseek_v3-groups")
    spec, _ = resolve(DecoderRequest(checkpoint=ckpt, graph="decomposed"))
    weights = dict(load_checkpoint(spec, ckpt))
    layer, slot = _plant_group_tie(spec, weights)
    save_model(build_decoder_graph(spec, weights, "test"), tmp_path)
    runner = OrtRunner(tmp_path / "model.onnx", providers=["CPUExecutionProvider"])
    (record,) = verify_decoder(runner.infer, spec, weights, position_pieces(spec), chosen=[NEAR_TIE])
    result = ScenarioRecord(record)
    (call,) = result.calls
    assert result.passed and call.float64.rel <= 1e-4, record["summary"]
    flips = [f.data for f in call.routing_flips or []]
    assert [(f["layer"], f["row"], f["slot"]) for f in flips] == [(layer, 0, slot)], flips
    assert 0 < flips[0]["margin"] < 1e-9, flips  # the group scores' gap: one float32 ulp of b
    # the other group, not rounding: against the float64 routing the runtime's logits are far outside fp32's bound
    (ran,) = run_scenario(runner.infer, spec, NEAR_TIE)
    plain = decoder_float64(spec, stored_float64(spec, weights), ran.input_ids, ran.fed_positions, ran.attention_mask,
                            pieces=position_pieces(spec))  # fmt: skip
    assert np.abs(ran.logits - plain).max() > 1e-2 * np.abs(plain).max()


DECODE_TIE = Scenario("decode-tie", (6,), 6, about="a 6-token prompt, then 6 steps; a near tie at a decode step")


def test_a_near_tie_at_a_cached_decode_step_taken_the_other_way_is_reported_and_passes(
    tmp_path: Path, tiny_checkpoint: Any
) -> None:
    # Qwen3-MoE's router solved for a near tie at slot 9, the token the 4th decode step feeds (ONNX Runtime computes it
    # from the cache). The plant reroutes every token, so the tokens generated before slot 9 may change with it: it is
    # solved again on the new generation until the tokens up to slot 9 stay (the router inputs there with them).

    ckpt = tiny_checkpoint("qwen3_moe")
    spec, _ = resolve(DecoderRequest(checkpoint=ckpt, graph="fused"))
    weights = dict(load_checkpoint(spec, ckpt))
    layer = next(i for i, layer in enumerate(spec.layers) if layer.ffn.kind == "moe")
    slot, planted = 9, weights

    def generated(weights: dict[str, np.ndarray], attempt: int) -> tuple[Any, list[Call]]:
        save_model(build_decoder_graph(spec, weights, "test"), tmp_path / str(attempt))
        runner = OrtRunner(tmp_path / str(attempt) / "model.onnx", providers=["CPUExecutionProvider"])
        return runner, run_scenario(runner.infer, spec, DECODE_TIE)

    runner, calls = generated(weights, 0)
    for attempt in range(1, 5):
        last = calls[-1]  # the sequence so far: slots 0-10
        h = _router_inputs(spec, weights, (last.input_ids, last.fed_positions, last.attention_mask))
        planted = dict(weights)
        _plant_without_bias(h, planted, f"layers.{layer}.router_proj", spec.layers[layer].ffn.top_k, slot)
        runner, again = generated(planted, attempt)
        if np.array_equal(again[-1].input_ids[:, : slot + 1], last.input_ids[:, : slot + 1]):
            break
        calls = again
    else:
        pytest.fail("the tokens before the planted slot kept changing with the plant")
    (record,) = verify_decoder(runner.infer, spec, planted, position_pieces(spec), chosen=[DECODE_TIE])
    result = ScenarioRecord(record)
    assert result.passed, record["summary"]
    flipped = [(c.data["index"], c.data["kind"], [(f.data["layer"], f.data["row"], f.data["slot"])
                                                  for f in c.routing_flips or []]) for c in result.calls]  # fmt: skip
    first = next(k for k, (_, _, flips) in enumerate(flipped) if flips)
    assert flipped[first][1:] == ("decode", [(layer, 0, slot)]), flipped  # found at the step that computes slot 9
    assert all(flips == [(layer, 0, slot)] for _, _, flips in flipped[first:]), flipped  # and kept after it


def test_an_indexer_near_tie_an_fp16_runtime_takes_the_other_way_is_named_and_passes(
    tmp_path: Path, tiny_checkpoint: Any
) -> None:
    # DeepSeek Sparse Attention's selection is a top-k as a router's is: the tiny deepseek_v32 in fp16 (its scores
    # rounded to fp16 before they are ranked) keeps another key than float64 at one query of decode-64 (measured:
    # layer 1, slot 68, key 22 in for key 17, 7.7e-4 of the query's largest score apart). Verification names that
    # flip (layer, row, slot, key in, key out, margin) and passes; against the float64 selection the call fails.
    from ropeexport.decoder.scenarios import scenarios

    ckpt = tiny_checkpoint("deepseek_v32")
    spec, _ = resolve(DecoderRequest(checkpoint=ckpt, graph="fused", dtype="fp16"))
    weights = dict(load_checkpoint(spec, ckpt))
    save_model(build_decoder_graph(spec, weights, "test"), tmp_path)
    runner = OrtRunner(tmp_path / "model.onnx", providers=["CPUExecutionProvider"])
    chosen = [s for s in scenarios(spec) if s.name == "decode-64"]
    (record,) = verify_decoder(runner.infer, spec, weights, position_pieces(spec), chosen=chosen)
    result = ScenarioRecord(record)
    flipped = [c for c in result.calls if c.routing_flips]
    assert result.passed and flipped, record["summary"]
    flips = {(f.layer, f.row, f.slot, f.key_in, f.key_out) for c in flipped for f in c.routing_flips or []}
    assert all(f[3] is not None and f[3] != f[4] for f in flips), flips  # each names the key taken in and left out
    margins = [f.data["margin"] for c in flipped for f in c.routing_flips or []]
    assert all(0 <= m <= TOLERANCE for m in margins), margins  # near ties, within fp16's bound of the query's scale
    first = flipped[0]
    plain = _routed_plain(runner, spec, weights, chosen[0], first.index)
    assert plain > TOLERANCE, plain  # the float64 selection alone fails that call


def _routed_plain(runner: OrtRunner, spec: Any, weights: dict[str, Any], scenario: Scenario, index: int) -> float:
    """The call ``index`` of ``scenario``'s error over its logit scale against the float64 recompute with no flip."""
    calls = run_scenario(runner.infer, spec, scenario)
    call = calls[index]
    truth = decoder_float64(spec, stored_float64(spec, weights), call.input_ids, call.fed_positions,
                            call.attention_mask, pieces=position_pieces(spec))[:, call.first:]  # fmt: skip
    return float(np.abs(call.logits - truth).max() / np.abs(truth).max())
