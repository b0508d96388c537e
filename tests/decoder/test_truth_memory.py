"""What the verification holds beside the float64 truth (issue 39's Gemma 4 at real size), with the figures unchanged.

The changes, each checked bit for bit against the computation it replaced (written out here as it was):
``verify._compare`` widens and subtracts a block of slots at a time (``COMPARE_BYTES``), not the whole call (four
float64 copies of its logits before: Gemma 4's 1048-slot window crossing is 2 GiB a copy), a mixture's calls too
(``verify._routed`` had widened each call's logits whole before comparing them); ``oracle``'s final soft
cap and logit scale are applied in place (two whole copies of a pass's logits before); an int4 decoder's unquantized
pass runs first and each call keeps only its ``Cost``, so that the truth's pass does not hold its logits beside its
own (before: both passes' logits held together).
"""

from __future__ import annotations

import tracemalloc
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ropeexport.decoder import oracle, verify
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.export import build_decoder_graph
from ropeexport.decoder.greedy import Call
from ropeexport.decoder.parts import position_pieces
from ropeexport.decoder.scenarios import scenarios
from ropeexport.decoder.weights import seeded_weights
from ropeexport.graph.onnx_io import save_model
from ropeexport.runtimes.ort import OrtRunner
from tests.decoder.test_planted import LLAMA


def _former_compare(call: Call, runtime: np.ndarray, reference: np.ndarray,
                    rows: np.ndarray | None = None) -> dict[str, float]:  # fmt: skip
    """``verify._compare`` as it was: the whole call widened to float64 and subtracted at once."""
    real = call.attention_mask[:, call.first :] != 0
    if rows is not None:
        real = real & rows[:, None]
    diff = np.abs(np.asarray(runtime, np.float64) - reference)[real]
    scale = float(np.abs(reference[real]).max())
    worst = float(diff.max())
    return {"max_abs": worst, "rel": worst / scale if scale else worst, "scale": scale}


def _call(b: int, s: int, vocab: int, pad: int, seed: int) -> tuple[Call, np.ndarray]:
    """A call of ``s`` slots on ``b`` rows (row 0 left-padded by ``pad``), float32 logits, and a float64 truth."""
    rng = np.random.default_rng(seed)
    mask = np.ones((b, s), np.int64)
    mask[0, :pad] = 0
    truth = rng.standard_normal((b, s, vocab)) * 7.0
    logits = (truth + rng.standard_normal(truth.shape) * 1e-3).astype(np.float32)
    ids = np.zeros((b, s), np.int64)
    call = Call(0, "prefill", ids, np.cumsum(mask, 1) - 1, mask, 0, logits, ("short",) * b, None)
    return call, truth


# (case, rows, slots, vocab, pad, the block in bytes, rows judged, a NaN planted): one block, many blocks with a
# padded run and a block left with no real slot, some rows only (a stale row), a NaN that must stay the maximum.
COMPARES = [("one block", 2, 5, 64, 0, 2**30, None, False),
            ("many blocks, padded", 3, 9, 64, 4, 2 * 8 * 64, None, False),
            ("rows judged", 3, 9, 64, 2, 3 * 8 * 64, [True, False, True], False),
            ("a NaN is kept", 2, 9, 64, 0, 2 * 8 * 64, None, True)]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("case", "b", "s", "vocab", "pad", "block", "rows", "nan"), COMPARES,
                         ids=[c[0] for c in COMPARES])  # fmt: skip
