"""The truth for a decoder: a no-cache full recompute in float64 with exact positions.

Every call recomputes the whole sequence so far from the stored (dtype-rounded) weights, every operation in
float64: norms and activations from their formulas, each layer's attention by the float64 block
(``block.oracle.block_float64``) with the family's float64 position function (RoPE: the complex form at
L = max(position_ids) + 1 of the whole sequence, so cached keys are never reused under an old regime). Nothing here
reads a graph or a runtime.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ropeexport.block.oracle import Bias64, Rotate64, block_float64
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.decoder.checkpoint import BLOCK_NAMES, geometry, layer_weights, lm_head
from ropeexport.numerics import round_once


def _erf(x: np.ndarray) -> np.ndarray:
    import torch  # float64 erf (numpy has none); torch.special.erf is accurate to the last bits of a double

    return torch.special.erf(torch.from_numpy(np.ascontiguousarray(x))).numpy()


def activation(name: str, x: np.ndarray) -> np.ndarray:
    """The activation's formula in float64."""
    if name == "silu":
        return x / (1.0 + np.exp(-x))
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "gelu":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))  # gelu_tanh


def _norm(spec: DecoderSpec, x: np.ndarray, w: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    eps = spec.norm_eps
    if spec.architecture.norm == "layer":
        centred = x - x.mean(axis=-1, keepdims=True)
        scaled = centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + eps)
        return scaled * w[f"{name}.weight"] + w[f"{name}.bias"]
    return x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps) * w[f"{name}.weight"]


def _linear(x: np.ndarray, w: Mapping[str, np.ndarray], proj: str, bias: str) -> np.ndarray:
    return x @ w[proj] + (w[bias] if bias in w else 0.0)


def _mlp(spec: DecoderSpec, x: np.ndarray, w: Mapping[str, np.ndarray]) -> np.ndarray:
    up = _linear(x, w, "up_proj", "up_bias")
    if spec.architecture.mlp == "gated":
        up = activation(spec.act, _linear(x, w, "gate_proj", "gate_bias")) * up
    else:
        up = activation(spec.act, up)
    return _linear(up, w, "down_proj", "down_bias")


def stored_float64(spec: DecoderSpec, weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The weights as the graph stores them (rounded once to the dtype), held in float64."""
    return {k: round_once(v, spec.dtype).astype(np.float64) for k, v in weights.items()}


def decoder_float64(
    spec: DecoderSpec,
    weights64: Mapping[str, np.ndarray],
    input_ids: np.ndarray,
    position_ids: np.ndarray,
    attention_mask: np.ndarray,
    rotate: Rotate64 | None = None,
    bias: Bias64 | None = None,
    past: Sequence[tuple[np.ndarray, np.ndarray]] | None = None,
) -> np.ndarray:
    """float64 logits [b, s, vocab] of the whole sequence (input_ids, position_ids [b, s]; attention_mask [b, s]).

    ``weights64``: ``stored_float64`` of the decoder's weights. ``rotate`` / ``bias``: the family's float64 position
    function (``kinds.PositionPiece``). ``past``: per layer the (key, value) [b, KV, p, d] some earlier calls cached
    (keys already rotated), given rather than recomputed (``audit.prove`` places a call after p arbitrary entries
    this way); attention_mask is then [b, p + s].
    """
    position = spec.position_spec()
    _, KV, d = geometry(spec)
    b = input_ids.shape[0]
    if past is not None and len(past) != spec.num_layers:
        raise ValueError(f"past holds {len(past)} layers, the decoder has {spec.num_layers}")
    h = weights64["embed"][input_ids]
    if spec.architecture.embed_norm:
        h = _norm(spec, h, weights64, "embed_norm")
    empty = np.zeros((b, KV, 0, d))
    for i in range(spec.num_layers):
        w = layer_weights(weights64, i)
        x = _norm(spec, h, w, "norm1")
        key, value = (empty, empty) if past is None else past[i]
        feeds = {"hidden": x, "position_ids": position_ids, "attention_mask": attention_mask, "past_key": key,
                 "past_value": value}  # fmt: skip
        block = {n: v for n, v in w.items() if n in BLOCK_NAMES}
        attended = block_float64(position, feeds, rotate, bias, block, spec.sliding_window)["output"]
        if spec.residual == "sequential":
            h = h + attended
            h = h + _mlp(spec, _norm(spec, h, w, "norm2"), w)
        else:
            y = x if spec.residual == "shared" else _norm(spec, h, w, "norm2")
            h = h + attended + _mlp(spec, y, w)
    h = _norm(spec, h, weights64, "final_norm")
    logits = h @ lm_head(spec, weights64)
    return logits + weights64["lm_head_bias"] if "lm_head_bias" in weights64 else logits
