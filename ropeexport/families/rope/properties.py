"""RoPE's claims (Su et al. 2021), measured on a ``rope`` artifact through a runtime (not on the reference module).

- relative invariance: <f(q, m), f(k, n)> depends only on m - n. The same q and k are placed at several (m, n)
  pairs with one m - n in a single call; their dot products must agree.
- norm preservation: each rotated pair keeps its norm (times the schedule's attention factor, YaRN/LongRoPE).
- partial rotation: channels past rotary_dim come out bit-identical.
- long-term decay (RoFormer, section 3.4.3): with q = k = all ones, <f(q, 0), f(k, n)> / r = mean_i cos(n theta_i).
  The curve is read off the artifact at distances up to max_positions - 1, and must match the float64 formula; it is
  plotted in the report.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropeexport.dtypes import DTYPES
from ropeexport.families.rope.schedules import get_schedule
from ropeexport.properties import close as _close
from ropeexport.recipes import Infers

DECAY_POINTS = 512  # distances sampled for the decay curve (log-spaced, plus 0..63)


def _rope_call(spec: Any, runner: Infers, query: np.ndarray, key: np.ndarray, positions: np.ndarray) -> dict:
    """Run the rope artifact: query/key [1, 1, s, d] broadcast over heads, positions [s]."""
    dtype = DTYPES[spec.dtype].np_dtype
    s, d = positions.size, spec.head_dim
    feeds = {
        "query": np.broadcast_to(query.astype(dtype), (1, spec.num_heads, s, d)),
        "key": np.broadcast_to(key.astype(dtype), (1, spec.num_kv_heads, s, d)),
        "position_ids": positions.astype(np.int64)[None, :],
    }
    if spec.mrope_section:  # text: the same positions on every axis, where the claims hold as for one axis
        feeds["position_ids"] = np.repeat(feeds["position_ids"][None], len(spec.mrope_section), axis=0)
    return runner.infer(feeds)


def rope_properties(spec: Any, runner: Infers) -> list[dict[str, Any]]:
    """The RoPE claims above, measured on a ``rope`` artifact."""
    P, d, r = spec.max_positions, spec.head_dim, spec.rotary_dim
    rng = np.random.default_rng(7)
    out: list[dict[str, Any]] = []
    if P < 4:
        return [
            {"name": name, "passed": None, "summary": f"not measured: a table of {P} positions is too short"}
            for name in ("relative invariance", "long-term decay")
        ]
    # Relative invariance: q at m, k at n for several (m, n) with the same m - n, in one call (so one regime).
    gap = min(5, P - 1)
    # 2 * len(starts) tokens in one call: ORT's fused RotaryEmbedding refuses a call longer than its table.
    starts = np.unique(np.linspace(0, P - 1 - gap, num=max(1, min(16, P - gap, P // 2))).astype(np.int64))
    q = rng.standard_normal(d)
    k = rng.standard_normal(d)
    positions = np.concatenate([starts + gap, starts])  # m = start + gap, n = start
    s = starts.size
    result = _rope_call(spec, runner, np.tile(q, (1, 1, 2 * s, 1)), np.tile(k, (1, 1, 2 * s, 1)), positions)
    qo = result["query_out"][0, 0, :s].astype(np.float64)
    ko = result["key_out"][0, 0, s:].astype(np.float64)
    dots = np.einsum("sd,sd->s", qo, ko)
    ok, worst = _close(dots, np.full_like(dots, dots[0]), spec.dtype, scale=np.sqrt(d))
    out.append(
        {
            "name": "relative invariance",
            "passed": ok,
            "summary": f"<f(q,m), f(k,m-{gap})> over {s} values of m between {int(starts[0]) + gap} and "
            f"{int(starts[-1]) + gap}: spread {worst:.3g}",
        }
    )
    # Norm preservation and the untouched tail, on random vectors at spread positions.
    positions = np.unique(np.linspace(0, P - 1, num=min(64, P)).astype(np.int64))
    x = rng.standard_normal((1, 1, positions.size, d))
    result = _rope_call(spec, runner, x, x, positions)
    y = result["query_out"][0, 0].astype(np.float64)
    xs = x[0, 0].astype(DTYPES[spec.dtype].np_dtype).astype(np.float64)
    length = int(positions.max()) + 1
    factor = get_schedule(spec.scaling).frequencies(r, spec.theta, spec.scaling_params, length).attention_factor
    pair = lambda v: (v[:, : r // 2], v[:, r // 2 : r]) if spec.layout == "half" else (v[:, 0:r:2], v[:, 1:r:2])  # noqa: E731
    norms_in = np.hypot(*pair(xs)) * factor
    norms_out = np.hypot(*pair(y))
    ok, worst = _close(norms_out, norms_in, spec.dtype, scale=2.0)
    out.append(
        {
            "name": "norm preservation",
            "passed": ok,
            "summary": f"|rotated pair| = {factor:.6g} x |input pair| at {positions.size} positions: worst {worst:.3g}",
        }
    )
    if r < d:
        same = bool(np.array_equal(y[:, r:], xs[:, r:]))
        out.append(
            {
                "name": "partial rotation tail untouched",
                "passed": same,
                "summary": f"channels {r}..{d - 1} bit-identical to the input" if same else "tail changed",
            }
        )
    # Long-term decay: q = k = ones, query at 0 (the identity rotation) and keys at distance n.
    distances = np.unique(
        np.concatenate([np.arange(min(64, P)), np.geomspace(1, P - 1, DECAY_POINTS).astype(np.int64)])
    )
    curve, want = [], []
    chunk = max(1, min(1024, P - 1))  # plus the query at 0: never more tokens than the table has rows
    schedule = get_schedule(spec.scaling)
    for i in range(0, distances.size, chunk):
        part = np.concatenate([[0], distances[i : i + chunk]])
        ones = np.ones((1, 1, part.size, d))
        result = _rope_call(spec, runner, ones, ones, part)
        q0 = result["query_out"][0, 0, 0, :r].astype(np.float64)
        kn = result["key_out"][0, 0, 1:, :r].astype(np.float64)
        curve.append(kn @ q0)
        # Each call's own L = max(position) + 1 picks a length-dependent schedule's frequencies (dynamic NTK):
        # the expected curve of a chunk uses that chunk's L, never the largest distance of the whole curve.
        freqs = schedule.frequencies(r, spec.theta, spec.scaling_params, int(part.max()) + 1)
        want.append(np.cos(np.outer(part[1:], freqs.inv_freq)).mean(axis=1))
    measured = np.concatenate(curve) / (r * factor**2)
    expected = np.concatenate(want)
    ok, worst = _close(measured, expected, spec.dtype, scale=4.0)
    early = float(np.abs(measured[distances < 16]).mean())
    far = distances >= max(16, distances.max() // 2)
    late = float(np.abs(measured[far]).mean()) if far.any() else float("nan")
    out.append(
        {
            "name": "long-term decay",
            "passed": ok,
            "summary": f"mean cos(n theta_i) from the artifact matches float64 (worst {worst:.3g}); "
            f"mean |.| {early:.3f} for n < 16, {late:.3f} in the far half",
            "curve": {
                "x_label": "relative distance n",
                "y_label": "mean_i cos(n theta_i)",
                "x": distances.tolist(),
                "y": measured.tolist(),
            },
        }
    )
    return out


def regime(spec: Any, length: int) -> Any:
    """Which frequencies a call of length L uses: shifts are only compared within one regime."""
    schedule_name = getattr(spec, "scaling", None)
    if schedule_name is None:
        return None
    schedule = get_schedule(schedule_name)
    threshold = schedule.threshold(spec.scaling_params)
    if threshold is None or length <= threshold:
        return "base"
    return "long" if schedule.regime == "switch" else length  # dynamic NTK: every L past the original differs
