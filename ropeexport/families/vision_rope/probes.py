"""Verification of a 2-D vision RoPE artifact: tables against float64, outputs per patch against eager and float64.

Probes (each one call; position_ids [2, b, s], height then width):
- ``grid-at-origin`` and ``grid-at-end``: an image's patches in row-major order (transformers' meshgrid, Pixtral's
  order), from (0, 0) and ending at (P - 1, P - 1); ``merge-order``: a grid in Qwen2.5-VL's block-major order of
  2 x 2 merge blocks (``get_vision_position_ids``); ``row-offsets``: three batch rows holding different grids;
- ``sweep``: every position on each axis, the other axis elsewhere (height p with width P - 1 - p, then width p with
  height (p + P/2) mod P), so an axis read in the other's place, or one frequency set used for both, moves pairs at
  every position but the crossing ones. Sweep calls feed one random vector per patch, repeated across heads (cost in
  patches, not patches x heads); the other probes draw every head.
- ``every-patch``: every (height, width) of the table when P^2 patches fit in ``EVERY_PATCH_LIMIT``.
Guards: a position of -1 and of max_positions on each axis, sent straight to the runtime, must fail in the graph.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from ropeexport.dtypes import DTYPES
from ropeexport.families.vision_rope.oracle import table_oracle, vision_rope_oracle
from ropeexport.families.vision_rope.reference import VisionRotaryEmbedding
from ropeexport.families.vision_rope.spec import VISION_AXES, VisionRopeSpec
from ropeexport.numerics import ulp_distance
from ropeexport.recipes import Feeds, Probe
from ropeexport.tensors import to_torch

CALL_ELEMENTS = 2**22  # input elements per sweep call (query and key)
EVERY_PATCH_LIMIT = 4096  # P^2 patches at most for the every-patch probe (64 a side: Pixtral-12B's table)
TABLE_MAX_ULP = 0.5  # rounded once to nearest


def _grid(h: int, w: int, top: int = 0, left: int = 0, merge: int = 1) -> np.ndarray:
    """[2, h * w] positions of an h x w patch grid at (top, left); ``merge`` > 1: block-major (Qwen2.5-VL)."""
    axes: list[np.ndarray] = list(np.meshgrid(np.arange(h), np.arange(w), indexing="ij"))  # [h, w] each
    if merge > 1:  # [h / m, w / m, m, m]: each merge block's patches together
        shape = (h // merge, merge, w // merge, merge)
        axes = [a.reshape(shape).transpose(0, 2, 1, 3) for a in axes]
    return np.stack([axes[0].reshape(-1) + top, axes[1].reshape(-1) + left]).astype(np.int64)


def _probe(name: str, position_ids: np.ndarray) -> Probe:
    return Probe(name, {"position_ids": np.ascontiguousarray(position_ids, dtype=np.int64)})


def vision_probes(spec: VisionRopeSpec) -> tuple[list[Probe], dict[str, Any]]:
    """The probe calls for a spec (module docstring), and a description of their coverage."""
    P = spec.max_positions
    side = max(1, min(4, P))
    probes = [
        _probe("grid-at-origin", _grid(side, min(side + 1, P))[:, None]),
        _probe("grid-at-end", _grid(side, side, P - side, P - side)[:, None]),
    ]
    if P >= 4:
        probes.append(_probe("merge-order", _grid(4, 4 if P < 6 else 6, merge=2)[:, None]))
    rows = [_grid(side, side, top, left) for top, left in ((0, P - side), (P - side, 0), ((P - side) // 2,) * 2)]
    probes.append(_probe("row-offsets", np.stack(rows, axis=1)))
    per_patch = 2 * spec.num_heads * spec.head_dim
    chunk = max(1, CALL_ELEMENTS // per_patch)
    p = np.arange(P, dtype=np.int64)
    for axis, pos in (("height", np.stack([p, P - 1 - p])), ("width", np.stack([(p + P // 2) % P, p]))):
        for first in range(0, P, chunk):
            name = f"sweep-{axis}[{first}..{min(P, first + chunk) - 1}]"
            probes.append(_probe(name, pos[:, None, first : first + chunk]))
    every = P * P <= EVERY_PATCH_LIMIT
    if every:
        grid = _grid(P, P)
        for first in range(0, P * P, chunk):
            probes.append(_probe(f"every-patch[{first}..{min(P * P, first + chunk) - 1}]",
                                 grid[:, None, first:first + chunk]))  # fmt: skip
    coverage = {
        "positions_checked": P,
        "max_positions": P,
        "sweep": "every position on each axis, the other axis apart"
        + ("; every (height, width) patch" if every else ""),
        "tables": "every row of both axes' tables against float64",
        "axes": "height, width",
    }
    return probes, coverage


def vision_guards(spec: VisionRopeSpec) -> list[tuple[str, Feeds]]:
    """Calls with one axis's position outside the table, which the graph itself must reject."""
    rng = np.random.default_rng(0)
    cases = []
    for bad in (-1, spec.max_positions):
        for a, axis in enumerate(VISION_AXES):
            pos = np.zeros((len(VISION_AXES), 1, 2), np.int64)
            pos[a, 0, 1] = bad
            cases.append((f"position {bad} on {axis}", vision_feeds(spec, _probe("guard", pos), rng)))
    return cases


