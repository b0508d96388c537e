"""Verification of TUPE artifacts: probes, eager, a float64 oracle from the paper's equation, tables and guards.

Probes: the additive-bias probes (``families.bias.probes.bias_probes``: both ends of the range, row offsets, decode
calls sweeping the distances i - j >= 0), plus
- ``query-sweep``: queries at every position (in calls of 512) against keys 0, P/2 and P - 1: every row of the
  query table goes through the graph (the key table's rows are swept by the decode calls);
- for non-causal specs, ``keys-after-query``: a query at 0 against every key 0 .. max_distance + 2, so every bucket
  of keys after the query, and its saturation past max_distance, is seen.
The oracle is eq. 7-8 of the paper in float64 from the rounded weights (the model's data): it forms p_i U^Q and
p_j U^K for the positions in the call (never the stored tables), and takes T5's buckets from the logarithm formula
in float64, written out here; the graph's exact integer bucket boundaries must agree with it.
Tables: both stored projections against float64 p U at every row (at most half an ulp: rounded once).
Guards: calls with a position of -1 or max_positions, sent past the runner's checks, must fail in the graph.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from ropeexport.families.bias.probes import KPOS, QPOS, bias_feeds, bias_locate, bias_probes
from ropeexport.families.tupe.reference import tupe_scores, tupe_weights
from ropeexport.families.tupe.spec import TupeSpec
from ropeexport.numerics import ulp_distance
from ropeexport.recipes import Feeds, Probe
from ropeexport.tensors import to_torch

CHUNK = 512  # positions per sweep call
TABLE_MAX_ULP = 0.5  # rounded once to nearest


def _pair(name: str, q: Any, k: Any) -> Probe:
    return Probe(name, {QPOS: np.asarray(q, np.int64), KPOS: np.asarray(k, np.int64)})


def tupe_probes(spec: TupeSpec) -> tuple[list[Probe], dict[str, Any]]:
    """The additive-bias probes plus the query sweep and the keys after the query (module docstring)."""
    probes, coverage = bias_probes(spec)
    P = spec.max_positions
    keys = sorted({0, P // 2, P - 1})
    for start in range(0, P, CHUNK):
        queries = np.arange(start, min(P, start + CHUNK))
        probes.append(_pair(f"query-sweep[{queries[0]}..{queries[-1]}]", queries[None], [keys]))
    if not spec.causal:
        after = np.arange(min(P, spec.max_distance + 3))
        for start in range(0, len(after), CHUNK):
            part = after[start : start + CHUNK]
            probes.append(_pair(f"keys-after-query[{part[0]}..{part[-1]}]", [[0]], part[None]))
    coverage["query_table_rows"] = f"every row 0..{P - 1} as a query"
    coverage["tables"] = "every row of both stored projections against float64"
    return probes, coverage


def tupe_feeds(spec: TupeSpec, probe: Probe, rng: np.random.Generator) -> Feeds:
    """Standard-normal query and key for the probe's positions."""
    return bias_feeds(spec, probe, rng)


def tupe_eager(spec: TupeSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """The eager reference (``families.tupe.reference``) in the spec dtype."""
    qpos, kpos = torch.from_numpy(feeds[QPOS]), torch.from_numpy(feeds[KPOS])
    with torch.no_grad():
        scores = tupe_scores(spec, to_torch(feeds["query"]), to_torch(feeds["key"]), qpos, kpos)
    return {"scores": scores.float().numpy() if scores.dtype == torch.bfloat16 else scores.numpy()}


def tupe_locate(probe: Probe, output: str, index: tuple[int, ...]) -> dict[str, Any]:
    """(batch, head, i, j) -> the query and key positions of that logit."""
    return bias_locate(probe, output, index)


def tupe_check_tables(spec: TupeSpec, model_path: Path) -> list[dict[str, Any]]:
    """Each stored projection table against float64 p U at every row: shape, and the largest error in ulps."""
    model = onnx.load(str(model_path))
    names = ("pos_query_table", "pos_key_table")
    stored = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.name in names}
    w = tupe_weights(spec)
    results = []
    for name, projection in zip(names, ("pos_query", "pos_key"), strict=True):
        expected = w["position_embeddings"] @ w[projection]  # [P, h * d]
        result: dict[str, Any] = {"name": name, "expected_shape": list(expected.shape), "dtype": spec.dtype}
        table = stored.get(name)
        if table is None or list(table.shape) != list(expected.shape):
            got = None if table is None else list(table.shape)
            reason = f"expected shape {list(expected.shape)}, found {got}"
            result |= {"shape": got, "max_ulp": None, "passed": False, "reason": reason}
        else:
            ulps = ulp_distance(table, expected, spec.dtype)
            row = int(np.unravel_index(int(np.argmax(ulps)), ulps.shape)[0])
            worst = float(ulps.max())
            result |= {"shape": list(table.shape), "max_ulp": worst, "worst_row": row, "passed": worst <= TABLE_MAX_ULP}
        results.append(result)
    return results


def tupe_guards(spec: TupeSpec) -> list[tuple[str, Feeds]]:
    """Calls with one position just outside [0, max_positions), on either input: the graph itself must fail."""
    P = spec.max_positions
    rng = np.random.default_rng(0)
    cases = []
    for name, bad in ((QPOS, -1), (QPOS, P), (KPOS, -1), (KPOS, P)):
        positions = {QPOS: np.array([[0, P - 1]], np.int64), KPOS: np.array([[0, P - 1]], np.int64)}
        positions[name] = positions[name].copy()
        positions[name][0, 1] = bad
        cases.append((f"{name}={bad}", bias_feeds(spec, Probe("guard", positions), rng)))
    return cases
