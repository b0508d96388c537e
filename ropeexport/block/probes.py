"""The calls a ``block`` is verified with: where cached generation breaks, not just a short prompt.

Each probe fixes ``position_ids`` [b, s] and ``attention_mask`` [b, past + s] (its length sets the cache length):
- ``prefill``: a prompt at positions 0..s-1 with an empty cache;
- ``decode-after-prefill`` and ``chunked-prefill``: one token, then a chunk, at cache offset 8;
- ``left-padded-prefill`` / ``left-padded-decode``: a batch whose rows differ in length, padded on the left (padded
  slots see no key: their output is zeros);
- ``far-prompt``: a prompt placed at the last positions of the table through position_ids, over a short cache;
- ``decode-across-range``: one decode row at each of 16 positions spread over 0..max_positions-1 (where a schedule
  switches below max_positions, rows on both sides of the switch in one batch: each row in its own regime);
- where the schedule has ``original_max_position_embeddings`` below max_positions: a prompt crossing it, and decode
  steps on both sides of it (L = original and original + 1 pick the two regimes).
Cached keys and values are standard-normal inputs: the block must rotate only the new keys and keep the cache.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropeexport.block.projections import hidden_size, kv_heads
from ropeexport.dtypes import DTYPES
from ropeexport.forms import FORMS
from ropeexport.recipes import Feeds, Probe
from ropeexport.tolerances import TOLERANCES, Tolerance


def _probe(name: str, position_ids: Any, attention_mask: Any) -> Probe:
    pos, mask = np.asarray(position_ids, np.int64), np.asarray(attention_mask, np.int64)
    assert mask.shape[1] >= pos.shape[1], "the mask covers the cache and the new tokens"
    return Probe(name, {"position_ids": pos}, {"attention_mask": mask})


STATIC_SPARE = 3  # unused buffer slots after the last token of every static-cache call: never to be read


def _static(spec: Any, probes: list[Probe]) -> list[Probe]:
    """The calls as a static-cache block takes them: a buffer of capacity past + s + 3, cache_length = past.

    Plus ``ragged-cache-decode``: rows holding 2, 5 and 9 tokens in one batch (a server's rows differ in length).
    """
    if not FORMS[spec.graph].static:
        return probes
    out = []
    for p in probes:
        pos, mask = p.positions["position_ids"], p.extras["attention_mask"]
        b, s = pos.shape
        spare = np.zeros((b, STATIC_SPARE), np.int64)  # past the tokens: not real, never visible
        lengths = np.full(b, mask.shape[1] - s, np.int64)
        out.append(Probe(p.name, p.positions, {"attention_mask": np.hstack([mask, spare]), "cache_length": lengths}))
    if spec.max_positions > 12:
        lengths = np.array([2, 5, 9], np.int64)
        capacity = int(lengths.max()) + 1 + STATIC_SPARE
        masks = (np.arange(capacity)[None, :] <= lengths[:, None]).astype(np.int64)  # cached tokens and the new one
        extras = {"attention_mask": masks, "cache_length": lengths}
        out.append(Probe("ragged-cache-decode", {"position_ids": lengths[:, None].copy()}, extras))
    return out


def block_probes(spec: Any) -> tuple[list[Probe], dict[str, Any]]:
    """The probe calls (module docstring) that fit the spec's max_positions, and their coverage."""
    probes, coverage = _dynamic_probes(spec)
    probes = _static(spec, probes)
    return probes, coverage | {"calls": [p.name for p in probes]}


def _dynamic_probes(spec: Any) -> tuple[list[Probe], dict[str, Any]]:
    P = spec.max_positions
    s = min(8, P)
    probes = [_probe("prefill", [np.arange(s)], np.ones((1, s)))]
    if P > 12:
        probes.append(_probe("decode-after-prefill", [[8]], np.ones((1, 9))))
        probes.append(_probe("chunked-prefill", [np.arange(8, 12)], np.ones((1, 12))))
    if P > 6:
        probes.append(_probe("left-padded-prefill", [[0, 0, 0, 1, 2, 3], np.arange(6)], [[0, 0, 1, 1, 1, 1], [1] * 6]))
        probes.append(_probe("left-padded-decode", [[4], [6]], [[0, 0, 1, 1, 1, 1, 1], [1] * 7]))
    if P >= 8:
        probes.append(_probe("far-prompt", [np.arange(P - 4, P)], np.ones((1, 8))))
    rows = np.unique(np.linspace(0, P - 1, num=min(16, P)).astype(np.int64))
    probes.append(_probe("decode-across-range", rows[:, None], np.ones((rows.size, 5))))
    original = getattr(spec, "scaling_params", {}).get("original_max_position_embeddings")
    if original is not None and 4 <= original < P:
        probes.append(_probe("prefill-across-original", [np.arange(original - 3, original + 1)], np.ones((1, 4))))
        probes.append(_probe("decode-at-original", [[original - 1]], np.ones((1, 5))))
        probes.append(_probe("decode-past-original", [[original]], np.ones((1, 5))))
    coverage = {
        "max_positions": P,
        "calls": [p.name for p in probes],
        "weights": "seeded: numpy default_rng(0), normal with std 1/sqrt(fan_in), rounded once to the dtype",
        "cache": "cached keys and values are standard-normal inputs; present_* must hold them, then the new ones",
    }
    return probes, coverage


def counted_block_probes(spec: Any) -> tuple[list[Probe], dict[str, Any]]:
    """Probes for a block whose keys' positions are counted over the real tokens (ALiBi and the bias family).

    There, position_ids must agree with the mask (a query at position p has p real tokens before it): a prompt
    placed at far positions over a short cache means nothing. Far positions are reached with caches as long as
    them instead: a decode and a chunk at the table's end over a cache of max_positions - 1 (or - 4) tokens, and one
    decode row at each of 16 positions over 0..max_positions-1 in one batch, each row's cache left-padded to the
    longest.
    """
    probes, coverage = _dynamic_probes(spec)
    P = spec.max_positions
    kept = [p for p in probes if p.name not in ("far-prompt", "decode-across-range")]
    if P >= 8:
        kept.append(_probe("long-cache-decode", [[P - 1]], np.ones((1, P))))
        kept.append(_probe("long-cache-chunk", [np.arange(P - 4, P)], np.ones((1, P))))
    rows = np.unique(np.linspace(0, P - 1, num=min(16, P)).astype(np.int64))
    longest = int(rows.max())
    masks = [[0] * (longest - r) + [1] * (r + 1) for r in rows.tolist()]  # r real tokens cached, then the new one
    kept.append(_probe("decode-across-range-padded", rows[:, None], masks))
    kept = _static(spec, kept)
    coverage = coverage | {
        "calls": [p.name for p in kept],
        "positions": "counted over the real tokens: position_ids agree with attention_mask in every call",
    }
    return kept, coverage


def block_feeds(spec: Any, probe: Probe, rng: np.random.Generator) -> Feeds:
    """Standard-normal hidden [b, s, hidden] and cache [b, KV, past, d] for the probe's positions and mask.

    A probe without an attention_mask (one written for any kind, such as a guard's) is a prefill: no cache, no
    padding.
    """
    pos = probe.positions["position_ids"]
    b, s = pos.shape
    static = FORMS[spec.graph].static
    mask = probe.extras.get("attention_mask", np.ones((b, s + (STATIC_SPARE if static else 0)), np.int64))
    dtype = DTYPES[spec.dtype].np_dtype

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32).astype(dtype)

    # A static buffer is filled with values everywhere: slots past a row's tokens hold leftovers that must not count.
    cache = mask.shape[1] if static else mask.shape[1] - s
    feeds = {
        "hidden": normal(b, s, hidden_size(spec)),
        "position_ids": pos,
        "attention_mask": mask,
        "past_key": normal(b, kv_heads(spec), cache, spec.head_dim),
        "past_value": normal(b, kv_heads(spec), cache, spec.head_dim),
    }
    if static:
        feeds["cache_length"] = probe.extras.get("cache_length", np.zeros(b, np.int64))
    return feeds


