"""A decoder batch whose rows sit in different RoPE regimes: each row computed in its own (``families.rope.regimes``).

Case table: Phi-3 LongRoPE and a dynamic-NTK Llama, tiny and seeded, in every decoder form. One prefill holds a row
past original_max_position_embeddings, a short row before it (left-padded) and, further past it, a third row (another
L for dynamic NTK). Each row's logits must equal that request run alone (its real tokens only, batch 1) within the
verification tolerance, and each row whose L is not the longest row's must miss the whole-batch rule's float64 truth
(every row at the longest row's L, what the graph computed before rows had their own) by far more than it: the test
fails on such a graph. Then the ``mixed-regimes`` scenarios (re-prefill and keep across the switch) must pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ropeexport.catalog import recipe_for
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.export import build_decoder_graph, cache_names
from ropeexport.decoder.oracle import decoder_float64, stored_float64
from ropeexport.decoder.report import _row
from ropeexport.decoder.scenarios import scenarios
from ropeexport.decoder.spec import FORMS
from ropeexport.decoder.verify import tolerance, verify_decoder
from ropeexport.decoder.weights import geometry, seeded_weights
from ropeexport.families.rope.oracle import rope_oracle
from ropeexport.graph.onnx_io import save_model
from ropeexport.report.views import ScenarioRecord
from ropeexport.runtimes.ort import OrtRunner
from tests.decoder.test_planted import LLAMA, PHI3

# transformers' dynamic NTK takes max_position_embeddings as its original length: 256 here, over a 512 table.
DYNAMIC = {**LLAMA, "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}
CONFIGS = {"phi3-longrope": PHI3, "llama-dynamic": DYNAMIC}
CASES = [(name, graph) for name in CONFIGS for graph in FORMS]
# The whole-batch rule misses a row in another regime by this much of the logit scale, at least (measured here in
# every form: 0.21 for LongRoPE's short row, 6.4e-3 and 7.0e-2 for dynamic NTK's rows of other L); the tolerance is
# 1e-4, and each row alone matches its batched self to 5e-7.
MISSED = 1e-3


def _decoder(name: str, graph: str, folder: Path) -> tuple[Any, dict[str, np.ndarray], OrtRunner]:
    spec, _ = resolve(DecoderRequest(config=CONFIGS[name], name=name, graph=graph))
    weights = seeded_weights(spec)
    save_model(build_decoder_graph(spec, weights, "seeded"), folder)
    return spec, weights, OrtRunner(folder / "model.onnx", providers=["CPUExecutionProvider"])


def _batch(limit: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(attention_mask, position_ids) [3, 14] left-padded, and each row's real tokens: 14 at limit - 10 (past the
    switch: L = limit + 4), 4 at limit - 10 (before it: L = limit - 6), 14 at limit + 100 (L = limit + 114).
    """  # noqa: D205
    rows = [(14, limit - 10), (4, limit - 10), (14, limit + 100)]
    n = max(real for real, _ in rows)
    mask = np.array([[0] * (n - real) + [1] * real for real, _ in rows], np.int64)
    first = np.array([start for _, start in rows], np.int64)[:, None]
    positions = first + np.maximum(np.cumsum(mask, axis=1) - 1, 0)  # padding at the row's first position
    return mask, positions, [real for real, _ in rows]


def _prefill(spec: Any, runner: OrtRunner, ids: np.ndarray, mask: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """logits [b, s, vocab] of a prefill with an empty cache."""
    feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": pos}
    for i in range(spec.num_layers):
        _, KV, d = geometry(spec, i)
        past_key, past_value, _, _ = cache_names(i)
        feeds[past_key] = feeds[past_value] = np.zeros((ids.shape[0], KV, 0, d), np.float32)
    return runner.infer(feeds)["logits"].astype(np.float64)


@pytest.mark.parametrize(("name", "graph"), CASES, ids=[f"{n}-{g}" for n, g in CASES])
def test_a_row_in_a_mixed_batch_is_the_row_alone(name: str, graph: str, tmp_path: Path) -> None:
    spec, weights, runner = _decoder(name, graph, tmp_path)
    position = spec.position_spec()
    limit = int(position.scaling_params["original_max_position_embeddings"])
    mask, pos, real = _batch(limit)
    ids = np.where(mask == 1, np.random.default_rng(0).integers(1, spec.vocab_size, mask.shape), 0)
    batched = _prefill(spec, runner, ids, mask, pos)
    weights64 = stored_float64(spec, weights)
    whole = lambda x, p: rope_oracle(position, x, p, int(p.max()) + 1)  # noqa: E731  # the longest row's L for all
    old = decoder_float64(spec, weights64, ids, pos, mask, rotate=whole)
    bound, longest = tolerance(spec), int(np.argmax(pos.max(axis=1)))
    for row, n in enumerate(real):
        alone = _prefill(spec, runner, ids[row : row + 1, -n:], mask[row : row + 1, -n:], pos[row : row + 1, -n:])[0]
        got = batched[row, -n:]
        scale = float(np.abs(alone).max())
        assert np.abs(got - alone).max() <= bound * scale, (row, np.abs(got - alone).max() / scale)
        missed = np.abs(got - old[row, -n:]).max() / scale
        if row == longest:
            assert missed <= bound, missed  # the two rules agree on the longest row
        elif position.scaling == "dynamic" or pos[row].max() < limit:  # a LongRoPE row past the switch agrees too
            assert missed > MISSED, (row, missed)


@pytest.mark.parametrize(("name", "graph"), CASES, ids=[f"{n}-{g}" for n, g in CASES])
def test_mixed_regime_scenarios_pass_per_row(name: str, graph: str, tmp_path: Path) -> None:
    spec, weights, runner = _decoder(name, graph, tmp_path)
    position = spec.position_spec()
    chosen = [s for s in scenarios(spec) if s.name.startswith("mixed-regimes")]
    assert [s.policy for s in chosen] == ["re-prefill", "keep"]
    verified = verify_decoder(runner.infer, spec, weights, recipe_for(position).piece(position), chosen=chosen)
    results = {r.name: r for r in map(ScenarioRecord, verified)}
    assert all(r.passed for r in results.values()), {n: r.summary.data for n, r in results.items()}
    again, kept = results["mixed-regimes"], results["mixed-regimes-keep"]
    assert any(" / " in regime for regime in again.summary.regimes)  # rows in different regimes in one call
    assert again.summary.re_prefills >= 1 and again.summary.regime_cost_rel is None
    # keep: the short row reads keys cached before its switch (reported, not judged); the long row is still judged
    partly = [c for c in kept.calls if c.stale_rows]
    assert partly and all(c.float64.rel <= tolerance(spec) for c in partly)
    assert all(f"ok; regime cost (rows {c.stale_rows})" in _row(dict(c.data)) for c in partly)  # the report says which
    assert kept.summary.regime_cost_rel > 1e-3
