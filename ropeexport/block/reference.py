"""The ``block`` in eager PyTorch, in the artifact dtype: what a transformers-style attention layer computes.

Projections and logits in the dtype, softmax in float32 then back to the dtype (transformers' eager attention),
the family's reference module for the positions (RoPE: ``families.rope.reference``, each row at its own
L_b = max(position_ids[b]) + 1), the cache concatenated before the new keys, keys repeated for grouped-query heads,
the causal rule bottom-right aligned and padded keys hidden; a query that sees no key outputs zeros.

Notation as in ``block.export``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from ropeexport.block.projections import block_weights, kv_heads
from ropeexport.block.static import is_static, per_row
from ropeexport.dtypes import DTYPES
from ropeexport.numerics import round_once
from ropeexport.recipes import Feeds
from ropeexport.tensors import to_torch

# rotate(x [b, heads, s, d] in the dtype, position_ids [b, s]) -> x rotated, in the dtype
Rotate = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
# bias(query positions [b, s], key positions [b, t]) -> [b, H, s, t] in the dtype (-inf where the method masks)
Bias = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()


def block_eager(
    spec: Any,
    feeds: Feeds,
    rotate: Rotate | None = None,
    bias: Bias | None = None,
    weights: Mapping[str, np.ndarray] | None = None,
    window: int = 0,
) -> dict[str, np.ndarray]:
    """output [b, s, hidden], present_key / present_value [b, KV, t, d], in the artifact dtype.

    ``rotate`` turns q and k (RoPE); ``bias`` adds to the scaled logits, with each cache slot's position counted
    over the real tokens (cumsum(attention_mask) - 1, padded slots at 0), as BLOOM counts them. A static-cache
    call is evaluated row by row as the dynamic calls it stands for (``block.static``). ``weights`` and ``window`` as
    ``block.export.build_block_graph`` takes them (default: the seeded projections).
    """
    if is_static(feeds):
        return per_row(feeds, lambda row: block_eager(spec, row, rotate, bias, weights, window))
    dtype = DTYPES[spec.dtype].torch
    arrays = block_weights(spec) if weights is None else weights
    # exact: the values are dtype values (rounded once, as the graph stores them)
    w = {k: to_torch(round_once(v, spec.dtype)) for k, v in arrays.items()}

    def project(y: torch.Tensor, name: str) -> torch.Tensor:
        out = y @ w[f"{name}_proj"]
        return out + w[f"{name}_bias"] if f"{name}_bias" in w else out

    H, KV, d = spec.num_heads, kv_heads(spec), spec.head_dim
    x = to_torch(feeds["hidden"])
    b, s, _ = x.shape
    pos = torch.from_numpy(feeds["position_ids"])
    heads = lambda y, n: y.view(b, s, n, d).transpose(1, 2)  # noqa: E731
    with torch.no_grad():
        q, k, v = heads(project(x, "q"), H), heads(project(x, "k"), KV), heads(project(x, "v"), KV)
        if rotate is not None:
            q, k = rotate(q, pos), rotate(k, pos)
        keys = torch.cat([to_torch(feeds["past_key"]), k], dim=2)
        values = torch.cat([to_torch(feeds["past_value"]), v], dim=2)
        past = feeds["past_key"].shape[2]
        real = torch.from_numpy(feeds["attention_mask"]) != 0  # [b, t]: any nonzero value is a real token
        t = real.shape[1]
        distance = (torch.arange(s) + past)[:, None] - torch.arange(t)[None, :]  # [s, t]: query slot - key slot
        causal = (distance >= 0) & ((distance < window) if window else True)  # bottom-right aligned
        mask = causal[None, None] & real[:, None, None, :]  # [b, 1, s, t]
        logits = (q @ keys.repeat_interleave(H // KV, dim=1).transpose(-1, -2)) * (1.0 / math.sqrt(d))
        if bias is not None:
            counted = (torch.from_numpy(feeds["attention_mask"]) != 0).long().cumsum(dim=1) - 1
            logits = logits + bias(pos, counted.clamp(min=0))
        logits = logits.masked_fill(~mask, float("-inf"))
        probs = torch.softmax(logits.float(), dim=-1).nan_to_num(0.0).to(dtype)  # a row with no key: zeros
        attended = probs @ values.repeat_interleave(H // KV, dim=1)  # [b, H, s, d]
        output = project(attended.transpose(1, 2).reshape(b, s, H * d), "o")
    return {"output": _numpy(output), "present_key": _numpy(keys), "present_value": _numpy(values)}