def block_locate(probe: Probe, output: str, index: tuple[int, ...]) -> dict[str, Any]:
    """Where an element sits: the token and its position (output), or the cache slot (present_*)."""
    pos = probe.positions["position_ids"]
    if output == "output":
        b, i, c = index
        return {"batch": b, "token": i, "position": int(pos[b, i]), "channel": c}
    b, h, slot, c = index
    if "cache_length" in probe.extras:  # a static buffer: this row's tokens sit at cache_length[b] ..
        past = int(probe.extras["cache_length"][b])
    else:
        past = probe.extras["attention_mask"].shape[1] - pos.shape[1]
    new = past <= slot < past + pos.shape[1]
    where = int(pos[b, slot - past]) if new else ("cached" if slot < past else "unused")
    return {"batch": b, "head": h, "slot": slot, "position": where, "channel": c}


def block_curve(probe: Probe, output: str) -> tuple[str, np.ndarray]:
    """Output errors by position; present_* errors by cache slot."""
    if output == "output":
        return "position", probe.positions["position_ids"][:, :, None]
    return "cache slot", np.arange(probe.extras["attention_mask"].shape[1])[None, None, :, None]


def block_tolerance(spec: Any) -> Tolerance:
    """The dtype's tolerance; in fp32 widened by sqrt(hidden / 64) for the sums of a block.

    Every output sums hidden-long dot products three times (q/k/v, attention, o_proj). In fp32 the rounding of those
    sums is what eager and fused kernels disagree on (they sum in other orders), and it grows like sqrt(hidden):
    measured 9.8e-6 between eager and ONNX Runtime at hidden 4096, at the dtype's own 1e-5. In fp16 and bf16 the
    outputs' own rounding dominates and the dtype's tolerance holds as it is (measured at hidden 4096: 3.9e-3
    against 8e-3), so it is not widened: a wider one would hide a logit scaled by a few percent.
    """
    base = TOLERANCES[spec.dtype]
    if spec.dtype != "fp32":
        return base
    grow = max(1.0, float(np.sqrt(hidden_size(spec) / 64)))  # 64: the widths the per-encoding tolerances were set at
    reason = (
        f"fp32's ({base.atol:g}, {base.rtol:g}) times sqrt(hidden / 64) = {grow:.2f}: q/k/v, the attention sum and "
        "o_proj add hidden-long dot products whose rounding grows like sqrt(hidden), and fused kernels sum in "
        "another order than eager"
    )
    return Tolerance(base.atol * grow, base.rtol * grow, reason)
