"""The ``latent`` component's float64 twin: one MLA layer over either cache, every operation exact to float64.

Written from the definition (``spec`` module doc; DeepSeek-V2 section 2.1), never from the graph, and the same
function for both caches: a latent cache is expanded through ``kv_b_proj`` here (the keys and values it stands
for), so the twin of the absorbed graph is the plain attention the absorption rewrites. The rows that see no key
output zeros, as ``components.attention.float64``.

Notation as in ``components.latent.spec``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

import numpy as np

from ropeexport.components.attention.float64 import visible
from ropeexport.components.latent.indexer import indexer_weights
from ropeexport.components.latent.indexer64 import Flip, Tie, index64, near_ties, select64
from ropeexport.components.latent.spec import LatentSpec, check_weights
from ropeexport.components.linear import linear64
from ropeexport.components.norm import norm64
from ropeexport.components.query_scale import LearnedScaleSpec, QueryScaleSpec, learned_scale64, query_scale64
from ropeexport.forms import FORMS
from ropeexport.recipes import Feeds

# rotate(x [b, heads, s, rope] float64, position_ids [b, s]) -> float64
Rotate64 = Callable[[np.ndarray, np.ndarray], np.ndarray]


def expand64(spec: LatentSpec, latent: np.ndarray, rope_key: np.ndarray,
             w: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """latent [b, 1, t, r] and rotated rope_key [b, 1, t, rope] -> keys [b, H, t, nope + rope], values [b, H, t, v]:
    ``kv_b_proj`` of the latent per head, each head's key its nope part beside the one shared rope key.
    """  # noqa: D205
    b, _, t, _ = latent.shape
    H, nope, v = spec.num_heads, spec.qk_nope_head_dim, spec.v_head_dim
    kv = (latent[:, 0] @ w["kv_b_proj"]).reshape(b, t, H, nope + v).transpose(0, 2, 1, 3)  # [b, H, t, nope + v]
    shared = np.broadcast_to(rope_key, (b, H, t, spec.qk_rope_head_dim))
    return np.concatenate([kv[..., :nope], shared], axis=-1), kv[..., nope:]


def latent64(spec: LatentSpec, feeds: Feeds, weights: Mapping[str, np.ndarray], rotate: Rotate64 | None = None,
             index_rotate: Rotate64 | None = None, flips: Collection[Flip] = (),
             ties: tuple[float, list[Tie]] | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """float64 ``output`` [b, s, n] and the spec's cache outputs of a dynamic call.

    ``feeds``: hidden [b, s, n], position_ids [b, s], attention_mask [b, t], and the cache (``spec.cache_shapes``:
    past_key / past_value, or past_latent / past_rope_key). Outputs: expanded, present_key [b, H, t, nope + rope] /
    present_value [b, H, t, v] (the gqa form's padded with zeros to nope + rope); latent, present_latent
    [b, 1, t, r] / present_rope_key [b, 1, t, rope] (rotated). ``kv_sharing`` ``reuse``: feeds shared_latent /
    shared_rope_key [b, 1, t, *] instead of a cache, no cache out; ``store``: shared_latent / shared_rope_key out too.
    ``weights``: the stored values (``spec.shapes``). ``rotate``: the rotation twin, default the piece's ``rotate64``
    (None and no piece: nothing rotated).

    With an indexer (``spec.indexer``): ``present_index_key`` [b, 1, t, D] and ``index_selected`` bool [b, 1, s, t]
    out, the attention seeing only the selected keys (``indexer64.select64`` with ``flips``; ``index_rotate``: the
    indexer's rotation twin, default its piece's); a shared layer reads ``index_selected`` from ``feeds``. ``ties``
    (bound, list): the selection's near ties within the bound times each row's largest |score| appended to the list
    (``indexer64.near_ties``).
    """
    check_weights(spec, weights)
    if rotate is None and spec.position is not None:
        rotate = spec.position.rotate64
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    H, nope, r = spec.num_heads, spec.qk_nope_head_dim, spec.kv_lora_rank
    x = np.asarray(feeds["hidden"], np.float64)
    b, s, _ = x.shape
    pos = np.asarray(feeds["position_ids"])
    low = None
    if spec.q_lora_rank:
        low = norm64(spec.norm, linear64(x, w["q_a_proj"]), w["q_a_norm"])  # [b, s, q_lora_rank]
        q = linear64(low, w["q_b_proj"])
    else:
        q = linear64(x, w["q_proj"])
    q = q.reshape(b, s, H, spec.qk_head_dim).transpose(0, 2, 1, 3)  # [b, H, s, nope + rope]
    q_nope, q_rope = q[..., :nope], q[..., nope:]
    reuse = spec.kv_sharing == "reuse"
    if reuse:  # another layer's latent and rotated rope key, its cache and its new tokens [b, 1, t, *]
        latent = np.asarray(feeds["shared_latent"], np.float64)
        rope_key = np.asarray(feeds["shared_rope_key"], np.float64)
    else:
        compressed = linear64(x, w["kv_a_proj"])  # [b, s, r + rope]
        latent = norm64(spec.norm, compressed[..., :r], w["kv_a_norm"])[:, None]  # [b, 1, s, r]
        rope_key = compressed[..., r:][:, None]  # [b, 1, s, rope]: one key slice for every head
    if rotate is not None:
        q_rope = rotate(q_rope, pos)
        rope_key = rope_key if reuse else rotate(rope_key, pos)
    query = np.concatenate([q_nope, q_rope], axis=-1)
    if isinstance(spec.query_scale, LearnedScaleSpec):  # scale[h] * log(p + 1) + bias[h], head h at position p
        query = query * learned_scale64(w["q_scale"], w["q_scale_bias"], pos)
    if isinstance(spec.query_scale, QueryScaleSpec):  # the whole query times its position's factor (Mistral 4)
        query = query * query_scale64(spec.query_scale, pos)[:, None, :, None]
    if reuse:
        keys, values = expand64(spec, latent, rope_key, w)
        past, present = latent.shape[2] - s, {}
    elif spec.cache == "latent":
        latents = np.concatenate([np.asarray(feeds["past_latent"], np.float64), latent], axis=2)
        rope_keys = np.concatenate([np.asarray(feeds["past_rope_key"], np.float64), rope_key], axis=2)
        keys, values = expand64(spec, latents, rope_keys, w)
        past = feeds["past_latent"].shape[2]
        present = {"present_latent": latents, "present_rope_key": rope_keys}
    else:
        if spec.kv_sharing == "store" and feeds["past_key"].shape[2]:
            raise ValueError("a storing layer's twin over the expanded cache has no past latent to share")
        new_keys, new_values = expand64(spec, latent, rope_key, w)
        if FORMS[spec.graph].one_head_size:  # its cache holds values padded with zeros to the key's width
            pad = spec.qk_head_dim - spec.v_head_dim
            new_values = np.concatenate([new_values, np.zeros((*new_values.shape[:3], pad))], axis=-1)
        keys = np.concatenate([np.asarray(feeds["past_key"], np.float64), new_keys], axis=2)
        values = np.concatenate([np.asarray(feeds["past_value"], np.float64), new_values], axis=2)
        past = feeds["past_key"].shape[2]
        present = {"present_key": keys, "present_value": values}
        values = values[..., : spec.v_head_dim]  # the padding (gqa) read by nothing
    seen = visible(s, past, np.asarray(feeds["attention_mask"]))  # [b, 1, s, t]
    index = spec.indexer
    if index is not None and index.shared:
        seen = seen & np.asarray(feeds["index_selected"], bool)
    elif index is not None:
        scores, present["present_index_key"] = index64(index, x, low, pos, feeds["past_index_key"], seen,
                                                       indexer_weights(w), index_rotate)  # fmt: skip
        present["index_selected"] = select64(scores, index.topk, flips)
        if ties is not None:
            ties[1].extend(near_ties(scores, index.topk, ties[0], relative=True))
        seen = seen & present["index_selected"]
    logits = np.einsum("bhid,bhjd->bhij", query, keys) * spec.logit_scale
    logits = np.where(seen, logits, -np.inf)  # [b, H, s, t]
    top = np.max(logits, axis=-1, keepdims=True)
    sees = np.isfinite(top)
    e = np.where(np.isfinite(logits), np.exp(logits - np.where(sees, top, 0.0)), 0.0)
    probs = e / np.where(sees, e.sum(axis=-1, keepdims=True), 1.0)
    attended = (probs @ values).transpose(0, 2, 1, 3).reshape(b, s, H * spec.v_head_dim)
    if spec.kv_sharing == "store":  # what a later layer reads: the whole latent and rotated rope key so far
        present |= {"shared_latent": latents if spec.cache == "latent" else latent,
                    "shared_rope_key": rope_keys if spec.cache == "latent" else rope_key}  # fmt: skip
    return {"output": linear64(attended, w["o_proj"]), **present}


def index_feeds(spec: LatentSpec, feeds: Feeds, selected: np.ndarray | None,
                past_index_key: np.ndarray | None = None) -> Feeds:  # fmt: skip
    """``feeds`` with what the layer's indexer reads beside them: its key cache ``past_index_key`` [b, 1, p, D] (the
    one given beside a past cache, as the graft proof's random cached entries give one: ``audits.truth.Cache``; empty
    over no cache), or a shared layer's ``selected`` [b, 1, s, t] (the last full indexer layer's
    ``index_selected``); ``feeds`` as given for a layer without an indexer. ValueError for a past cache without its
    indexer keys (a recompute with past keys has no indexer keys for them), or given keys of another length.
    """  # noqa: D205
    index = spec.indexer
    if index is None:
        return feeds
    past = next(np.asarray(feeds[n]).shape[2] for n in ("past_key", "past_latent") if n in feeds)
    if index.shared:
        if selected is None:
            raise ValueError("a shared indexer layer reads a full indexer layer's selection: none came before it")
        return {**feeds, "index_selected": selected}
    if past_index_key is not None:
        if np.asarray(past_index_key).shape[2] != past:
            raise ValueError(f"the indexer's key cache holds {np.asarray(past_index_key).shape[2]} entries where the "
                             f"attention's holds {past}")  # fmt: skip
        return {**feeds, "past_index_key": np.asarray(past_index_key, np.float64)}
    if past:
        raise ValueError("a float64 recompute over past keys has no indexer keys for them: recompute the whole call")
    b = np.asarray(feeds["hidden"]).shape[0]
    return {**feeds, "past_index_key": np.zeros((b, 1, 0, index.head_dim))}
