"""A static-cache call seen as the dynamic calls it stands for, one per row: how the references evaluate it.

A static buffer row b holds cache_length[b] tokens, then the call's s new ones, then unused slots. Row b is the
dynamic call with that row's first cache_length[b] cached keys and values and the mask over its first
cache_length[b] + s slots; present is the input buffer with the row's new keys and values written in place. The
references (eager and float64) run each row that way, so neither shares the graph's TensorScatter or its masks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ropeexport.recipes import Feeds

Block = Callable[[Feeds], dict[str, np.ndarray]]


def is_static(feeds: Feeds) -> bool:
    """True for a static-cache call (it carries cache_length)."""
    return "cache_length" in feeds


def per_row(feeds: Feeds, block: Block) -> dict[str, np.ndarray]:
    """``block`` (a dynamic-call evaluator) applied row by row to a static call; results as the static graph gives."""
    s = feeds["position_ids"].shape[1]
    outputs: list[np.ndarray] = []
    present: dict[str, np.ndarray] = {}  # the cache buffers, as the static graph writes them
    for b, length in enumerate(int(n) for n in feeds["cache_length"]):
        row: dict[str, Any] = {
            "hidden": feeds["hidden"][b : b + 1],
            "position_ids": feeds["position_ids"][b : b + 1],
            "attention_mask": feeds["attention_mask"][b : b + 1, : length + s],
            "past_key": feeds["past_key"][b : b + 1, :, :length],
            "past_value": feeds["past_value"][b : b + 1, :, :length],
        }
        result = block(row)
        outputs.append(result["output"])
        for name, buffer in (("present_key", "past_key"), ("present_value", "past_value")):
            if name not in present:
                present[name] = np.array(feeds[buffer], dtype=result[name].dtype)  # the buffer, as written
            present[name][b, :, length : length + s] = result[name][0, :, length:]
    return {"output": np.concatenate(outputs), **present}
