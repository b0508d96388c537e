"""A recipe: the functions of one family's stages that export, feed and check one of its artifacts (``Recipe``).

Each family's ``recipes.py`` builds a ``RECIPES = {artifact: Recipe}`` table from plain functions of its stage
modules (export, eager reference, float64 oracle, probes); ``catalog`` collects them. The pipeline (``pipeline``) and
verification (``verification.core``) are handed a recipe and only ever call through it, so a stage never reaches into
another and nothing below the catalog looks a family up.

Function shapes (``F`` = feeds, a {input name: numpy array} dict; ``O`` = {output name: array}):
- ``export(spec) -> onnx.ModelProto``
- ``probes(spec) -> (list[Probe], coverage dict)``; ``feeds(spec, probe, rng) -> F``
- ``eager(spec, F) -> O`` in the artifact dtype; ``oracle(spec, F) -> O`` in float64
- ``locate(probe, output, index) -> dict``: where an element sits (batch, head, positions...), for reports
- ``tables(spec, model_path) -> list[dict]``: checks of stored tables against float64 (optional)
- ``guards(spec) -> [(case, F)]``: calls with out-of-range positions that the graph itself must reject, sent past
  the runner's own checks (optional: graphs without a table, like ALiBi's, rely on the runner alone)
- ``curve(probe, output) -> (axis name, int array broadcastable to the output)``: each element's position, for the
  per-position error curve (optional)
- ``tolerance(spec) -> verification.compare.Tolerance``: the kind's own default in place of the dtype's, for
  outputs whose rounding grows with the spec (a block's projections sum hidden_size products) (optional)
- ``piece(spec) -> PositionPiece``: the family's position piece of a block spec (graph and float64 twin), for the
  model-level graphs that compose it with their own weights (a decoder's layers) (block recipes only)
- ``properties(spec, runner) -> [dict]``: the encoding's mathematical claims measured on the artifact through a
  runner (relative invariance, norm preservation, decay, shift invariance...), each {name, passed, summary, ...}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

from ropeexport.errors import SpecError
from ropeexport.specs import SpecBase

if TYPE_CHECKING:  # annotations only: the catalog imports this module and specs load without onnx or torch
    import onnx

    from ropeexport.tolerances import Tolerance

Feeds = dict[str, np.ndarray]
# The position inputs of every pair artifact (bias, scores, attention): graphs, probes and oracles share the names.
QPOS, KPOS = "query_position_ids", "key_position_ids"


@dataclass(frozen=True)
class Probe:
    """One verification call: a name, the position inputs it feeds ({input name: int64 array}), and other inputs the
    call fixes (``extras``: a model-level artifact's attention_mask, whose length also sets the cache length).
    """  # noqa: D205

    name: str
    positions: dict[str, np.ndarray]
    extras: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class PositionPiece:
    """A family's position piece for a model-level graph: the graph to call and its float64 twin.

    Compared (and hashed) by identity: it holds graphs. The layers of one position spec share one piece object.

    RoPE: ``rotary`` (query [b, H, s, d], key [b, KV, s, d], position_ids [b, s] in; query_out, key_out) and
    ``rotate64(x [b, h, s, d], position_ids [b, s]) -> float64``, row b at L_b = max(position_ids[b]) + 1. A bias
    method: ``bias`` (query_position_ids [b, s], key_position_ids [b, t] in; attention_bias [b, H, s, t]) and
    ``bias64(query positions, key positions) -> float64 [b, H, s, t]`` (-inf where the method masks).
    """

    rotary: Any = None
    bias: Any = None
    rotate64: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    bias64: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None


S = TypeVar("S", bound=SpecBase)  # the family's spec class (RopeSpec, AlibiSpec, ...)
EagerRotate = Callable[..., Any]  # rotate(x [b, h, s, d] tensor, position_ids [b, s]) -> rotated, in the dtype
EagerBias = Callable[..., Any]  # bias(query positions [b, s], key positions [b, t]) -> [b, H, s, t], in the dtype
Outputs = dict[str, np.ndarray]
Record = dict[str, Any]  # one check's record in report.json (a table check, a guard, a property)


class Infers(Protocol):
    """What a kind's ``properties`` stage calls: a runner's ``infer(feeds) -> outputs`` (``runtimes.base.Runner``)."""

    def infer(self, feeds: Feeds) -> Outputs:
        """The model's outputs by name for ``feeds`` (checked against the model first)."""
        ...



@dataclass(frozen=True, kw_only=True)
class Positions(Generic[S]):
    """What a family hands the model-level artifacts (the ``block`` artifact, a decoder's layers) for a block spec of
    its encoding: ``piece(spec)``, its position piece (graph and float64 twin); ``eager(spec)`` and ``float64(spec)``,
    its eager and float64 rotation or bias alone (no graph built), as (rotate, bias), one of them None;
    ``tables(spec, model_path)``, the piece's stored tables
    checked inside a model that calls it (optional); ``counted``: a bias whose keys' positions are counted over the
    real tokens (its probes say so). ``ropeexport.block`` makes the ``block`` kind from it: no family imports the
    block.
    """  # noqa: D205

    piece: Callable[[S], PositionPiece]
    eager: Callable[[S], tuple[EagerRotate | None, EagerBias | None]]
    float64: Callable[[S], tuple[Callable[..., np.ndarray] | None, Callable[..., np.ndarray] | None]]
    tables: Callable[[S, Path], list[Record]] | None = None
    counted: bool = False


@dataclass(frozen=True, kw_only=True)
class Recipe(Generic[S]):
    """The functions that export, feed, and check one artifact of one encoding (shapes in the module doc).

    Keyword-only: a recipe reads as a table of named stages, and a stage added later cannot shift the others.
    """

    encoding: str
    artifact: str
    summary: str
    export: Callable[[S], onnx.ModelProto]
    probes: Callable[[S], tuple[list[Probe], dict[str, Any]]]
    feeds: Callable[[S, Probe, np.random.Generator], Feeds]
    eager: Callable[[S, Feeds], Outputs]
    oracle: Callable[[S, Feeds], Outputs]
    locate: Callable[[Probe, str, tuple[int, ...]], dict[str, Any]]
    tables: Callable[[S, Path], list[Record]] | None = None
    guards: Callable[[S], list[tuple[str, Feeds]]] | None = None
    curve: Callable[[Probe, str], tuple[str, np.ndarray]] | None = None
    properties: Callable[[S, Infers], list[Record]] | None = None
    tolerance: Callable[[S], Tolerance] | None = None
    piece: Callable[[S], PositionPiece] | None = None

    def piece_of(self, spec: S) -> PositionPiece:
        """``piece(spec)`` of a block kind; a kind without a piece is a SpecError naming it."""
        if self.piece is None:
            raise SpecError("artifact", f"{self.encoding} {self.artifact} has no position piece (a block kind has one)")
        return self.piece(spec)
