"""Shared case tables: small RoPE specs covering every layout x schedule, plus helpers to run them."""

from __future__ import annotations

from typing import Any

import numpy as np

ORIGINAL = 64  # original_max_position_embeddings of the length-dependent test schedules
MAX_POSITIONS = 256
ROTARY = 12  # partial rotation: 12 of 16 channels

SCHEDULE_PARAMS: dict[str, dict[str, Any]] = {
    "default": {},
    "linear": {"factor": 4.0},
    "ntk": {"factor": 4.0},
    "dynamic": {"factor": 4.0, "original_max_position_embeddings": ORIGINAL},
    "yarn": {"factor": 4.0, "original_max_position_embeddings": ORIGINAL},
    "llama3": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": ORIGINAL,
    },
    "longrope": {
        "original_max_position_embeddings": ORIGINAL,
        "short_factor": [1.0 + 0.1 * i for i in range(ROTARY // 2)],
        "long_factor": [1.0 + 1.5 * i for i in range(ROTARY // 2)],
    },
    "proportional": {"partial_rotary_factor": 0.25, "factor": 2.0},  # 1 of 6 pairs rotates, 5 at frequency 0
}


def small_spec(**overrides: Any) -> dict[str, Any]:
    """Fields of a small GQA spec with partial rotation; overrides win."""
    fields: dict[str, Any] = {
        "head_dim": 16,
        "rotary_dim": ROTARY,
        "num_heads": 4,
        "num_kv_heads": 2,
        "max_positions": MAX_POSITIONS,
        "theta": 10000.0,
    }
    fields |= overrides
    if "scaling" in fields and "scaling_params" not in fields:
        fields["scaling_params"] = SCHEDULE_PARAMS[fields["scaling"]]
    return fields


# Calls that exercise both regimes of length-dependent schedules: (name, position_ids [b, s]).
POSITION_CALLS = [
    ("start", np.arange(6, dtype=np.int64)[None].repeat(2, 0)),
    ("below-original", np.arange(ORIGINAL - 5, ORIGINAL, dtype=np.int64)[None]),
    ("above-original", np.arange(ORIGINAL - 4, ORIGINAL + 1, dtype=np.int64)[None]),
    ("row-offsets-to-end", np.stack([np.arange(0, 5), np.arange(MAX_POSITIONS - 5, MAX_POSITIONS)]).astype(np.int64)),
    ("decode", np.array([[MAX_POSITIONS - 1], [3]], dtype=np.int64)),
]


def tiered(cases: list[Any], fast: Any) -> list[Any]:
    """``cases`` as pytest params, each that ``fast(values)`` does not pick marked ``slow`` (a case is a tuple of
    values, one value, or already a ``pytest.param``, whose id and marks are kept).

    The fast tier (``pytest -m "not slow"``) keeps the picked rows, a representative of each axis a table covers;
    CI runs every row.
    """  # noqa: D205
    import pytest
    from _pytest.mark import ParameterSet

    out = []
    for case in cases:
        if isinstance(case, ParameterSet):
            values, marks, id_ = tuple(case.values), tuple(case.marks), case.id
        else:
            values, marks, id_ = (case if isinstance(case, tuple) else (case,)), (), None
        picked = fast(values if len(values) > 1 else values[0])
        out.append(pytest.param(*values, marks=marks if picked else (*marks, pytest.mark.slow), id=id_))
    return out
