"""Verification of a RoPE artifact: tables against float64, and outputs at probe positions against eager and float64.

Probes (each one call; each row's own L_b = max(position_ids[b]) + 1 picks a length-dependent schedule's regime):
- ``start`` and ``end`` of the table, rows with different offsets (left padding, KV-cache offsets), decode calls
  (seq 1) at the last position;
- ``unordered``: rows whose positions are not increasing and whose largest position sits mid-row in one row only,
  so an L taken from the last column, from another row or from the whole batch is caught (``row-offsets`` and
  ``decode`` also hold rows on both sides of a switch below max_positions);
- where the schedule has ``original_max_position_embeddings``: both sides of it (L = original and original + 1),
  and small positions in a call whose L selects the long regime;
- a sweep over **every** position 0..max_positions-1. Sweep calls feed one random vector per position, repeated
  across heads, so eager and float64 are computed once per position and broadcast: the cost grows with positions,
  not positions x heads. Per-head behaviour is covered by the other probes, which draw every head independently.
Guards: calls with a position of -1 and of max_positions, sent straight to the runtime (past the runner's own check),
must fail inside the graph.
M-RoPE (position_ids [3, b, s]): every probe above as text (the same row on every axis), each again with the axes
apart (``mrope.axes_apart``: every position on every axis, the other two elsewhere), prompts with image grids, text
after them and decode steps at rope_deltas (``mrope.image_probes``); a guard per axis.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from ropeexport.dtypes import DTYPES
from ropeexport.families.bias.probes import pair_extras
from ropeexport.families.rope import mrope
from ropeexport.families.rope.oracle import rope_oracle, rope_scores_oracle, rope_table_oracle
from ropeexport.families.rope.reference import reference_module, rope_scores
from ropeexport.families.rope.spec import MROPE_AXES, RopeSpec
from ropeexport.numerics import ulp_distance
from ropeexport.recipes import Feeds, Probe
from ropeexport.tensors import to_torch

CALL_ELEMENTS = 2**22  # input elements per sweep call (query and key; 16 MiB in fp32)
TABLE_MAX_ULP = 0.5  # rounded once to nearest: never more than half a unit in the last place


def _row(name: str, start: int, stop: int) -> Probe:
    return _probe(name, np.arange(start, stop, dtype=np.int64)[None, :])


def _probe(name: str, position_ids: np.ndarray) -> Probe:
    return Probe(name, {"position_ids": position_ids})


def rope_probes(spec: RopeSpec) -> tuple[list[Probe], dict[str, Any]]:
    """The probe calls for a spec (module docstring), and a description of their coverage."""
    P = spec.max_positions
    s = min(8, P)
    probes = [_row("start", 0, s), _row("end", P - s, P)]
    offsets = [0, P // 2 - s // 2, P - s]
    probes.append(_probe("row-offsets", np.stack([np.arange(o, o + s, dtype=np.int64) for o in offsets])))
    probes.append(_probe("decode", np.array([[P - 1], [0], [P // 2]], dtype=np.int64)))
    original = spec.scaling_params.get("original_max_position_embeddings")
    top = original if original is not None and original < P else P - 1
    # Row 1 holds the call's largest position in its middle; neither row ends with it. A call is never longer than
    # the table (ORT's fused RotaryEmbedding refuses that), so tiny tables get fewer columns.
    cols = min(5, P)
    scrambled = (np.array([[3, 0, 2, 1, 4], [6, 5, top, 7, 8]], dtype=np.int64) % P)[:, [2, 0, 1, 3, 4][:cols]]
    probes.append(_probe("unordered", scrambled))
    if original is not None and original < P:
        probes.append(_row("below-original", max(0, original - s), original))  # L = original
        probes.append(_row("above-original", max(0, original - s + 1), original + 1))  # L = original + 1
        low = np.concatenate([np.arange(min(s, original), dtype=np.int64), [original]])
        probes.append(_probe("long-regime-low-positions", low[None, :]))
    per_position = (spec.num_heads + spec.num_kv_heads) * spec.head_dim
    chunk = max(1, CALL_ELEMENTS // per_position)
    for first in range(0, P, chunk):
        last = min(P, first + chunk)
        probes.append(_row(f"sweep[{first}..{last - 1}]", first, last))
    coverage = {
        "positions_checked": P,
        "max_positions": P,
        "sweep": "every position (one vector per position, repeated across heads)",
        "tables": "every row against float64",
    }
    if spec.mrope_section:
        return _mrope_probes(spec, probes), coverage | {"axes": "every position on each axis, text and image grids"}
    return probes, coverage


def _mrope_probes(spec: RopeSpec, probes: list[Probe]) -> list[Probe]:
    """The one-axis probes as text and with the axes apart, then the image prompts ([3, b, s] each)."""
    out = []
    for p in probes:
        pos = p.positions["position_ids"]
        out.append(_probe(p.name, mrope.text_rows(pos)))
        out.append(_probe(f"{p.name}-axes-apart", mrope.axes_apart(pos, spec.max_positions)))
    out += [_probe(name, pos) for name, pos in mrope.image_probes(spec.max_positions).items()]
    return out


def rope_guards(spec: RopeSpec) -> list[tuple[str, Feeds]]:
    """Calls with positions outside the table that the graph itself must reject."""
    rng = np.random.default_rng(0)
    cases = []
    for bad in (-1, spec.max_positions):
        if spec.mrope_section:  # one axis out of range at a time: each axis's lookup must refuse it
            for axis, name in enumerate(MROPE_AXES):
                pos = np.zeros((len(MROPE_AXES), 1, 2), np.int64)
                pos[axis, 0, 1] = bad
                cases.append((f"position {bad} on {name}", rope_feeds(spec, _probe("guard", pos), rng)))
            continue
        cases.append((f"position {bad}", rope_feeds(spec, _probe("guard", np.array([[0, bad]], np.int64)), rng)))
    return cases


def check_tables(spec: RopeSpec, model_path: Path, prefix: str = "") -> list[dict[str, Any]]:
    """Each stored table against float64: shape, and the largest error in ulps of the table dtype.

    ``prefix``: the tables' name prefix where the rope artifact is a piece of a bigger graph (a block's ``rope/``).
    """
    model = onnx.load(str(model_path))
    names = {f"{prefix}cos_table": "cos_table", f"{prefix}sin_table": "sin_table"}
    stored = {names[t.name]: numpy_helper.to_array(t) for t in model.graph.initializer if t.name in names}
    regimes = rope_table_oracle(spec)
    results = []
    for index, name in enumerate(("cos_table", "sin_table")):
        expected = np.concatenate([regime[index] for regime in regimes])
        result: dict[str, Any] = {"name": name, "expected_shape": list(expected.shape), "dtype": spec.dtype}
        table = stored.get(name)
        if table is None or list(table.shape) != list(expected.shape):
            got = None if table is None else list(table.shape)
            result |= {
                "shape": got,
                "max_ulp": None,
                "passed": False,
                "reason": f"expected shape {list(expected.shape)}, found {got}",
            }
        else:
            ulps = ulp_distance(table, expected, spec.dtype)
            row = int(np.unravel_index(int(np.argmax(ulps)), ulps.shape)[0])
            result |= {
                "shape": list(table.shape),
                "max_ulp": float(ulps.max()),
                "worst_row": row,
                "passed": bool(ulps.max() <= TABLE_MAX_ULP),
            }
        results.append(result)
    return results


def _normal(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32).astype(DTYPES[dtype].np_dtype)


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()  # every bf16 value is a float32 value


def rope_feeds(spec: RopeSpec, probe: Probe, rng: np.random.Generator) -> Feeds:
    """Standard-normal query [b, num_heads, s, d] and key [b, num_kv_heads, s, d] for the probe's positions.

    Sweep probes get one vector per position repeated across heads (a stride-0 view; module docstring).
    """
    b, s = probe.positions["position_ids"].shape[-2:]  # [b, s], or M-RoPE's [3, b, s]
    if probe.name.startswith("sweep"):
        shared = _normal(rng, (b, 1, s, spec.head_dim), spec.dtype)
        query = np.broadcast_to(shared, (b, spec.num_heads, s, spec.head_dim))
        key = np.broadcast_to(shared, (b, spec.num_kv_heads, s, spec.head_dim))
    else:
        query = _normal(rng, (b, spec.num_heads, s, spec.head_dim), spec.dtype)
        key = _normal(rng, (b, spec.num_kv_heads, s, spec.head_dim), spec.dtype)
    return {"query": query, "key": key, "position_ids": probe.positions["position_ids"]}


def _per_head(fn: Any, x: np.ndarray) -> np.ndarray:
    """fn(x) for x [b, h, s, d]; when every head is the same view (stride 0), computed once and broadcast."""
    if x.shape[1] > 1 and x.strides[1] == 0:
        return np.broadcast_to(fn(x[:, :1]), x.shape)
    return fn(x)


def rope_eager(spec: RopeSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """The eager reference module's outputs in the artifact dtype."""
    module = reference_module(spec)
    pos = torch.from_numpy(feeds["position_ids"])

    def rotate(x: np.ndarray) -> np.ndarray:  # each row at its own L
        with torch.no_grad():
            return _numpy(module.apply_rotation(to_torch(np.ascontiguousarray(x)), pos))

    return {"query_out": _per_head(rotate, feeds["query"]), "key_out": _per_head(rotate, feeds["key"])}


