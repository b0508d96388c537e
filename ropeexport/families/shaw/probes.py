"""Verification of Shaw et al. 2018 artifacts: probes around the clipping distance, eager, and a float64 oracle.

Probes: the additive-bias probes (``families.bias.probes.bias_probes``: self-attention at both ends of the range, rows
with different offsets, decode calls that sweep the distances i - j >= 0), plus
- ``around-clip``: one query in the middle of the range against keys at distances k - 2 .. k + 2 on both sides
  (the last interior rows, the end rows, and keys past the end that must reuse them);
- for non-causal specs, ``keys-after-query``: a query at position 0 against every key 0 .. k + 2 (j - i > 0).
The oracle is the paper's equations in float64, written pair by pair from the clipped distance (it never forms the
per-row products the graph and eager use): e_ij = q_i . (k_j + a^K_r) / sqrt(d), z_i = sum_j alpha_ij (v_j + a^V_r),
with a^K and a^V the rounded tables the artifact stores (the weights are the model's data).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ropeexport.families.bias.probes import KPOS, QPOS, bias_feeds, bias_locate, bias_probes
from ropeexport.families.shaw.reference import shaw_attention, shaw_scores
from ropeexport.families.shaw.spec import ShawSpec
from ropeexport.recipes import Feeds, Probe
from ropeexport.tensors import to_torch

CHUNK = 512  # keys per sweep call


def _pair(name: str, q: Any, k: Any) -> Probe:
    return Probe(name, {QPOS: np.asarray(q, np.int64), KPOS: np.asarray(k, np.int64)})


def shaw_probes(spec: ShawSpec) -> tuple[list[Probe], dict[str, Any]]:
    """The additive-bias probes plus the clipping probes (module docstring), and their coverage."""
    probes, coverage = bias_probes(spec)
    P, k = spec.max_positions, spec.clip
    middle = P // 2
    offsets = [s * d for d in range(k - 2, k + 3) for s in (-1, 1)]
    keys = sorted({middle + o for o in offsets if 0 <= middle + o < P} | {middle})  # the query's own key: causal rows
    probes.append(_pair("around-clip", [[middle]], [keys]))
    if not spec.causal:
        after = np.arange(min(P, k + 3))
        for start in range(0, len(after), CHUNK):
            part = after[start : start + CHUNK]
            probes.append(_pair(f"keys-after-query[{part[0]}..{part[-1]}]", [[0]], part[None]))
    seen = sorted({abs(d) for d in offsets if 0 <= middle + d < P})
    coverage["clip"] = {"k": k, "distances_around_clip": seen, "both_sides": not spec.causal}
    return probes, coverage


def shaw_feeds(spec: ShawSpec, probe: Probe, rng: np.random.Generator) -> Feeds:
    """Standard-normal query and key (and value for ``attention``) for the probe's positions."""
    return bias_feeds(spec, probe, rng)


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()


def shaw_eager(spec: ShawSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """The eager reference (``families.shaw.reference``) in the spec dtype."""
    qpos, kpos = torch.from_numpy(feeds[QPOS]), torch.from_numpy(feeds[KPOS])
    q, k = to_torch(feeds["query"]), to_torch(feeds["key"])
    with torch.no_grad():
        if spec.artifact == "scores":
            return {"scores": _numpy(shaw_scores(spec, q, k, qpos, kpos))}
        return {"output": _numpy(shaw_attention(spec, q, k, to_torch(feeds["value"]), qpos, kpos))}


def shaw_locate(probe: Probe, output: str, index: tuple[int, ...]) -> dict[str, Any]:
    """(batch, head, i, j or channel) -> the positions of that element."""
    return bias_locate(probe, output, index)
