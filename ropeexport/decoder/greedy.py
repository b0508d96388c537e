"""Greedy generation through an exported decoder: prefill (whole or chunked), then single-token steps, present -> past.

``run_scenario`` runs one ``scenarios.Scenario`` and returns every call it made (``Call``): the sequence so far, which
slots the call computed, the logits it returned and the regime each row ran in: row b's own, of L_b =
max(position_ids[b]) + 1 over the call's positions (``families.rope.regimes``), so one batch may hold rows in
different regimes. The cache policy at a regime switch is the scenario's (``scenarios`` module doc), per row: under
``re-prefill`` a step at which any row's regime differs from the one its cache was built in recomputes the whole
batch (every row then in its own regime); under ``keep`` only the rows whose regime changed read stale keys. Prompt
tokens are seeded draws; each next token is the argmax of the last real position of its row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ropeexport.architectures.sharing import cached_layers
from ropeexport.decoder.export import layer_caches
from ropeexport.decoder.scenarios import Scenario, regime
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.dtypes import DTYPES
from ropeexport.families.rope.regimes import row_lengths

Infer = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


@dataclass
class Call:
    """One run of the model: the sequence so far ([b, t] each) and the slots [first, t) this call computed."""

    index: int
    kind: str  # prefill | chunk | decode | re-prefill
    input_ids: np.ndarray
    position_ids: np.ndarray
    attention_mask: np.ndarray
    first: int
    logits: np.ndarray  # [b, t - first, vocab], as the runtime returned it
    regimes: tuple[str, ...]  # per row, the regime of its L_b
    cache_regimes: tuple[str, ...] | None  # per row, the regime its cached keys were rotated in (None: no cache read)
    axes_positions: np.ndarray | None = None  # M-RoPE's [3, b, t] fed for the sequence; None: the rows were fed

    @property
    def fed_positions(self) -> np.ndarray:
        """The sequence's positions as the model takes them: the rows [b, t], or M-RoPE's [3, b, t]."""
        return self.position_ids if self.axes_positions is None else self.axes_positions

    @property
    def length(self) -> int:
        """The longest row's L = max(position_ids) + 1 of this call."""
        return int(self.position_ids[:, self.first :].max()) + 1

    @property
    def regime(self) -> str:
        """The call's regime: its rows' one regime, or each row's in row order (``long / short``) when they differ."""
        return self.regimes[0] if len(set(self.regimes)) == 1 else " / ".join(self.regimes)

    @property
    def stale_rows(self) -> np.ndarray:
        """bool [b]: the rows that read keys cached under another regime (the ``keep`` policy across a switch)."""
        if self.cache_regimes is None:
            return np.zeros(len(self.regimes), bool)
        return np.array([c != r for c, r in zip(self.cache_regimes, self.regimes, strict=True)])

    @property
    def stale(self) -> bool:
        """True when every row read keys cached under another regime: the call is that regime's cost, not judged."""
        return bool(self.stale_rows.all())


def _prompt(spec: DecoderSpec, scenario: Scenario, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """input_ids, attention_mask and position_ids [b, n] of the left-padded prompts."""
    n = max(scenario.prompts)
    mask = np.array([[1 if j >= n - length else 0 for j in range(n)] for length in scenario.prompts], np.int64)
    ids = np.where(mask == 1, rng.integers(0, spec.vocab_size, mask.shape), 0).astype(np.int64)
    positions = scenario.start + np.maximum(np.cumsum(mask, axis=1) - 1, 0)  # padding at the first position
    return ids, mask, positions.astype(np.int64)


def run_scenario(infer: Infer, spec: DecoderSpec, scenario: Scenario, seed: int = 0) -> list[Call]:
    """Run the scenario through ``infer`` (a runner's feeds -> outputs); every call, in order."""
    position = spec.position_spec()
    inputs = spec.positions  # text only: M-RoPE's three axes take the rows (Call.position_ids keeps the rows)
    np_dtype = DTYPES[spec.dtype].np_dtype
    ids, mask, pos = _prompt(spec, scenario, np.random.default_rng(seed))
    b = ids.shape[0]
    # each cached layer's own cache shapes, key then value (a latent layer's differ: ``LayerSpec.cache_shapes``); a
    # layer that reads another's keys and values has none (``architectures.sharing``)
    cached = cached_layers(spec.layers)
    # (a layer with its own indexer caches its keys third: ``export.layer_caches``)
    names = [(past, present) for i in cached for past, present, _, _ in layer_caches(spec, i)]
    empty: list[np.ndarray] = [np.zeros((b, heads, 0, width), np_dtype) for i in cached
                               for _, _, heads, width in layer_caches(spec, i)]  # fmt: skip
    calls: list[Call] = []

    def regimes_of(positions: np.ndarray) -> tuple[str, ...]:  # each row's regime, of its own L_b
        return tuple(regime(position, int(length)) for length in row_lengths(positions))

    def run(first: int, last: int, cache: list[np.ndarray], kind: str,
            cache_regimes: tuple[str, ...] | None) -> list[np.ndarray]:  # fmt: skip
        feeds = {"input_ids": ids[:, first:last], "attention_mask": mask[:, :last],
                 inputs.name: inputs.text(pos[:, first:last])}  # fmt: skip
        for (past, _), value in zip(names, cache, strict=True):
            feeds[past] = value
        out = infer(feeds)
        calls.append(Call(len(calls), kind, ids[:, :last].copy(), pos[:, :last].copy(), mask[:, :last].copy(), first,
                          out["logits"], regimes_of(pos[:, first:last]), cache_regimes,
                          None if inputs.one_axis else inputs.text(pos[:, :last])))  # fmt: skip
        return [out[present] for _, present in names]

    edges = np.cumsum((0, *scenario.chunks)) if scenario.chunks else np.array([0, ids.shape[1]])
    cache = empty
    for first, last in zip(edges[:-1], edges[1:], strict=True):
        kind = "prefill" if len(edges) == 2 else "chunk"
        cache = run(int(first), int(last), cache, kind, calls[-1].regimes if calls else None)
    built_in = calls[-1].regimes
    for _ in range(scenario.steps):
        following = np.argmax(calls[-1].logits[:, -1, :], axis=-1).astype(np.int64)[:, None]  # [b, 1]
        ids = np.concatenate([ids, following], axis=1)
        mask = np.concatenate([mask, np.ones((b, 1), np.int64)], axis=1)
        pos = np.concatenate([pos, pos[:, -1:] + 1], axis=1)
        t = ids.shape[1]
        now = regimes_of(pos[:, -1:])
        if scenario.policy == "re-prefill" and now != built_in:
            cache = run(0, t, empty, "re-prefill", None)
            built_in = now
        else:
            cache = run(t - 1, t, cache, "decode", built_in)
    return calls
