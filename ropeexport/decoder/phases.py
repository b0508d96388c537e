"""One layer's float64 weights for the truth's pass, in two phases: the attention's, then a dense MLP's.

``oracle.decoders_float64`` runs every feed through a layer's attention first (each feed's pass paused at its
feed-forward), then lets the attention's weights go (``PhasedLayer.attention_done``) before the MLP's are read, a
projection at a time, each feed reading them again: the layer holds its attention's float64 weights or one MLP
projection, never more. Gemma 4 31B's full layer is 4.3 GB of float64 weights, its 5376 x 21504 MLP 2.8 GB of it
(0.9 GB a projection) and the attention 1.5 GB; held together beside a pass's logits they passed a 9 GiB cap.
Every weight read is the one the whole layer's read gives (the same ``Stored64`` read), and each feed's arithmetic is
unchanged: only when a weight is read and let go moves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ropeexport.decoder.weights import BLOCK_NAMES

# A dense MLP's weights (``components.mlp.mlp64``): read after the attention's go
MLP_NAMES = frozenset({"gate_proj", "up_proj", "down_proj", "gate_bias", "up_bias", "down_bias"})


class PhasedLayer(dict[str, Any]):
    """Layer i's weights under their names without the prefix: every weight of ``view`` read now but those named in
    ``deferred``, each read when asked for (``w[name]``, ``w.get(name)``) and not kept (``mlp64`` lets each projection
    go before it reads the next: one held at a time, read again for each feed); ``given`` replaces a name's read (a
    mixture's experts, read one at a time). ``block()``: the attention's weights (``BLOCK_NAMES``);
    ``attention_done()`` lets them go, here and in that block.
    """  # noqa: D205

    def __init__(self, view: Mapping[str, np.ndarray], given: Mapping[str, Any], deferred: frozenset[str]) -> None:
        self._view, self._deferred = view, {n for n in view if n in deferred and n not in given}
        super().__init__({n: given[n] if n in given else view[n] for n in view if n not in self._deferred})
        self._block: dict[str, Any] = {}

    def __missing__(self, name: str) -> Any:
        if name not in self._deferred:
            raise KeyError(name)
        return self._view[name]  # not kept: read again for each feed, one projection held at a time

    def get(self, name: str, default: Any = None) -> Any:
        """``w[name]`` (a deferred weight read now), or ``default`` when the layer has no such weight."""
        return self[name] if name in self or name in self._deferred else default

    def block(self) -> dict[str, Any]:
        """The attention's weights (``BLOCK_NAMES``), a dict that ``attention_done`` empties."""
        self._block = {n: v for n, v in self.items() if n in BLOCK_NAMES}
        return self._block

    def attention_done(self) -> None:
        """Every feed has passed the attention: its weights go (the feeds' passes read only norms and the MLP now)."""
        self._block.clear()
        for name in BLOCK_NAMES:
            self.pop(name, None)
