"""The indexer's float64 twin (``components.latent.indexer`` module doc), its top-k selection and its near ties.

Written from transformers 5.23's ``DeepseekV32Indexer.forward`` (``deepseek_v32/modular_deepseek_v32.py``:
210-268), never from the graph. The selection keeps, per query row, the ``min(topk, t)`` highest scores; equal
scores go to the LOWER key index first, ONNX's ``TopK`` rule ("the element with the lower index will appear first")
and what ONNX Runtime 1.31 CPU does (measured, ``tests/components/test_indexer.py``); torch.topk promises no order
among equal values. relu makes exact ties common: a key every head scores negative scores exactly 0.

A selection near a tie is not silently taken either way: ``near_ties`` names each query row whose k-th and
(k + 1)-th scores lie within a bound (row, query, the keys near the boundary, the float64 margin), and ``select64``
takes ``flips`` (row, query, the key taken in, the key it replaces), as the decoder's routing near ties are
handled (``decoder.oracle.Routing``).

Notation as in ``components.latent.indexer``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

import numpy as np

from ropeexport.components.latent.indexer import INDEXER_NORM_EPS, IndexerSpec
from ropeexport.components.linear import linear64
from ropeexport.components.norm import NormSpec, norm64

Rotate64 = Callable[[np.ndarray, np.ndarray], np.ndarray]  # x [b, heads, s, rope] float64, position_ids [b, s]
Flip = tuple[int, int, int, int]  # (row, query slot, the key taken in, the key it replaces)


@dataclass(frozen=True)
class Tie:
    """A query row whose selection is within ``margin`` of choosing otherwise, at row ``row``, query slot ``query``
    (of this call's new tokens): ``keys``, every visible key whose score is within the bound of the boundary (the
    k-th highest score: kept and left-out keys both), best first; ``margin``, the k-th minus the (k + 1)-th score;
    ``entering`` and ``leaving``, the best key left out and the worst kept (the pair a flip swaps first). Any key of
    ``keys`` may replace any other of them in a selection as near to the truth.
    """  # noqa: D205

    row: int
    query: int
    keys: tuple[int, ...]
    margin: float
    entering: int = -1
    leaving: int = -1


def index64(spec: IndexerSpec, hidden: np.ndarray, q_source: np.ndarray | None, position_ids: np.ndarray,
            past_index_key: np.ndarray, visible: np.ndarray, weights: Mapping[str, np.ndarray],
            rotate: Rotate64 | None = None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(index scores [b, s, t] float64, -inf where ``visible`` [b, 1, s, t] is False; present_index_key [b, 1, t, D]).

    ``hidden`` [b, s, n]; ``q_source`` [b, s, q_lora_rank]: the query LoRA's normed output (``query`` "lora"; None
    for "hidden"); ``past_index_key`` [b, 1, p, D]; ``weights``: the indexer's stored values (``spec.shapes``);
    ``rotate``: the rotation twin in the indexer's layout, default the piece's (None and no piece: none).
    """
    if rotate is None and spec.position is not None:
        rotate = spec.position.rotate64
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    x = np.asarray(hidden, np.float64)
    b, s, _ = x.shape
    H, D, rope = spec.num_heads, spec.head_dim, spec.rope_dim
    layer = NormSpec("layer", INDEXER_NORM_EPS)
    source = norm64(layer, x, w["q_norm"], w["q_norm_bias"]) if spec.query == "hidden" else q_source
    assert source is not None, "the lora query needs the query LoRA's normed output"
    q = linear64(np.asarray(source, np.float64), w["wq_b"]).reshape(b, s, H, D).transpose(0, 2, 1, 3)  # [b,H,s,D]
    pos = np.asarray(position_ids)
    if spec.log_scale:  # q_scale[h] * log(p + 1) + q_bias[h]
        factor = w["q_scale"][None, :, None] * np.log(pos + 1.0)[:, None, :] + w["q_bias"][None, :, None]
        q = q * factor[..., None]
    k = norm64(layer, linear64(x, w["wk"]), w["k_norm"], w["k_norm_bias"])[:, None]  # [b, 1, s, D]
    if rotate is not None:
        q = np.concatenate([rotate(q[..., :rope], pos), q[..., rope:]], axis=-1)
        k = np.concatenate([rotate(k[..., :rope], pos), k[..., rope:]], axis=-1)
    keys = np.concatenate([np.asarray(past_index_key, np.float64), k], axis=2)  # [b, 1, t, D]
    scores = np.maximum(np.einsum("bhsd,bxtd->bhst", q, keys) * D**-0.5, 0.0)  # [b, H, s, t]
    head_weights = linear64(x, w["weights_proj"]) * H**-0.5  # [b, s, H]
    index = np.einsum("bsh,bhst->bst", head_weights, scores)
    return np.where(np.asarray(visible)[:, 0], index, -np.inf), keys


def select64(scores: np.ndarray, topk: int, flips: Collection[Flip] = ()) -> np.ndarray:
    """bool [b, 1, s, t]: each query row's min(topk, t) highest ``scores`` [b, s, t], equal scores to the lower key
    index (module doc); a flip (row, query, entering, leaving) takes ``entering`` into that row's selection in
    place of ``leaving``.
    """  # noqa: D205
    b, s, t = scores.shape
    k = min(topk, t)
    order = np.argsort(-scores, axis=-1, kind="stable")  # descending, ties by ascending index
    chosen = np.zeros((b, s, t), bool)
    np.put_along_axis(chosen, order[..., :k], True, axis=-1)
    for row, query, entering, leaving in flips:
        chosen[row, query, leaving], chosen[row, query, entering] = False, True
    return chosen[:, None]


def near_ties(scores: np.ndarray, topk: int, bound: float, relative: bool = False) -> list[Tie]:
    """Every query row of ``scores`` [b, s, t] whose selection bites (more than min(topk, t) visible keys) and whose
    k-th and (k + 1)-th highest visible scores are within ``bound`` (exact ties included: margin 0), with every
    key near the boundary (``Tie``). ``relative``: the bound times the row's largest visible |score| (a runtime's
    error on a score is of the size of the row's largest terms).
    """  # noqa: D205
    b, s, t = scores.shape
    k = min(topk, t)
    if k >= t:
        return []
    order = np.argsort(-scores, axis=-1, kind="stable")
    ranked = np.take_along_axis(scores, order, axis=-1)
    out = []
    for row in range(b):
        for query in range(s):
            kept, out_best = ranked[row, query, k - 1], ranked[row, query, k]
            seen = ranked[row, query][np.isfinite(ranked[row, query])]
            within = bound * (float(np.abs(seen).max()) if relative and seen.size else 1.0)
            if np.isfinite(out_best) and kept - out_best <= within:
                near = np.abs(ranked[row, query] - kept) <= within
                out.append(Tie(row, query, tuple(int(j) for j in order[row, query][near]), float(kept - out_best),
                               int(order[row, query, k]), int(order[row, query, k - 1])))  # fmt: skip
    return out
