"""The ``attention`` component's float64 twin: one layer over a KV cache, every operation exact to float64.

Written from the definition, never from the graph: the projections of the stored weights, each query and key head
RMS-normalized (``qk_norm``, the ``norm`` component's twin), the position piece's float64 twin (RoPE: ``rotate64``,
the family's complex-form oracle; a bias: ``bias64``), logits q k^T * scale (1 / sqrt(d) unless the spec says) over
the cache and the new keys, soft-capped (cap * tanh(l / cap), Gemma 2), the bias, the causal rule bottom-right
aligned (and the window), padded keys hidden, softmax (with each head's sink logit in it: gpt-oss), a row that sees
no key set to zeros. A dynamic call only: a static-cache call is evaluated as the dynamic rows it stands for by its
caller (``block.static``).

Notation as in ``components.attention.graph``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ropeexport.components.attention.spec import AttentionSpec, check_weights
from ropeexport.components.linear import linear64
from ropeexport.components.norm import norm64
from ropeexport.components.query_scale import query_scale64
from ropeexport.recipes import Feeds

# rotate(x [b, heads, s, d] float64, position_ids [b, s]) -> float64
Rotate64 = Callable[[np.ndarray, np.ndarray], np.ndarray]
# bias(query positions [b, s], key positions [b, t]) -> float64 [b, H, s, t] (-inf where the method masks)
Bias64 = Callable[[np.ndarray, np.ndarray], np.ndarray]


def visible(query_count: int, past: int, attention_mask: np.ndarray, window: int = 0, chunk: int = 0) -> np.ndarray:
    """bool [b, 1, s, t]: key slot j visible to query slot i iff j <= i + past (and i + past - j < window, when
    given; and (j - l) // chunk == (i + past - l) // chunk, l the row's left padding, when ``chunk`` is given: Llama
    4's chunks, counted from each row's first real token as transformers' ``chunked_overlay`` counts them) and
    attention_mask marks j real.
    """  # noqa: D205
    t = attention_mask.shape[1]
    distance = (np.arange(query_count) + past)[:, None] - np.arange(t)[None, :]  # [s, t]: query slot - key slot
    causal = (distance >= 0) & ((distance < window) if window else True)
    real = attention_mask != 0  # any nonzero value is a real token
    out = causal[None, None] & real[:, None, None, :]
    if chunk:
        left = (np.cumsum(real, axis=1) == 0).sum(axis=1)[:, None]  # [b, 1]: slots before the first real token
        keys = (np.arange(t)[None, :] - left) // chunk  # [b, t] (floor, as Python's // on torch tensors)
        queries = (np.arange(query_count)[None, :] + past - left) // chunk  # [b, s]
        out = out & (keys[:, None, None, :] == queries[:, None, :, None])
    return out


def attention64(
    spec: AttentionSpec,
    feeds: Feeds,
    weights: Mapping[str, np.ndarray],
    rotate: Rotate64 | None = None,
    bias: Bias64 | None = None,
) -> dict[str, np.ndarray]:
    """float64 output [b, s, n], present_key / present_value [b, KV, t, d] and, with ``kv_sharing`` ``store``, the
    new shared_key / shared_value [b, KV, s, d] of a dynamic call (``reuse``: those two are fed, the storing layer's).

    ``weights``: the stored values in float64 (``linear.WeightFormat.read64``), names as ``attention_model`` takes
    them. ``rotate`` / ``bias``: the position twin to use, default the spec's piece's (``rotate64`` / ``bias64``);
    given, they replace it (a caller that fixes L for a whole batch). ``bias`` is added to the scaled logits with
    each slot's position counted over the real tokens (padding at 0). With the spec's variants, ``q_norm`` /
    ``k_norm`` [d] and ``sinks`` [H] (stored values too).
    """  # noqa: D205
    check_weights(spec, weights)
    if rotate is None and bias is None and spec.position is not None:
        rotate, bias = spec.position.rotate64, spec.position.bias64
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    project = lambda y, name: linear64(y, w[f"{name}_proj"], w.get(f"{name}_bias"))  # noqa: E731
    H, KV, d = spec.num_heads, spec.num_kv_heads, spec.head_dim
    x = np.asarray(feeds["hidden"], np.float64)
    b, s, _ = x.shape
    pos = feeds["position_ids"]
    heads = lambda y, n: y.reshape(b, s, n, d).transpose(0, 2, 1, 3)  # noqa: E731
    reuse = spec.kv_sharing == "reuse"  # another layer's keys and values (Gemma 4): the query alone computed here
    if reuse:
        q, k, v = heads(project(x, "q"), H), np.asarray(feeds["shared_key"]), np.asarray(feeds["shared_value"])
    elif spec.qk_norm is not None and spec.qk_norm_over == "projection":  # over H * d, before the heads (OLMo 3)
        values = project(x, "k" if spec.k_eq_v else "v")  # keys as values (Gemma 4): the key's output, unnormed
        q_flat, k_flat = norm64(spec.qk_norm, project(x, "q"), w["q_norm"]), norm64(spec.qk_norm, project(x, "k"),
                                                                                    w["k_norm"])  # fmt: skip
        q, k, v = heads(q_flat, H), heads(k_flat, KV), heads(values, KV)
    else:
        values = project(x, "k" if spec.k_eq_v else "v")
        q, k, v = heads(project(x, "q"), H), heads(project(x, "k"), KV), heads(values, KV)
    if spec.v_norm is not None:  # each value head over d, no weight (Gemma 4's v_norm)
        v = norm64(spec.v_norm, v, np.ones(d))
    if spec.qk_norm is not None and spec.qk_norm_over == "head":  # each head over d, before the rotation (Qwen3)
        # Llama 4's weightless L2 norm: transformers applies it after the rotation, which leaves each head's sum of
        # squares as it is (every pair rotated by an orthogonal 2 x 2), so before it is the same value
        ones = np.ones(d)
        q = norm64(spec.qk_norm, q, w["q_norm"] if spec.qk_weights else ones)
        k = k if reuse else norm64(spec.qk_norm, k, w["k_norm"] if spec.qk_weights else ones)
    if rotate is not None:
        q, k = rotate(q, pos), k if reuse else rotate(k, pos)
    if spec.query_scale is not None:  # the rotated query times its position's factor (Ministral 3)
        q = q * query_scale64(spec.query_scale, pos)[:, None, :, None]
    keys = np.concatenate([np.asarray(feeds["past_key"], np.float64), k], axis=2)
    values = np.concatenate([np.asarray(feeds["past_value"], np.float64), v], axis=2)
    mask = visible(s, feeds["past_key"].shape[2], feeds["attention_mask"], spec.window, spec.chunk)  # [b, 1, s, t]
    group = H // KV
    logits = np.einsum("bhid,bhjd->bhij", q, np.repeat(keys, group, axis=1))
    logits = logits * spec.scale if spec.scale else logits / np.sqrt(d)
    if spec.logit_softcap:  # after the scale, before the bias and the mask (Gemma 2's eager attention)
        logits = spec.logit_softcap * np.tanh(logits / spec.logit_softcap)
    if bias is not None:
        slots = np.maximum(np.cumsum(feeds["attention_mask"] != 0, axis=1) - 1, 0)
        logits = logits + bias(pos, slots)
    logits = np.where(mask, logits, -np.inf)  # [b, H, s, t]
    t = logits.shape[-1]
    if spec.sinks:  # one more logit per head in each row's softmax, attending to nothing (gpt-oss): [b, H, s, t + 1]
        column = np.broadcast_to(w["sinks"].reshape(1, H, 1, 1), (*logits.shape[:3], 1))
        logits = np.concatenate([logits, column], axis=-1)
    top = np.max(logits, axis=-1, keepdims=True)
    sees = np.isfinite(top)  # with sinks always: a row that sees no key puts all its weight on the sink
    e = np.where(np.isfinite(logits), np.exp(logits - np.where(sees, top, 0.0)), 0.0)
    weights64 = (e / np.where(sees, e.sum(axis=-1, keepdims=True), 1.0))[..., :t]  # the sink's column dropped
    attended = weights64 @ np.repeat(values, group, axis=1)
    output = project(attended.transpose(0, 2, 1, 3).reshape(b, s, H * d), "o")
    out = {"output": output, "present_key": keys, "present_value": values}
    if spec.kv_sharing == "store":  # the new keys and values as attended ([b, KV, s, d]), as the graph gives them out
        out |= {"shared_key": k, "shared_value": v}
    return out