def check_tables(spec: VisionRopeSpec, model_path: Path) -> list[dict[str, Any]]:
    """Each stored table against float64: shape, and the largest error in ulps of the table dtype."""
    model = onnx.load(str(model_path))
    expected_tables = table_oracle(spec)
    stored = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.name in expected_tables}
    results = []
    for name, expected in expected_tables.items():
        result: dict[str, Any] = {"name": name, "expected_shape": list(expected.shape), "dtype": spec.dtype}
        table = stored.get(name)
        if table is None or table.shape != expected.shape:
            got = None if table is None else list(table.shape)
            result |= {"shape": got, "max_ulp": None, "passed": False,
                       "reason": f"expected shape {list(expected.shape)}, found {got}"}  # fmt: skip
        else:
            ulps = ulp_distance(table, expected, spec.dtype)
            result |= {"shape": list(table.shape), "max_ulp": float(ulps.max()),
                       "worst_row": int(np.unravel_index(int(np.argmax(ulps)), ulps.shape)[0]),
                       "passed": bool(ulps.max() <= TABLE_MAX_ULP)}  # fmt: skip
        results.append(result)
    return results


def _normal(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32).astype(DTYPES[dtype].np_dtype)


def vision_feeds(spec: VisionRopeSpec, probe: Probe, rng: np.random.Generator) -> Feeds:
    """Standard-normal query and key [b, num_heads, s, d]; sweep probes one vector per patch across heads."""
    b, s = probe.positions["position_ids"].shape[1:]
    shape = (b, spec.num_heads, s, spec.head_dim)
    if probe.name.startswith(("sweep", "every-patch")):
        query = np.broadcast_to(_normal(rng, (b, 1, s, spec.head_dim), spec.dtype), shape)
        key = np.broadcast_to(_normal(rng, (b, 1, s, spec.head_dim), spec.dtype), shape)
    else:
        query, key = _normal(rng, shape, spec.dtype), _normal(rng, shape, spec.dtype)
    return {"query": query, "key": key, "position_ids": probe.positions["position_ids"]}


def _per_head(fn: Any, x: np.ndarray) -> np.ndarray:
    """fn(x) for x [b, h, s, d]; when every head is the same view (stride 0), computed once and broadcast."""
    if x.shape[1] > 1 and x.strides[1] == 0:
        return np.broadcast_to(fn(x[:, :1]), x.shape)
    return fn(x)


def vision_eager(spec: VisionRopeSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """The eager reference module's outputs in the artifact dtype."""
    module = VisionRotaryEmbedding(spec)
    pos = torch.from_numpy(feeds["position_ids"])

    def rotate(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = module.rotate(to_torch(np.ascontiguousarray(x)), pos)
        return out.float().numpy() if out.dtype == torch.bfloat16 else out.numpy()

    return {"query_out": _per_head(rotate, feeds["query"]), "key_out": _per_head(rotate, feeds["key"])}


def vision_float64(spec: VisionRopeSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """The float64 oracle's outputs."""
    rotate = lambda x: vision_rope_oracle(spec, x, feeds["position_ids"])  # noqa: E731
    return {"query_out": _per_head(rotate, feeds["query"]), "key_out": _per_head(rotate, feeds["key"])}


def vision_locate(probe: Probe, output: str, index: tuple[int, ...]) -> dict[str, Any]:
    """(batch, head, seq, channel) -> the patch's height and width positions."""
    b, h, s, d = index
    pos = probe.positions["position_ids"]
    axes = {axis: int(pos[a, b, s]) for a, axis in enumerate(VISION_AXES)}
    return {"batch": b, "head": h, "position": axes["height"], "axes": axes, "channel": d}


def vision_curve(probe: Probe, output: str) -> tuple[str, np.ndarray]:
    """Each output element's height position, broadcast over heads and channels."""
    return "height position", probe.positions["position_ids"][0][:, None, :, None]
