"""Verification of a sinusoidal artifact: the stored table against float64, outputs against eager and float64.

The float64 oracle is written here from the paper's equation (Vaswani et al. 2017, section 3.5), channel by channel:
channel c of position p holds sin(p / base^(2 floor(c/2) / d)) when c is even and cos(...) when c is odd. It shares
no code with the reference module's table.

Probes (each one call):
- ``apply``: the start and the end of the table, rows with different offsets (left padding), decode calls (seq 1),
  and a sweep over every position when the inputs stay small (at most ``SWEEP_ELEMENTS`` in all), else every k-th
  position plus the 8 around every power of two;
- ``scores``: self-attention at the start and end, rows with offsets, decode calls (one query against keys spread
  over [0, query]), and self-attention over consecutive blocks of 64 positions covering the table (or every k-th
  block when there are more than ``SCORES_BLOCKS``).
The stored table is checked at every row, so every row is covered whatever the sweep's stride. "Rounded once" is
judged against the float64 oracle allowing for the oracle's own error: two float64 evaluations of an angle near
4096 rad differ by ~1e-12, which is most of a float32 ulp where sin or cos crosses zero (ulp ~1e-13 there). So the
reported ulps are those beyond ``FLOAT64_SLACK * max(|angle|, 1)``, and must stay <= 0.5.
Guards: calls with a position of -1 and of max_positions (on each position input), sent straight to the runtime past
the runner's own check, must fail inside the graph.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from numpy.typing import ArrayLike
from onnx import numpy_helper

from ropeexport.dtypes import DTYPES
from ropeexport.families.bias.probes import pair_extras, pair_windows
from ropeexport.families.sinusoidal.oracle import pe_angles, pe_oracle
from ropeexport.families.sinusoidal.reference import SinusoidalEmbedding, sinusoidal_scores
from ropeexport.families.sinusoidal.spec import SinusoidalSpec
from ropeexport.recipes import KPOS, QPOS, Feeds, Probe
from ropeexport.tensors import to_torch

SWEEP_ELEMENTS = 2**24  # x elements the apply sweep may feed in all (a few seconds of eager + float64 on 2 cores)
CALL_ELEMENTS = 2**20  # x elements per sweep call
SCORES_BLOCK = 64  # positions per self-attention block of the scores sweep
SCORES_BLOCKS = 64  # blocks at most
TABLE_MAX_ULP = 0.5  # rounded once to nearest: never more than half a unit in the last place
# Bound on a float64 sin/cos of pos / base^(2i/d), relative to max(|angle|, 1): the angle carries a few float64
# roundings (2^-53 each) and sin/cos one more; 2^-49 leaves a factor of 4 over that.
FLOAT64_SLACK = 2.0**-49
CHECK_ROWS = 4096  # table rows per block of the table check


def _row(name: str, start: int, stop: int) -> Probe:
    return Probe(name, {"position_ids": np.arange(start, stop, dtype=np.int64)[None, :]})


def apply_probes(spec: SinusoidalSpec) -> tuple[list[Probe], dict[str, Any]]:
    """The ``apply`` probe calls (module docstring) and the coverage they give."""
    P = spec.max_positions
    s = min(8, P)
    probes = [_row("start", 0, s), _row("end", P - s, P)]
    offsets = np.stack([np.arange(o, o + s, dtype=np.int64) for o in (0, P // 2 - s // 2, P - s)])
    probes.append(Probe("row-offsets", {"position_ids": offsets}))
    probes.append(Probe("decode", {"position_ids": np.array([[P - 1], [0], [P // 2]], dtype=np.int64)}))
    stride = max(1, -(-P * spec.d_model // SWEEP_ELEMENTS))
    positions = set(range(0, P, stride)) | {P - 1}
    if stride > 1:
        k = 1
        while k < P:
            positions |= {p for p in range(k - 4, k + 4) if 0 <= p < P}
            k *= 2
    ordered = np.array(sorted(positions), dtype=np.int64)
    chunk = max(1, CALL_ELEMENTS // spec.d_model)
    for i in range(0, len(ordered), chunk):
        part = ordered[i : i + chunk]
        probes.append(Probe(f"sweep[{part[0]}..{part[-1]}]", {"position_ids": part[None, :]}))
    coverage = {
        "positions_checked": len(ordered),
        "max_positions": P,
        "sweep": "every position" if stride == 1 else f"every {stride}th position plus 8 around each power of two",
        "tables": "every row against float64",
    }
    return probes, coverage


def _pair(name: str, q: ArrayLike, k: ArrayLike) -> Probe:
    return Probe(name, {QPOS: np.asarray(q, np.int64), KPOS: np.asarray(k, np.int64)})


def scores_probes(spec: SinusoidalSpec) -> tuple[list[Probe], dict[str, Any]]:
    """The ``scores`` probe calls (module docstring) and the coverage they give."""
    P = spec.max_positions
    probes = pair_windows(P)
    for name, q in (("decode-at-end", P - 1), ("decode-at-middle", P // 2)):
        keys = np.unique(np.linspace(0, q, num=min(q + 1, 64)).astype(np.int64))
        probes.append(_pair(name, [[q]], keys[None]))
    probes += pair_extras(P, causal=False, artifact="scores")
    starts = list(range(0, P, SCORES_BLOCK))
    step = max(1, -(-len(starts) // SCORES_BLOCKS))
    chosen = starts[::step] + ([starts[-1]] if (len(starts) - 1) % step else [])
    for b0 in chosen:
        block = np.arange(b0, min(b0 + SCORES_BLOCK, P))[None]
        probes.append(_pair(f"block[{b0}..{block[0, -1]}]", block, block))
    covered = len(np.unique(np.concatenate([np.arange(b, min(b + SCORES_BLOCK, P)) for b in chosen])))
    coverage = {
        "positions_checked": covered,
        "max_positions": P,
        "sweep": f"self-attention over {len(chosen)} of {len(starts)} blocks of {SCORES_BLOCK} positions",
        "tables": "every row against float64",
    }
    return probes, coverage


def check_tables(spec: SinusoidalSpec, model_path: Path) -> list[dict[str, Any]]:
    """The stored ``pe_table`` against float64: its shape, and its ulps beyond the oracle's error (module docstring)."""
    model = onnx.load(str(model_path))
    stored = {t.name: t for t in model.graph.initializer}
    P, width = spec.max_positions, spec.width
    result: dict[str, Any] = {"name": "pe_table", "expected_shape": [P, width], "dtype": spec.dtype}
    table = numpy_helper.to_array(stored["pe_table"]) if "pe_table" in stored else None
    if table is None or list(table.shape) != [P, width]:
        got = None if table is None else list(table.shape)
        return [
            result | {"shape": got, "max_ulp": None, "passed": False, "reason": f"expected [{P}, {width}], found {got}"}
        ]
    worst, worst_row = 0.0, 0
    for start in range(0, P, CHECK_ROWS):  # in blocks of rows: the float64 temporaries stay small
        positions = np.arange(start, min(start + CHECK_ROWS, P))
        expected = pe_oracle(positions, width, spec.base)
        slack = FLOAT64_SLACK * np.maximum(np.abs(pe_angles(positions, width, spec.base)), 1.0)
        error = np.maximum(np.abs(table[positions].astype(np.float64) - expected) - slack, 0.0)
        ulps = (error / DTYPES[spec.dtype].ulp(expected)).max(axis=1)
        if ulps.max() > worst or start == 0:
            worst, worst_row = float(ulps.max()), start + int(np.argmax(ulps))
    return [
        result
        | {"shape": [P, width], "max_ulp": worst, "worst_row": worst_row, "passed": worst <= TABLE_MAX_ULP}
        | {"float64_slack": "2^-49 * max(|angle|, 1)"}
    ]


