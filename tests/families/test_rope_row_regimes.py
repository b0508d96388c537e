"""Each batch row in its own RoPE regime (``families.rope.regimes``): L_b = max(position_ids[b]) + 1, per row.

Case table: artifact kind x schedule (LongRoPE's switch, dynamic NTK's base) x graph form. One batch holds a row past
original_max_position_embeddings, one before it and (for dynamic NTK, another L) one further past it. Each row's
output must equal that row run alone, match its own float64 truth, and, for every row whose L_b is not the longest
row's, differ from the whole-batch rule's float64 truth (every row at the longest row's L) by far more than the
tolerance: a graph with the old rule fails here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

import ropeexport as rx
from ropeexport.block.oracle import block_float64
from ropeexport.block.probes import STATIC_SPARE
from ropeexport.catalog import recipe_for
from ropeexport.families.rope.oracle import rope_oracle
from ropeexport.families.rope.positions import rope_of, rotate64
from ropeexport.recipes import Probe
from tests.cases import ORIGINAL, small_spec

pytestmark = pytest.mark.fast  # RoPE's per-row regimes against float64, 256 positions

# Row 0 past the switch (L = ORIGINAL + 10), row 1 before it (L = 6), row 2 further past it (L = ORIGINAL + 46).
PROMPTS = np.array([np.arange(ORIGINAL + 4, ORIGINAL + 10), np.arange(6), np.arange(ORIGINAL + 40, ORIGINAL + 46)])
# A block's decode rows at those L, over a cache of 5 tokens.
DECODES = PROMPTS[:, -1:]
FORMS = {"rope": ("fused", "decomposed"), "scores": ("fused", "decomposed"),
         "block": ("fused", "decomposed", "gqa", "tensorrt", "static-cache")}  # fmt: skip
CASES = [(artifact, scaling, graph) for artifact, graphs in FORMS.items() for scaling in ("longrope", "dynamic")
         for graph in graphs]  # fmt: skip
# The whole-batch rule misses a row whose L differs from the longest by this much of the output's scale, at least
# (measured on these specs, every kind and form: 0.026-1.2); the graph matches each row's own truth to 1e-5 of it.
MISSED = 1e-2


def _spec(artifact: str, scaling: str, graph: str) -> Any:
    fields = small_spec(scaling=scaling, graph=graph, artifact=artifact)
    return rx.spec("rope", **fields)


def _probe(artifact: str, graph: str) -> Probe:
    if artifact == "rope":
        return Probe("mixed-regimes", {"position_ids": PROMPTS})
    if artifact == "scores":
        return Probe("mixed-regimes", {"query_position_ids": PROMPTS, "key_position_ids": PROMPTS})
    mask = np.ones((len(DECODES), 6), np.int64)  # five cached tokens, then the new one
    if graph != "static-cache":
        return Probe("mixed-regimes", {"position_ids": DECODES}, {"attention_mask": mask})
    # a static buffer: the same five tokens cached in each row (cache_length), unused slots after them
    buffer = np.hstack([mask, np.zeros((len(DECODES), STATIC_SPARE), np.int64)])
    lengths = np.full(len(DECODES), 5, np.int64)
    return Probe("mixed-regimes", {"position_ids": DECODES}, {"attention_mask": buffer, "cache_length": lengths})


def _whole_batch(artifact: str, spec: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The old rule's float64 truth: every row at the longest row's L."""
    positions = [v for k, v in feeds.items() if k.endswith("position_ids")]
    length = int(max(p.max() for p in positions)) + 1
    if artifact == "block":
        return block_float64(spec, feeds, rotate64(rope_of(spec), length), None)
    rotated = {name: rope_oracle(spec, feeds[name], pos, length)
               for name, pos in (("query", positions[0]), ("key", positions[-1]))}  # fmt: skip
    if artifact == "rope":
        return {"query_out": rotated["query"], "key_out": rotated["key"]}
    keys = np.repeat(rotated["key"], spec.num_heads // spec.num_kv_heads, axis=1)
    return {"scores": np.einsum("bhid,bhjd->bhij", rotated["query"], keys) / np.sqrt(spec.head_dim)}


def _rows_alone(session: ort.InferenceSession, feeds: dict[str, np.ndarray], b: int) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs()]
    alone = [session.run(names, {k: v[r : r + 1] for k, v in feeds.items()}) for r in range(b)]
    return {name: np.concatenate([a[i] for a in alone]) for i, name in enumerate(names)}


@pytest.mark.parametrize(("artifact", "scaling", "graph"), CASES, ids=["-".join(c) for c in CASES])
def test_each_row_takes_its_own_regime(artifact: str, scaling: str, graph: str) -> None:
    spec = _spec(artifact, scaling, graph)
    kind = recipe_for(spec)
    feeds = kind.feeds(spec, _probe(artifact, graph), np.random.default_rng(0))
    session = ort.InferenceSession(kind.export(spec).SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    batched = dict(zip(names, session.run(names, feeds), strict=True))
    alone = _rows_alone(session, feeds, len(PROMPTS))
    truth, old = kind.oracle(spec, feeds), _whole_batch(artifact, spec, feeds)
    longest = int(np.argmax(PROMPTS[:, -1]))
    for name in ("query_out", "key_out", "scores", "output"):
        if name not in truth:
            continue
        got = batched[name].astype(np.float64)
        scale = float(np.abs(truth[name]).max())
        # a row batched is the row alone (the same arithmetic on its own L_b)
        assert np.abs(got - alone[name]).max() <= 1e-6 * scale, name
        assert np.abs(got - truth[name]).max() <= 1e-5 * scale, name  # each row's own float64 truth
        for row in range(len(PROMPTS)):
            if row == longest:
                assert np.abs(got[row] - old[name][row]).max() <= 1e-5 * scale  # the rules agree on the longest
                continue
            if scaling == "longrope" and PROMPTS[row, -1] >= ORIGINAL:  # past the switch, like the longest row
                continue
            missed = np.abs(got[row] - old[name][row]).max() / scale
            assert missed > MISSED, (name, row, missed)
