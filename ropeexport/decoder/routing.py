"""``Routing``: the selections a float64 recompute is told to take otherwise, and the near ties it collects.

``decoder.verify``'s module doc says how a call is judged against them.

Two kinds of selection, both a top-k over scores the runtime computes in its own precision: a mixture of experts'
router (``components.moe``: a token's experts) and DeepSeek Sparse Attention's indexer (``components.latent.indexer``:
a query's keys). Where the k-th and (k + 1)-th are within the runtime's error, the runtime may take the other; the
recompute then takes the ``flips`` it is given, and collects every such near tie in ``ties``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# A flip: (layer, row, slot) a token routed to its (k + 1)-th expert in place of its k-th; (layer, row, slot, key in,
# key out) a query's selection with ``key in`` in place of ``key out`` (the indexer's)
Flip = tuple[int, ...]
# A near tie: (layer, row, slot, margin) a router's; (layer, row, slot, key in, key out, margin) an indexer's (the best
# key left out and the worst kept, the margin relative to the query's largest |score|)
NearTie = tuple[int | float, ...]


@dataclass
class Routing:
    """A recompute's selections (module doc): ``flips`` taken (a router's and an indexer's, ``Flip``); with ``bound``
    > 0, every near tie within it (``moe.near_ties``, ``indexer64.near_ties``) appended to ``ties`` (``NearTie``).
    """  # noqa: D205

    flips: frozenset[Flip] = frozenset()
    bound: float = 0.0
    ties: list[NearTie] = field(default_factory=list)

    def router_flips(self, layer: int) -> list[tuple[int, int]]:
        """(row, slot) of the tokens of ``layer`` routed the other way."""
        return [(f[1], f[2]) for f in self.flips if len(f) == 3 and f[0] == layer]

    def index_flips(self, layer: int) -> list[tuple[int, int, int, int]]:
        """(row, slot, key in, key out) of the queries of ``layer`` whose selection is taken the other way."""
        return [(f[1], f[2], f[3], f[4]) for f in self.flips if len(f) == 5 and f[0] == layer]