def test_a_call_compared_in_blocks_gives_the_whole_comparisons_figures(
    case: str, b: int, s: int, vocab: int, pad: int, block: int, rows: list[bool] | None, nan: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(verify, "COMPARE_BYTES", block)
    call, truth = _call(b, s, vocab, pad, seed=len(case))
    if nan:
        call.logits[1, 3, 7] = np.nan
    chosen = None if rows is None else np.array(rows)
    got = verify._compare(call, call.logits, truth, chosen)
    want = _former_compare(call, call.logits, truth, chosen)
    assert got.keys() == want.keys()
    for key in want:  # bit for bit (a NaN as a NaN)
        assert np.array_equal(np.float64(got[key]), np.float64(want[key]), equal_nan=True), (key, got, want)
    assert not nan or np.isnan(got["max_abs"])


@pytest.mark.fast
def test_judging_a_call_holds_a_block_not_copies_of_its_logits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 128-slot call over a vocabulary of 16384 (16 MiB of float64 logits) compared in blocks of 512 KiB: judging
    it (its cost taken too) holds under a quarter of one float64 copy beside its arrays; the whole comparison held
    three or more.
    """  # noqa: D205
    monkeypatch.setattr(verify, "COMPARE_BYTES", 2**19)
    call, truth = _call(1, 128, 16384, 0, seed=1)
    whole = truth.nbytes
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        record = verify.judge_call(call, truth, None, 1e-4, truth)
        held = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert held < whole / 4, f"judging held {held / 2**20:.1f} MiB beside a {whole / 2**20:.0f} MiB call"
    assert record["float64"] == _former_compare(call, call.logits, truth)
    assert record["quantization_cost"] == record["float64"]


# (case, the float64 routing's error over the runtime's, a near tie to try, the routings' errors with it flipped): the
# float64 routing within the tolerance (nothing tried); a call only a flipped routing passes (the tie tried and taken)
ROUTED = [("the float64 routing passes", 0.0, None, None),
          ("a near tie flipped", 1.0, (0, 0, 5), 0.0)]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("case", "off", "tie", "flipped_off"), ROUTED, ids=[c[0] for c in ROUTED])
def test_a_mixtures_call_is_judged_in_blocks_with_the_same_routing_and_truth(
    case: str, off: float, tie: tuple[int, int, int] | None, flipped_off: float | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mixture's call (``verify._routed``) over a vocabulary of 16384 (16 MiB of float64 logits), compared in
    blocks of 512 KiB: it holds under a quarter of one float64 copy beside the truths handed to it (the whole call
    widened before: one copy), and chooses the routing and truth the whole comparison chooses.
    """  # noqa: D205
    monkeypatch.setattr(verify, "COMPARE_BYTES", 2**19)
    call, near = _call(1, 128, 16384, 0, seed=2)
    exact = np.asarray(call.logits, np.float64)
    truths = {frozenset(): exact + off}  # per routing (its flips), the truth the recompute gives
    if tie is not None:
        truths[frozenset({tie})] = exact + flipped_off
    ties = [] if tie is None else [(*tie, 1e-6)]

    def recompute(calls: list[Call], routings: list[frozenset[Any]]) -> list[list[tuple[np.ndarray, list[Any]]]]:
        return [[(truths[flips], ties if not flips else [])] for flips in routings]  # the one call's run

    rel = lambda t: _former_compare(call, call.logits, t)["rel"]  # noqa: E731
    want = min(truths, key=lambda f: (rel(truths[f]), sorted(f))) if rel(truths[frozenset()]) > 1e-4 else frozenset()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        known = {frozenset(): {0: (truths[frozenset()], ties)}}  # the float64 routing's, computed ahead
        full, kept, records = verify._routed([call], 0, known, recompute, 1e-4, frozenset())
        held = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    whole = exact.nbytes
    assert held < whole / 4, f"judging held {held / 2**20:.1f} MiB beside a {whole / 2**20:.0f} MiB call"
    assert kept == want and full is truths[want]
    assert [(r["layer"], r["row"], r["slot"]) for r in records] == sorted(want)


# (case, final soft cap, logit scale): Gemma's cap, Cohere 2's scale, both
CAPS = [("soft cap", 3.0, 0.0), ("logit scale", 0.0, 0.25), ("both", 5.0, 0.5)]


@pytest.mark.fast
@pytest.mark.parametrize(("case", "cap", "scale"), CAPS, ids=[c[0] for c in CAPS])
def test_the_truths_cap_and_scale_are_applied_in_place_bit_for_bit(case: str, cap: float, scale: float) -> None:
    spec, _ = resolve(DecoderRequest(config=LLAMA, name="capped", max_positions=64))
    spec = spec.replace(final_softcap=cap, logit_scale=scale)
    logits = np.random.default_rng(0).standard_normal((2, 3, 96)) * 20.0
    want = logits.copy()
    if scale:  # the former arithmetic, a new array each step
        want = want * float(oracle.round_once(np.array(scale), spec.dtype))
    if cap:
        rounded = float(oracle.round_once(np.array(cap), spec.dtype))
        want = rounded * np.tanh(want / rounded)
    got = oracle._softcapped(spec, oracle._scaled(spec, logits))
    assert got is logits  # no copy of a pass's logits
    assert np.array_equal(got, want)


@pytest.fixture(scope="module")
def int4_capped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any]:
    """A tiny int4 Llama with a final soft cap (Gemma's), built and opened: (spec, weights, runner)."""
    spec, _ = resolve(DecoderRequest(config=LLAMA, name="capped", weight_format="int4", max_positions=128))
    spec = spec.replace(final_softcap=3.0)
    weights = seeded_weights(spec)
    folder = tmp_path_factory.mktemp("int4-capped")
    save_model(build_decoder_graph(spec, weights, "seeded"), folder)
    return spec, weights, OrtRunner(Path(folder) / "model.onnx", providers=["CPUExecutionProvider"])