def rope_float64(spec: RopeSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """The float64 oracle's outputs."""
    pos = feeds["position_ids"]
    rotate = lambda x: rope_oracle(spec, x, pos)  # noqa: E731
    return {"query_out": _per_head(rotate, feeds["query"]), "key_out": _per_head(rotate, feeds["key"])}


def rope_locate(probe: Probe, output: str, index: tuple[int, ...]) -> dict[str, Any]:
    """(batch, head, seq, channel) -> where that element sits (M-RoPE: its time position, and every axis's)."""
    b, h, s, d = index
    pos = probe.positions["position_ids"]
    if pos.ndim == 3:
        axes = {name: int(pos[a, b, s]) for a, name in enumerate(MROPE_AXES)}
        return {"batch": b, "head": h, "position": axes["time"], "axes": axes, "channel": d}
    return {"batch": b, "head": h, "position": int(pos[b, s]), "channel": d}


def scores_probes(spec: RopeSpec) -> tuple[list[Probe], dict[str, Any]]:
    """Self-attention calls at the rope probes' positions, plus decode calls (one query against a window)."""
    base, coverage = rope_probes(spec)
    probes = []
    for p in base:
        pos = p.positions["position_ids"][:, :64]  # scores grow with q_len * k_len: keep calls small
        probes.append(Probe(p.name, {"query_position_ids": pos, "key_position_ids": pos}))
    P = spec.max_positions
    probes += pair_extras(P, causal=True, artifact="scores")  # batched decode, chunked prefill
    # Keys far past every query: an L taken from the query positions alone picks the wrong regime here.
    keys = np.unique(np.concatenate([np.arange(min(P, 32)), np.linspace(0, P - 1, num=min(P, 32)).astype(np.int64)]))
    probes.append(
        Probe(
            "keys-beyond-queries",
            {"query_position_ids": np.arange(min(P, 8), dtype=np.int64)[None], "key_position_ids": keys[None]},
        )
    )
    for name, q in (("decode-at-end", P - 1), ("decode-at-middle", P // 2)):
        keys = np.unique(np.linspace(0, q, num=min(q + 1, 32)).astype(np.int64))
        probes.append(Probe(name, {"query_position_ids": np.array([[q]], np.int64), "key_position_ids": keys[None]}))
    coverage["sweep"] += " (first 64 positions of each sweep call as queries and keys)"
    return probes, coverage


def scores_feeds(spec: RopeSpec, probe: Probe, rng: np.random.Generator) -> Feeds:
    """Standard-normal query [b, num_heads, q_len, d] and key [b, num_kv_heads, k_len, d]."""
    qpos, kpos = probe.positions["query_position_ids"], probe.positions["key_position_ids"]
    return {
        "query": _normal(rng, (qpos.shape[0], spec.num_heads, qpos.shape[1], spec.head_dim), spec.dtype),
        "key": _normal(rng, (kpos.shape[0], spec.num_kv_heads, kpos.shape[1], spec.head_dim), spec.dtype),
        "query_position_ids": qpos,
        "key_position_ids": kpos,
    }


def scores_eager(spec: RopeSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """Eager logits of the rotated pair in the artifact dtype."""
    t = {
        k: (to_torch(v) if v.dtype.kind == "f" or v.dtype.name == "bfloat16" else torch.from_numpy(v))
        for k, v in feeds.items()
    }
    with torch.no_grad():
        scores = rope_scores(
            reference_module(spec), t["query"], t["key"], t["query_position_ids"], t["key_position_ids"]
        )
    return {"scores": _numpy(scores)}


def scores_float64(spec: RopeSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """float64 logits from the complex-form oracle."""
    return {
        "scores": rope_scores_oracle(
            spec, feeds["query"], feeds["key"], feeds["query_position_ids"], feeds["key_position_ids"]
        )
    }


def scores_locate(probe: Probe, output: str, index: tuple[int, ...]) -> dict[str, Any]:
    """(batch, head, i, j) -> the query and key positions of that logit."""
    b, h, i, j = index
    return {
        "batch": b,
        "head": h,
        "query_position": int(probe.positions["query_position_ids"][b, i]),
        "key_position": int(probe.positions["key_position_ids"][b, j]),
    }


def scores_guards(spec: RopeSpec) -> list[tuple[str, Feeds]]:
    """Calls with a query or a key position outside the table that the graph itself must reject."""
    rng = np.random.default_rng(0)
    good = np.array([[0, 1]], np.int64)
    cases = []
    for bad in (-1, spec.max_positions):
        wrong = np.array([[0, bad]], np.int64)
        for side, (q, k) in (("query", (wrong, good)), ("key", (good, wrong))):
            probe = Probe("guard", {"query_position_ids": q, "key_position_ids": k})
            cases.append((f"{side} position {bad}", scores_feeds(spec, probe, rng)))
    return cases


def rope_curve(probe: Probe, output: str) -> tuple[str, np.ndarray]:
    """Each output element's position (M-RoPE: its time axis): position_ids broadcast over heads and channels."""
    pos = probe.positions["position_ids"]
    return "position", (pos[0] if pos.ndim == 3 else pos)[:, None, :, None]


def scores_curve(probe: Probe, output: str) -> tuple[str, np.ndarray]:
    """Logits by relative distance i - j."""
    qpos, kpos = probe.positions["query_position_ids"], probe.positions["key_position_ids"]
    return "distance i-j", qpos[:, None, :, None] - kpos[:, None, None, :]
