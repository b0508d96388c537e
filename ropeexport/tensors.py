"""numpy <-> torch without changing a bit, and the position check every eager reference makes."""

from __future__ import annotations

import numpy as np
import torch

from ropeexport.errors import RuntimeInputError


def to_torch(array: np.ndarray) -> torch.Tensor:
    """A numpy array (bfloat16 from ml_dtypes included) as a torch tensor with the same bits."""
    array = np.ascontiguousarray(array)
    if not array.flags.writeable:  # torch refuses to share read-only memory (broadcast views, ORT outputs)
        array = array.copy()
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def check_positions(position_ids: torch.Tensor | np.ndarray, max_positions: int, name: str = "position_ids") -> None:
    """Raise RuntimeInputError unless every position lies in [0, max_positions)."""
    ids = np.asarray(position_ids)
    if ids.size == 0:
        return
    bad = (ids < 0) | (ids >= max_positions)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise RuntimeInputError(
            f"{name}: value {int(ids[where])} at index {list(where)} is outside the table [0, {max_positions})"
        )
