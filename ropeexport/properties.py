"""Claims every relative method makes, measured on the artifact through a runtime (not on the reference modules).

Relative methods (RoPE, ALiBi, Shaw, T5, KERPLE, Sandwich, Transformer-XL): ``scores`` (and ``bias``) unchanged when
every query and key position shifts by the same amount. A family's own claims live in its package (RoPE's in
``families.rope.properties``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropeexport.recipes import Feeds, Infers, Probe
from ropeexport.tolerances import TOLERANCES


def close(a: np.ndarray, b: np.ndarray, dtype: str, scale: float = 1.0) -> tuple[bool, float]:
    """Within the dtype's tolerance (scaled), and the largest difference."""
    tol = TOLERANCES[dtype]
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    with np.errstate(invalid="ignore"):
        diff = np.where(a == b, 0.0, np.abs(a - b))  # equal infinities (masked logits) agree
    diff[np.isnan(diff)] = np.inf
    worst = float(diff.max(initial=0.0))
    limit = (tol.atol + tol.rtol * np.where(np.isfinite(b), np.abs(b), 0.0)) * scale
    return bool((diff <= limit).all()), worst


def shift_invariance(feeds_fn: Any, output: str, regime: Any = None) -> Any:
    """A property function: the artifact's ``output`` unchanged when every position shifts by one amount.

    ``regime(spec, L)`` names the frequencies a call of length L uses (length-dependent RoPE schedules): a shift that
    changes L = max + 1 may change them, which is right, not a failure, so shifts are compared only within one regime.
    Without it every shift is one regime.
    """

    def check(spec: Any, runner: Infers) -> list[dict[str, Any]]:
        P = spec.max_positions
        if P < 3:
            return []
        span = min(8, P // 2)
        qpos = np.arange(span, dtype=np.int64)[None, :]
        kpos = np.arange(span, dtype=np.int64)[None, :]
        probe = Probe("shift", {"query_position_ids": qpos, "key_position_ids": kpos})
        base = feeds_fn(spec, probe, np.random.default_rng(3))

        def run(shift: int) -> np.ndarray:
            feeds: Feeds = dict(base) | {"query_position_ids": qpos + shift, "key_position_ids": kpos + shift}
            return runner.infer(feeds)[output]

        groups: dict[Any, list[int]] = {}
        for shift in sorted({0, 1, P // 3, P - span}):
            groups.setdefault(regime(spec, span + shift) if regime else None, []).append(shift)
        compared, worst_all, ok_all = [], 0.0, True
        for shifts in groups.values():
            if len(shifts) < 2:
                continue
            reference = run(shifts[0])
            for shift in shifts[1:]:
                ok, worst = close(run(shift), reference, spec.dtype)
                ok_all &= ok
                worst_all = max(worst_all, worst)
                compared.append(shift - shifts[0])
        if not compared:
            return [
                {
                    "name": "shift invariance",
                    "passed": None,
                    "summary": "not measured: every shift that fits changes the schedule's regime",
                }
            ]
        summary = f"{output} with every position shifted by {compared} (within one schedule regime)"
        return [{"name": "shift invariance", "passed": ok_all, "summary": f"{summary}: largest change {worst_all:.3g}"}]

    return check
