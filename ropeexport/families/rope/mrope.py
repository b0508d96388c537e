"""Multimodal RoPE's positions (M-RoPE; Qwen2-VL, Wang et al. 2024, section 2.1): position_ids [3, seq].

What a prompt of text and images feeds (time, height, width), and the positions the probes that verify a ``rope``
artifact use.

As transformers 5.23 computes them (``Qwen3VLModel.get_rope_index`` and ``get_vision_position_ids``; Qwen2-VL and
Qwen2.5-VL give the same for images): a text token takes one position on all three axes; an image of (t, h, w)
merged patches starting at position p takes (p + t_i, p + h_i, p + w_i) in row-major order, and the text after it
continues from p + max(h, w) (an image grid with t = 1). Decode steps after the prompt are at cache position +
``rope_deltas`` (max position + 1 - prompt length) on every axis: the delta an image leaves behind.

Notation: s sequence, b batch, P max_positions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Segment = tuple[str, int | tuple[int, int, int]]  # ("text", n) or ("image", (t, h, w)) merged patches


def prompt_positions(segments: Sequence[Segment], start: int = 0) -> np.ndarray:
    """position_ids int64 [3, s] of a prompt of text runs and image grids, from position ``start``."""
    parts, current = [], start
    for kind, size in segments:
        if kind == "text":
            n = int(size)  # type: ignore[arg-type]
            parts.append(np.broadcast_to(np.arange(current, current + n, dtype=np.int64), (3, n)))
            current += n
        elif kind == "image":
            t, h, w = size  # type: ignore[misc]
            grid = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")  # each [t, h, w]
            parts.append(np.stack([g.reshape(-1) for g in grid]).astype(np.int64) + current)
            current += max(h, w)  # t = 1 for an image: its time axis stays at ``current``
        else:
            raise ValueError(f"segment kind must be 'text' or 'image', got {kind!r}")
    return np.concatenate(parts, axis=1)


def rope_deltas(positions: np.ndarray) -> int:
    """max position + 1 - prompt length, for positions [3, s]: what decode steps add to their cache position."""
    return int(positions.max()) + 1 - positions.shape[-1]


def text_rows(position_ids: np.ndarray, axes: int = 3) -> np.ndarray:
    """position_ids [b, s] of a text-only call as [axes, b, s]: the same row on every axis."""
    return np.ascontiguousarray(np.broadcast_to(position_ids, (axes, *position_ids.shape)))


def axes_apart(position_ids: np.ndarray, max_positions: int) -> np.ndarray:
    """[3, b, s] from [b, s]: time the positions, height and width others (P - 1 - p, p + P // 2 mod P), so an axis
    read in another's place, or one axis read for all, moves every pair that axis owns.
    """  # noqa: D205
    P = max_positions
    return np.stack([position_ids, P - 1 - position_ids, (position_ids + P // 2) % P]).astype(np.int64)


def image_probes(max_positions: int) -> dict[str, np.ndarray]:
    """Prompts of text and image grids, [3, b, s] each, that fit in ``max_positions`` (module docstring)."""
    P = max_positions
    out: dict[str, np.ndarray] = {}
    side = max(1, min(6, P // 8))
    image = prompt_positions([("text", 3), ("image", (1, side, side + 1)), ("text", 4)])
    if image.max() < P:
        out["image-grid"] = image[:, None]  # [3, 1, s]
        # text after the image at the end of the table: the grid shifted so the last token sits at P - 1.
        out["image-grid-at-end"] = (image + (P - 1 - int(image.max())))[:, None]
        delta = rope_deltas(image)
        # decode after the image: cache positions s.. plus rope_deltas, equal on every axis (one row per step).
        steps = np.array([image.shape[1], P - 1 - delta], np.int64) + delta
        out["decode-after-image"] = text_rows(steps[:, None])
    return out