def test_the_unquantized_pass_is_let_go_before_the_truths_and_the_figures_are_the_same(
    int4_capped: tuple[Any, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime is let go once every scenario has run, before the float64 passes. Each pass's logits are copied
    aside here (to judge as before) and watched: the unquantized pass runs first, and none of its arrays is alive
    when the truth's pass starts; every call's record (fidelity, cost, tokens) is what judging each call against both
    passes' whole logits gives.
    """  # noqa: D205
    spec, weights, runner = int4_capped
    events: list[str] = []
    passes: list[tuple[bool, list[weakref.ref[np.ndarray]], list[np.ndarray]]] = []
    alive_at_truth: list[bool] = []
    calls: list[Call] = []
    real_chained, real_run = verify.chained_float64, verify.run_scenario

    def chained(of: Any, *args: Any, **kwargs: Any) -> list[np.ndarray]:
        truth = bool(of.storage.format)  # the truth reads the int4 weights; the cost's pass, unquantized ones
        if truth:
            alive_at_truth.extend(ref() is not None for _, refs, _ in passes for ref in refs)
        events.append("truth" if truth else "unquantized")
        out = real_chained(of, *args, **kwargs)
        bases = [a.base if a.base is not None else a for a in out]
        passes.append((truth, [weakref.ref(a) for a in out + bases], [a.copy() for a in out]))
        return out

    def run(*args: Any, **kwargs: Any) -> list[Call]:
        ran = real_run(*args, **kwargs)
        events.append("scenario")
        calls.extend(ran)
        return ran

    monkeypatch.setattr(verify, "chained_float64", chained)
    monkeypatch.setattr(verify, "run_scenario", run)
    chosen = scenarios(spec)[1:3]  # chunked-prefill (chained calls), left-padded (masked slots)
    results = verify.verify_decoder(runner.infer, spec, weights, position_pieces(spec), chosen=chosen,
                                    release=lambda: events.append("released"))  # fmt: skip
    assert events == ["scenario", "scenario", "released", "unquantized", "truth"]  # the unquantized pass first
    assert alive_at_truth and not any(alive_at_truth)  # ... and let go before the truth's
    records = [r for result in results for r in result["calls"]]
    assert len(records) == len(calls) == len(passes[1][2]) > 1
    for record, call, truth, cost in zip(records, calls, passes[1][2], passes[0][2], strict=True):
        rows = np.arange(call.logits.shape[0])
        last = verify._last(call)
        assert record["float64"] == _former_compare(call, call.logits, truth)
        assert record["quantization_cost"] == _former_compare(call, call.logits, cost)
        assert record["tokens"]["unquantized"] == [int(x) for x in cost[rows, last].argmax(-1)]
        assert record["tokens"]["float64"] == [int(x) for x in truth[rows, last].argmax(-1)]


# (case, config): a uniform Llama; Gemma 3's sandwich norms, sliding and global layers (two feeds in one pass)
PHASED = [("llama", LLAMA),
          ("gemma3", {**LLAMA, "model_type": "gemma3_text", "head_dim": 8, "sliding_window": 6,
                      "query_pre_attn_scalar": 8, "layer_types": ["sliding_attention", "full_attention"]})]  # fmt: skip


@pytest.mark.parametrize(("case", "config"), PHASED, ids=[c[0] for c in PHASED])
def test_a_layers_mlp_is_read_after_its_attentions_weights_go_with_the_logits_unchanged(
    case: str, config: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read from ``Stored64`` (as a verification reads a checkpoint), a layer's MLP weights are read only once every
    feed has passed its attention and the attention's float64 weights are gone, a projection at a time (watched by
    weak references); the logits are bit for bit those of the same weights held whole (``stored_float64``: every
    weight read at once).
    """  # noqa: D205
    from ropeexport.decoder.phases import MLP_NAMES
    from ropeexport.decoder.weights import BLOCK_NAMES

    spec, _ = resolve(DecoderRequest(config=config, name=case, max_positions=64))
    weights = seeded_weights(spec)
    rng = np.random.default_rng(0)
    feeds = [oracle.Feed(rng.integers(0, 96, (b, s)), np.tile(np.arange(s), (b, 1)), np.ones((b, s), np.int64), first)
             for b, s, first in ((2, 9, 0), (1, 13, 5))]  # fmt: skip
    held = oracle.decoders_float64(spec, oracle.stored_float64(spec, weights), feeds, position_pieces(spec))
    attention: list[weakref.ref[np.ndarray]] = []
    projections: list[weakref.ref[np.ndarray]] = []
    mlp_reads: list[tuple[str, bool, bool]] = []  # (name, an attention weight alive, another projection alive)
    real = oracle.Stored64.__getitem__

    def read(self: oracle.Stored64, name: str) -> np.ndarray:
        value = real(self, name)
        short = name.rsplit(".", 1)[-1] if name.startswith("layers.") else ""
        if short in BLOCK_NAMES:
            attention.append(weakref.ref(value))
        elif short in MLP_NAMES:
            alive = lambda refs: any(ref() is not None for ref in refs)  # noqa: E731
            mlp_reads.append((name, alive(attention), alive(projections)))
            projections.append(weakref.ref(value))
        return value

    monkeypatch.setattr(oracle.Stored64, "__getitem__", read)
    phased = oracle.decoders_float64(spec, oracle.Stored64(spec, weights), feeds, position_pieces(spec))
    assert len(mlp_reads) >= 3 * spec.num_layers and attention
    assert not [name for name, attending, _ in mlp_reads if attending], mlp_reads
    assert not [name for name, _, another in mlp_reads if another], mlp_reads  # one projection held at a time
    assert len(mlp_reads) == 3 * spec.num_layers * len(feeds)  # read again for each feed
    for a, b in zip(held, phased, strict=True):
        assert np.array_equal(a, b)


def test_a_fused_int4_weights_parts_are_read_alone_with_the_truth_unchanged(
    int4_capped: tuple[Any, Any, Any], tmp_path: Path
) -> None:
    """A fused MatMulNBits (q | k | v, gate | up) is read a part's columns at a time (``held.HeldWeights``), not
    whole and kept: each part is the whole read's columns bit for bit, and the truth read through either is the same.
    """  # noqa: D205
    import onnx

    from ropeexport.decoder.held import held_weights

    spec, weights, runner = int4_capped
    folder = Path(runner.model_path).parent
    held, _ = held_weights(onnx.load(folder / "model.onnx", load_external_data=False), spec, folder)
    fused = {n: (w, span) for n, (w, span) in held._parts.items() if span != (0, w.N)}
    assert len(fused) >= 5 * spec.num_layers  # q, k, v, gate, up of each layer
    whole = {n: w.read(held._tensors)[:, a:b] for n, (w, (a, b)) in fused.items()}  # as read before: a view each
    for name, before in whole.items():
        part = held[name]
        assert np.array_equal(part, before), name
        root = part
        while root.base is not None:  # the array the part's values live in
            root = root.base
        kept = weakref.ref(root)
        del part, root
        assert kept() is None, f"{name}: its fused weight is still held after the part is let go"
    former = {n: whole[n] if n in whole else held[n] for n in held}
    rng = np.random.default_rng(1)
    feeds = [oracle.Feed(rng.integers(0, 96, (2, 9)), np.tile(np.arange(9), (2, 1)), np.ones((2, 9), np.int64))]
    now = oracle.decoders_float64(spec, oracle.Stored64(spec, weights, held), feeds, position_pieces(spec))
    then = oracle.decoders_float64(spec, oracle.Stored64(spec, weights, former), feeds, position_pieces(spec))
    assert np.array_equal(now[0], then[0])
