"""How many positions an audit needs before its "exact" can fail: the config's schedule told apart from its neighbours.

The audit compares rows 0 .. L - 1 of a model's tables with the config's (``diagnose.compare``); with too few rows
every schedule agrees (row 0 is cos 1, sin 0 for every theta), and "exact" says nothing. The rule
(``smallest_positions``): a table is judged only where the rows compared tell the config's schedule apart from its
neighbours, the same schedule with

- theta 1% higher, and 1% lower;
- for a schedule whose frequencies do not depend on the call length (linear, llama3, YaRN, ..: regime ``static``)
  with a ``factor``, that factor 1% higher and 1% lower (a length-dependent schedule's factor acts only past
  original_max_position_embeddings, which the audit's own call lengths reach);

told apart meaning: in some row 0 .. n - 1 of the tables of a call of n tokens, cos or sin differ by more than two
units of the stored dtype (times the attention factor): more than one rounding of each can hide, so a table of the
neighbour could not pass as exact. The smallest such n over the neighbours is what max_positions must reach; a
neighbour no n up to ``SEARCH`` tells apart is left out (no table of that dtype can tell it, at any length the audit
runs). Configs in use differ by far more than 1% (theta 10000, 500000, 1e6; factor 2, 4, 8, 32): rows that tell a 1%
neighbour apart tell those apart too. In float32 two rows do it for every schedule ropeexport has (row 1 holds every
frequency); 16-bit tables need more (head_dim 16: theta 10000 in float16 tables 6, Llama 3.1's llama3 x8 in float16
1871: ``tests/audits/test_judgments.py``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ropeexport.audits.causes import ULP
from ropeexport.families.rope.regimes import frequencies, regime_kind

STEP = 1.01  # a neighbour's theta or factor: 1% off the config's
SEARCH = 1 << 17  # the most rows searched for a neighbour to be told apart


def neighbours(spec: Any) -> list[tuple[str, Any]]:
    """(words, spec) of each neighbour of ``spec``'s schedule (module doc)."""
    out = [(f"theta {spec.theta * k:g}", replace(spec, theta=spec.theta * k)) for k in (STEP, 1 / STEP)]
    params = dict(spec.scaling_params)
    if regime_kind(spec) == "static" and "factor" in params:
        for k in (STEP, 1 / STEP):
            changed = {**params, "factor": params["factor"] * k}
            out.append((f"{spec.scaling} factor {changed['factor']:g}", replace(spec, scaling_params=changed)))
    return out


def told_apart(spec: Any, other: Any, rows: int, dtype: str) -> bool:
    """Rows 0 .. ``rows`` - 1 of a call of that many tokens differ by more than two units of ``dtype`` (module doc)."""
    inv, factor = frequencies(spec, rows)
    near, near_factor = frequencies(other, rows)
    positions = np.arange(rows, dtype=np.float64)[:, None]
    a, b = positions * inv, positions * near  # [rows, r/2]
    gap = max(float(np.max(np.abs(factor * np.cos(a) - near_factor * np.cos(b)))),
              float(np.max(np.abs(factor * np.sin(a) - near_factor * np.sin(b)))))  # fmt: skip
    return gap > 2 * ULP.get(dtype, ULP["float32"]) * max(1.0, abs(factor))


def _first(spec: Any, other: Any, dtype: str) -> int | None:
    """The fewest rows that tell ``other`` apart from ``spec`` (doubling, then bisection), None past ``SEARCH``."""
    good = 1
    while not told_apart(spec, other, good, dtype):
        if good >= SEARCH:
            return None
        good *= 2
    bad = good // 2  # told apart at ``good`` rows, not at ``bad`` (0: at one row already)
    while good - bad > 1:
        middle = (good + bad) // 2
        good, bad = (middle, bad) if told_apart(spec, other, middle, dtype) else (good, middle)
    return good


def smallest_positions(spec: Any, dtype: str) -> tuple[int, str]:
    """(the fewest positions whose rows tell ``spec``'s schedule apart from every neighbour in ``dtype`` tables, the
    neighbour that needs them: "" when one row does) (module doc).
    """  # noqa: D205
    worst = (1, "")
    for words, other in neighbours(spec):
        needed = _first(spec, other, dtype)
        if needed is not None and needed > worst[0]:
            worst = (needed, words)
    return worst
