"""The truth for a decoder: a no-cache full recompute in float64 with exact positions.

Every call recomputes the whole sequence so far from the stored weights (``linear.WeightFormat.read64``: the values the
graph holds), every operation in float64: the same composition of components as ``decoder.export`` over ``spec.layers``,
each component's float64 twin (``norm64``, ``mlp64`` or ``moe64``, ``attention64``) in place of its graph, each layer
with its own window and its position piece's float64 twin (RoPE: the complex form at L = max(position_ids) + 1 of the
whole sequence, so cached keys are never reused under an old regime; a layer without positional encoding: nothing
rotated). Nothing here reads a graph or a runtime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ropeexport.components.attention.float64 import Bias64, Rotate64, attention64
from ropeexport.components.linear import is_weight, linear64
from ropeexport.components.mlp import mlp64
from ropeexport.components.moe import MoESpec, moe64
from ropeexport.components.norm import norm64
from ropeexport.decoder.checkpoint import BLOCK_NAMES, geometry, layer_weights, lm_head
from ropeexport.decoder.export import embed_scale
from ropeexport.decoder.parts import Pieces, attention_spec, mlp_spec, norm_spec, twins, weight_format
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.kinds import PositionPiece
from ropeexport.numerics import round_once


@dataclass
class Routing:
    """A recompute's routing of a mixture of experts (``components.moe``): ``flips``, the (layer, row, slot) tokens
    routed the other way at their near tie; with ``bound`` > 0, every near tie within it (``moe.near_ties``) is
    appended to ``ties`` as (layer, row, slot, margin).
    """  # noqa: D205

    flips: frozenset[tuple[int, int, int]] = frozenset()
    bound: float = 0.0
    ties: list[tuple[int, int, int, float]] = field(default_factory=list)


def stored_float64(spec: DecoderSpec, weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The weights as the graph stores them, held in float64: projections as the weight format reads them back,
    everything else rounded once to the dtype.
    """  # noqa: D205
    reads = weight_format(spec)
    return {k: reads.read64(v) if is_weight(k) else round_once(v, spec.dtype).astype(np.float64)
            for k, v in weights.items()}  # fmt: skip


def decoder_float64(
    spec: DecoderSpec,
    weights64: Mapping[str, np.ndarray],
    input_ids: np.ndarray,
    position_ids: np.ndarray,
    attention_mask: np.ndarray,
    rotate: Rotate64 | None = None,
    bias: Bias64 | None = None,
    past: Sequence[tuple[np.ndarray, np.ndarray]] | None = None,
    *,
    pieces: Pieces | None = None,
    routing: Routing | None = None,
) -> np.ndarray:
    """float64 logits [b, s, vocab] of the whole sequence (input_ids, position_ids [b, s]; attention_mask [b, s]).

    ``weights64``: ``stored_float64`` of the decoder's weights. ``pieces``: per layer its position piece
    (``parts.position_pieces``; its float64 twin is used), None for a layer without one. ``rotate`` / ``bias``
    instead: a uniform decoder's one float64 position function (``kinds.PositionPiece``), for every layer that has a
    positional encoding. ``past``: per layer the (key, value) [b, KV, p, d] some earlier calls cached (keys already
    rotated), given rather than recomputed (``audit.prove`` places a call after p arbitrary entries this way);
    attention_mask is then [b, p + s]. ``routing``: a mixture of experts' near ties collected and flips applied
    (``Routing``); None: each token routed by its float64 router logits.
    """
    if pieces is None:
        pieces = twins(spec, PositionPiece(rotate64=rotate, bias64=bias))
    if len(pieces) != spec.num_layers:
        raise ValueError(f"pieces holds {len(pieces)} layers, the decoder has {spec.num_layers}")
    if past is not None and len(past) != spec.num_layers:
        raise ValueError(f"past holds {len(past)} layers, the decoder has {spec.num_layers}")
    norm_of, mlp_of = norm_spec(spec), mlp_spec(spec)

    def feedforward(y: np.ndarray, w: Mapping[str, np.ndarray], layer: int) -> np.ndarray:
        if not isinstance(mlp_of, MoESpec):
            return mlp64(mlp_of, y, w)
        if routing is None:
            return moe64(mlp_of, y, w)
        t = y.shape[1]  # a token's flat index: row x t + slot
        found: tuple[float, list[tuple[int, float]]] = (routing.bound, [])
        out = moe64(mlp_of, y, w, [r * t + j for (at, r, j) in routing.flips if at == layer],
                    found if routing.bound else None)  # fmt: skip
        routing.ties.extend((layer, token // t, token % t, margin) for token, margin in found[1])
        return out

    normed = lambda x, w, name: norm64(norm_of, x, w[f"{name}.weight"], w.get(f"{name}.bias"))  # noqa: E731
    b = input_ids.shape[0]
    h = weights64["embed"][input_ids]
    if spec.architecture.embed_scale:
        h = h * embed_scale(spec).astype(np.float64)
    if spec.architecture.embed_norm:
        h = normed(h, weights64, "embed_norm")
    for i, layer in enumerate(spec.layers):
        _, KV, d = geometry(spec, i)
        w = layer_weights(weights64, i)
        x = normed(h, w, "norm1")
        key, value = (np.zeros((b, KV, 0, d)),) * 2 if past is None else past[i]
        feeds = {"hidden": x, "position_ids": position_ids, "attention_mask": attention_mask, "past_key": key,
                 "past_value": value}  # fmt: skip
        block = {n: v for n, v in w.items() if n in BLOCK_NAMES}
        attended = attention64(attention_spec(spec, i, pieces[i]), feeds, block)["output"]
        if spec.residual == "sandwich":
            h = h + normed(attended, w, "norm2")
            h = h + normed(feedforward(normed(h, w, "norm3"), w, i), w, "norm4")
        elif spec.residual == "sequential":
            h = h + attended
            h = h + feedforward(normed(h, w, "norm2"), w, i)
        else:  # parallel: the MLP reads its own norm of the layer input, or the attention's (no norm2: GPT-J)
            y = normed(h, w, "norm2") if "norm2" in layer.norms else x
            h = h + attended + feedforward(y, w, i)
    h = normed(h, weights64, "final_norm")
    logits = linear64(h, lm_head(spec, weights64), weights64.get("lm_head_bias"))
    if spec.final_softcap:
        cap = float(round_once(np.array(spec.final_softcap), spec.dtype))
        logits = cap * np.tanh(logits / cap)
    return logits
