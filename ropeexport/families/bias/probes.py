"""Verification pieces shared by additive-bias methods (ALiBi, T5, KERPLE, Sandwich).

Probes (position pairs; causal probes always let each query see at least its own position):
- self-attention at the start and at the end of the range, rows with different offsets (left padding);
- decode calls: one query at max_positions - 1 against keys that sweep **every distance** 0..max_positions-1 in
  chunks (the bias depends on i - j alone for these methods), at least for the ``bias`` artifact; for ``scores`` and
  ``attention`` a strided subset of distances plus all of 0..64 and around every power of two;
- for bidirectional methods, keys after the query (negative distances) too.
The float64 oracle takes the method's bias from its formula in float64, then applies the scale, mask and softmax in
float64.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ropeexport.dtypes import DTYPES
from ropeexport.families.bias.reference import attention_with_bias, scores_with_bias
from ropeexport.families.bias.spec import BiasSpec
from ropeexport.recipes import KPOS, QPOS, Feeds, Probe
from ropeexport.tensors import to_torch

BIAS_CALL = 8192  # keys per decode call for the bias artifact
SCORES_KEYS = 4096  # distances checked through scores/attention (their output grows with heads * head_dim)

EagerBias = Callable[[Any, torch.Tensor, torch.Tensor], torch.Tensor]
OracleBias = Callable[[Any, np.ndarray, np.ndarray], np.ndarray]


def _pair(name: str, q: Any, k: Any) -> Probe:
    return Probe(name, {QPOS: np.asarray(q, np.int64), KPOS: np.asarray(k, np.int64)})


def pair_windows(P: int) -> list[Probe]:
    """Self-attention over windows of min(16, P) positions: at the start, at the end, and three rows of one call at
    offsets 0, the middle and the end.
    """  # noqa: D205
    s = min(16, P)
    start, end = np.arange(s)[None], np.arange(P - s, P)[None]
    probes = [_pair("self-start", start, start), _pair("self-end", end, end)]
    offsets = np.stack([np.arange(o, o + s) for o in (0, P // 2 - s // 2, P - s)])
    probes.append(_pair("row-offsets", offsets, offsets))
    return probes


def pair_extras(P: int, causal: bool, artifact: str) -> list[Probe]:
    """Calls every query/key artifact needs besides self-attention windows.

    - ``decode-rows``: three batch rows, one query each at different positions (left padding, KV-cache offsets), keys
      across the whole range: a graph that takes row 0's position for every row fails here;
    - ``prefill-chunk``: a block of queries at the end against keys from the start (chunked prefill): long distances
      with q_len > 1;
    - non-causal only, ``keys-after-query``: a query at 0 against keys across the whole range, so every negative
      distance (every one for ``bias``; a strided set plus 0..64 otherwise).
    """
    probes = []
    width = min(32, P)
    rows = [P - 1, P // 2, P // 3]
    # Keys across the whole range in every row (each row's own query position among them): a wrong query position
    # for a row then moves its causal mask, which softmax cannot cancel the way it cancels a constant bias shift.
    spread = np.linspace(0, P - 1, num=max(1, width - 1)).astype(np.int64)
    keys = np.stack([np.sort(np.append(spread, q)) for q in rows])
    probes.append(_pair("decode-rows", [[q] for q in rows], keys))
    chunk = np.arange(max(0, P - 8), P)
    far = np.unique(np.concatenate([np.linspace(0, P - 1, num=min(P, 64)).astype(np.int64), chunk]))
    probes.append(_pair("prefill-chunk", chunk[None], far[None]))
    if not causal:
        if artifact == "bias":
            after = np.arange(P)
        else:
            stride = max(1, -(-P // SCORES_KEYS))
            after = np.unique(np.concatenate([np.arange(0, P, stride), np.arange(min(65, P)), [P - 1]]))
        for i in range(0, after.size, BIAS_CALL):
            part = after[i : i + BIAS_CALL]
            probes.append(_pair(f"keys-after-query[{part[0]}..{part[-1]}]", [[0]], part[None]))
    return probes


def bias_probes(spec: Any) -> tuple[list[Probe], dict[str, Any]]:
    """Probe calls for one spec (module docstring) and the coverage they give.

    ``spec`` needs ``max_positions``, ``artifact`` and ``causal`` (any additive-bias spec, or one shaped like it).
    """
    P = spec.max_positions
    probes = pair_windows(P)
    last = P - 1
    if spec.artifact == "bias":
        keys = np.arange(P)
        coverage: dict[str, Any] = {"distances": f"every distance i - j in 0..{P - 1}"}
    else:
        stride = max(1, -(-P // SCORES_KEYS))
        marks = {d for k in range(25) for d in (2**k - 1, 2**k) if d < P}
        distances = sorted(set(range(0, P, stride)) | set(range(min(65, P))) | marks | {P - 1})
        keys = last - np.array(distances[::-1])
        coverage = {
            "distances": f"{len(distances)} of the {P} distances i - j >= 0 "
            f"(every {stride}th, 0..64, around powers of 2)"
        }
    chunk = BIAS_CALL if spec.artifact == "bias" else 512
    for i in range(0, len(keys), chunk):
        part = keys[i : i + chunk]
        if part[-1] != last:  # causal: the query must see something
            part = np.append(part, last)
        probes.append(_pair(f"decode[{part[0]}..{part[-1]}]", [[last]], part[None]))
    probes += pair_extras(P, spec.causal, spec.artifact)
    if not spec.causal:
        coverage["distances"] += "; the same negative distances (keys after a query at 0)"
    coverage["positions_checked"] = int(
        np.unique(np.concatenate([np.concatenate([a.ravel() for a in p.positions.values()]) for p in probes])).size
    )
    coverage["max_positions"] = P
    return probes, coverage


def bias_feeds(spec: Any, probe: Probe, rng: np.random.Generator) -> Feeds:
    """The probe's positions, plus standard-normal query/key/value for the scores and attention artifacts."""
    qpos, kpos = probe.positions[QPOS], probe.positions[KPOS]
    feeds: Feeds = {}
    dtype = DTYPES[spec.dtype].np_dtype
    if spec.artifact != "bias":
        b, q, k = qpos.shape[0], qpos.shape[1], kpos.shape[1]
        names = {"query": q, "key": k} | ({"value": k} if spec.artifact == "attention" else {})
        for name, length in names.items():
            shape = (b, spec.num_heads, length, spec.head_dim)
            feeds[name] = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
    return feeds | {QPOS: qpos, KPOS: kpos}


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()