def _bad_positions(spec: SinusoidalSpec) -> list[tuple[str, np.ndarray]]:
    """(label, position_ids [1, 2]) pairs holding one valid and one invalid position."""
    return [(f"position {bad}", np.array([[0, bad]], np.int64)) for bad in (-1, spec.max_positions)]


def apply_guards(spec: SinusoidalSpec) -> list[tuple[str, Feeds]]:
    """Calls with a position outside the table that the graph itself must reject."""
    rng = np.random.default_rng(0)
    return [(label, apply_feeds(spec, Probe("guard", {"position_ids": p}), rng)) for label, p in _bad_positions(spec)]


def scores_guards(spec: SinusoidalSpec) -> list[tuple[str, Feeds]]:
    """Calls with a query or a key position outside the table that the graph itself must reject."""
    rng = np.random.default_rng(0)
    good = np.array([[0, 1]], np.int64)
    cases = []
    for label, wrong in _bad_positions(spec):
        for side, (q, k) in (("query", (wrong, good)), ("key", (good, wrong))):
            cases.append((f"{side} {label}", scores_feeds(spec, _pair("guard", q, k), rng)))
    return cases


def _normal(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32).astype(DTYPES[dtype].np_dtype)


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()  # every bf16 value is a float32 value


@lru_cache(maxsize=4)
def _module(spec: SinusoidalSpec) -> SinusoidalEmbedding:
    """The reference module of a spec, built once per verification (its table is the costly part)."""
    return SinusoidalEmbedding(spec)


