"""RoPE regimes and exact tables: which call lengths a schedule treats differently, and its float64 cos/sin there.

The one home of both (torch-free): the family's reference tables (``reference.table_regimes``), the audit's
comparisons and grafts, and the decoder's scenarios read them here. A schedule's frequencies depend on the length
L only past original_max_position_embeddings (``schedules``: regime ``switch`` for LongRoPE, ``continuous`` for
dynamic NTK, ``static`` for the rest); below it, and for every static schedule, any L gives the same table.

L is a batch row's own: L_b = max(position_ids[b]) + 1 (``row_lengths``), the length that request alone would have.
A row's positions count its real tokens from its first (left padding sits at a small position, never past the row's
last: ``decoder.greedy`` puts it at the row's first, transformers at 1), and a decode call's one position per row is
that row's last, so L_b is the row's tokens so far whatever the other rows hold. One batch may
hold rows in different regimes (one past LongRoPE's switch, one before; dynamic NTK rows of different L): each row is
computed in its own, never in the longest row's (vLLM #27414 is that whole-batch rule in a server).

Precision: angles position x inverse frequency in float64, cos and sin in float64 times the attention factor; a
caller rounds once to its dtype (``numerics.round_once``). The multiplication order is the one every caller used before
this module existed, so the tables are bit-identical to theirs (``tests/pinned`` holds the exported bytes).

Notation: P max_positions, r rotary_dim, L a call's length.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropeexport.families.rope.schedules import Regime, get_schedule


def row_lengths(*positions: np.ndarray) -> np.ndarray:
    """L_b = max over row b of every position array [b, s_i] + 1: int64 [b], each row's own length (module doc)."""
    return np.max([np.asarray(p).max(axis=1) for p in positions], axis=0).astype(np.int64) + 1


def original_length(position: Any) -> int | None:
    """original_max_position_embeddings of any position spec that has one (None: default, linear, ALiBi, ..).

    Static schedules may carry it too (YaRN, llama3): it is where the scenarios place a prompt across, not a switch.
    """
    params = getattr(position, "scaling_params", None) or {}
    value = params.get("original_max_position_embeddings")
    return None if value is None else int(value)


def regime_kind(position: Any) -> Regime:
    """``static``, ``switch`` (LongRoPE: short / long tables) or ``continuous`` (dynamic NTK: a base per length);
    every encoding that is not RoPE is ``static``.
    """  # noqa: D205
    if getattr(position, "encoding", "rope") != "rope":
        return "static"
    return get_schedule(position.scaling).regime


def switch_length(position: Any) -> int | None:
    """The L past which a length-dependent schedule changes its frequencies (None when static)."""
    if regime_kind(position) == "static":
        return None
    return get_schedule(position.scaling).threshold(position.scaling_params)


def table_switch(position: Any) -> int | None:
    """original_max_position_embeddings where the schedule switches between two stored tables (LongRoPE) below
    max_positions, else None: where a model needs a short and a long table.
    """  # noqa: D205
    limit = switch_length(position) if regime_kind(position) == "switch" else None
    return limit if limit is not None and limit < position.max_positions else None


def regime(position: Any, length: int) -> str:
    """The regime a call of L = ``length`` runs in: ``static``, ``short`` / ``long``, ``base`` / ``dynamic L=...``."""
    kind, limit = regime_kind(position), original_length(position)
    if kind == "static" or limit is None:
        return "static"
    if kind == "switch":
        return "long" if length > limit else "short"
    return f"dynamic L={length}" if length > limit else "base"


def regime_lengths(spec: Any) -> list[int]:
    """One call length per stored table: [P] for a static schedule; [original] for dynamic NTK (the base table, the
    rest is computed per call); [original, original + 1] for LongRoPE (short, then long).
    """  # noqa: D205
    threshold = switch_length(spec)
    lengths = [spec.max_positions] if threshold is None else [threshold]
    if regime_kind(spec) == "switch" and threshold is not None:
        lengths.append(threshold + 1)
    return lengths


def check_lengths(spec: Any) -> list[int]:
    """Call lengths that see every regime up to max_positions: [P], or [original, original + 1, P] when the schedule
    changes below P (both sides of the switch, and the longest call).
    """  # noqa: D205
    threshold = switch_length(spec)
    if threshold is None or threshold >= spec.max_positions:
        return [spec.max_positions]
    return [threshold, threshold + 1, spec.max_positions]


def frequencies(spec: Any, length: int, scaling: str | None = None, **params: Any) -> tuple[np.ndarray, float]:
    """(inverse frequencies [r/2], attention factor) in float64 of ``scaling`` (default: the spec's) at call L;
    ``params`` override the spec's scaling parameters (another factor, truncate, ..: the audit's mis-readings).
    """  # noqa: D205
    name = spec.scaling if scaling is None else scaling
    resolved = dict(spec.scaling_params) | params if name == spec.scaling else params
    f = get_schedule(name).frequencies(spec.rotary_dim, spec.theta, resolved, length)
    return f.inv_freq, f.attention_factor


def exact_tables(spec: Any, length: int, rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """float64 cos and sin [rows (default L), r/2] of the spec's schedule for a call of L tokens, the attention
    factor applied: row m is position m.
    """  # noqa: D205
    inv, factor = frequencies(spec, length)
    angles = np.outer(np.arange(length if rows is None else rows, dtype=np.float64), inv)  # [rows, r/2], float64
    return factor * np.cos(angles), factor * np.sin(angles)


def table_regimes(spec: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """float64 (cos, sin) tables [P, r/2] of every stored regime (``regime_lengths``), in the artifact's row order."""
    return [exact_tables(spec, length, spec.max_positions) for length in regime_lengths(spec)]