def make_eager(eager_bias: EagerBias) -> Callable[[Any, Feeds], dict[str, np.ndarray]]:
    """The eager outputs of an artifact, from the method's eager bias (in the spec dtype)."""

    def eager(spec: BiasSpec, feeds: Feeds) -> dict[str, np.ndarray]:
        qpos, kpos = torch.from_numpy(feeds[QPOS]), torch.from_numpy(feeds[KPOS])
        with torch.no_grad():
            bias = eager_bias(spec, qpos, kpos)
            assert bias.dtype == DTYPES[spec.dtype].torch
            if spec.artifact == "bias":
                return {"attention_bias": _numpy(bias)}
            q, k = to_torch(feeds["query"]), to_torch(feeds["key"])
            if spec.artifact == "scores":
                return {"scores": _numpy(scores_with_bias(q, k, bias))}
            return {"output": _numpy(attention_with_bias(q, k, to_torch(feeds["value"]), bias))}

    return eager


def make_oracle(oracle_bias: OracleBias) -> Callable[[Any, Feeds], dict[str, np.ndarray]]:
    """The float64 outputs of an artifact, from the method's float64 bias formula."""

    def oracle(spec: BiasSpec, feeds: Feeds) -> dict[str, np.ndarray]:
        qpos, kpos = feeds[QPOS], feeds[KPOS]
        bias = np.broadcast_to(
            oracle_bias(spec, qpos, kpos), (qpos.shape[0], spec.num_heads, qpos.shape[1], kpos.shape[1])
        )
        if spec.causal:
            bias = np.where(kpos[:, None, None, :] > qpos[:, None, :, None], -np.inf, bias)
        if spec.artifact == "bias":
            return {"attention_bias": bias}
        q, k = (np.asarray(feeds[n], np.float64) for n in ("query", "key"))
        scores = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(spec.head_dim) + bias
        if spec.artifact == "scores":
            return {"scores": scores}
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        return {"output": weights @ np.asarray(feeds["value"], np.float64)}

    return oracle


def bias_locate(probe: Probe, output: str, index: tuple[int, ...]) -> dict[str, Any]:
    """(batch, head, i, j or channel) -> positions of that element."""
    b, h, i, last = index
    where = {"batch": b, "head": h, "query_position": int(probe.positions[QPOS][b, i])}
    if output == "output":
        return where | {"channel": last}
    return where | {"key_position": int(probe.positions[KPOS][b, last])}


def bias_guards(spec: Any) -> list[tuple[str, Feeds]]:
    """Calls with a query or a key position of -1 or max_positions: a graph that indexes a table must reject them."""
    rng = np.random.default_rng(0)
    cases = []
    for bad in (-1, spec.max_positions):
        for side in ("query", "key"):
            q = [[0, bad]] if side == "query" else [[0, 1]]
            k = [[0, bad]] if side == "key" else [[0, 1]]
            cases.append((f"{side} position {bad}", bias_feeds(spec, _pair("guard", q, k), rng)))
    return cases


def pair_curve(probe: Probe, output: str) -> tuple[str, np.ndarray]:
    """Curve axis for query/key outputs: the distance i - j for logits and biases, the query position for outputs."""
    qpos, kpos = probe.positions[QPOS], probe.positions[KPOS]
    if output == "output":
        return "query position", qpos[:, None, :, None]
    return "distance i-j", qpos[:, None, :, None] - kpos[:, None, None, :]


def query_curve(probe: Probe, output: str) -> tuple[str, np.ndarray]:
    """Curve axis by query position (for methods whose logits are not a function of i - j alone)."""
    return "query position", probe.positions[QPOS][:, None, :, None]