def apply_feeds(spec: SinusoidalSpec, probe: Probe, rng: np.random.Generator) -> Feeds:
    """Standard-normal x [b, s, d_model] for the probe's positions."""
    b, s = probe.positions["position_ids"].shape
    return {"x": _normal(rng, (b, s, spec.d_model), spec.dtype), "position_ids": probe.positions["position_ids"]}


def apply_eager(spec: SinusoidalSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """The reference module's y in the artifact dtype."""
    with torch.no_grad():
        y = _module(spec)(to_torch(feeds["x"]), position_ids=torch.from_numpy(feeds["position_ids"]))
    return {"y": _numpy(y)}


def apply_locate(probe: Probe, output: str, index: tuple[int, ...]) -> dict[str, Any]:
    """(batch, seq, channel) -> where that element sits."""
    b, s, c = index
    return {"batch": b, "position": int(probe.positions["position_ids"][b, s]), "channel": c}


def scores_feeds(spec: SinusoidalSpec, probe: Probe, rng: np.random.Generator) -> Feeds:
    """Standard-normal query [b, num_heads, q_len, head_dim] and key [b, num_heads, k_len, head_dim]."""
    qpos, kpos = probe.positions[QPOS], probe.positions[KPOS]
    H, d = spec.num_heads, spec.head_dim
    return {
        "query": _normal(rng, (qpos.shape[0], H, qpos.shape[1], d), spec.dtype),
        "key": _normal(rng, (kpos.shape[0], H, kpos.shape[1], d), spec.dtype),
        QPOS: qpos,
        KPOS: kpos,
    }


def scores_eager(spec: SinusoidalSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """The reference module's logits in the artifact dtype."""
    with torch.no_grad():
        scores = sinusoidal_scores(
            _module(spec),
            to_torch(feeds["query"]),
            to_torch(feeds["key"]),
            torch.from_numpy(feeds[QPOS]),
            torch.from_numpy(feeds[KPOS]),
        )
    return {"scores": _numpy(scores)}


def scores_locate(probe: Probe, output: str, index: tuple[int, ...]) -> dict[str, Any]:
    """(batch, head, i, j) -> the query and key positions of that logit."""
    b, h, i, j = index
    return {
        "batch": b,
        "head": h,
        "query_position": int(probe.positions[QPOS][b, i]),
        "key_position": int(probe.positions[KPOS][b, j]),
    }


def apply_curve(probe: Probe, output: str) -> tuple[str, np.ndarray]:
    """Each element of y [b, s, d_model] by its position."""
    return "position", probe.positions["position_ids"][:, :, None]
