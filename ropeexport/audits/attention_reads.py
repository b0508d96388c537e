"""What each layer's attention does beside the rotation, read by use: which keys each query sees, and the logits' scale.

Two readings for ``audits.features`` that do not trust any exporter's names or constants:

- **Which keys each query sees** (Llama 4's chunks). Every layer's attention is found by its operator (a ``Softmax``
  naming its layer; an ``Attention``, ``GroupQueryAttention`` or ``MultiHeadAttention``) and what it lets through is
  evaluated in ONNX Runtime for one call of ``n`` tokens at positions 0 .. n - 1 with an empty cache: the Softmax's
  weights (a masked key gets exactly 0: exp of the dtype's most negative logit underflows), or the fused operator's
  mask input (a boolean; an additive mask's hidden keys are below half the dtype's most negative value). Without a
  mask input the operator's own causal rule (and GroupQueryAttention's ``local_window_size``) is what it sees. From
  each query's first visible key the chunks are read, size and boundaries: a boundary moved without its size
  changing (chunks starting at k * C + 1), a size changed, no chunks, and any other mask are each told apart, in
  ropeexport's form, a dynamo or TorchScript export's, or mobius's alike. ``n`` is 2 chunks and 2 tokens (two
  boundaries seen), at most the context; a call whose weights would exceed ``BUDGET`` values is not evaluated and the
  chunks are said unread.
- **The logits' scale in a decomposed attention** (DeepSeek's mscale squared): from each layer's Softmax back to the
  q.k ``MatMul`` (or ONNX Runtime's ``FusedMatMul``, its ``alpha`` a factor too: ``patterns.base.is_product``) through
  the mask's ``Add`` / ``Where`` and casts, and from the product's two operands back through nodes that only move
  values (``MOVES``), the product of every scalar ``Mul`` / ``Div`` met on the way (torch's
  decomposition puts sqrt(scale) on q and on k; ropeexport's one Mul after the MatMul; the latent cache's two
  MatMuls added, each of which must carry the same factor). A Mul by a position's query factor (a table gathered at
  position_ids // divisor: Mistral 4's, which the latent cache applies to the logits) is passed over: it is the
  query scale, read and judged by ``audits.query_scale``. A path that meets anything else (a soft cap, a factor
  that is not one constant) leaves the layer's scale unread, said so. A scale folded into a projection's weights is
  not on that path: it reads as missing (a finding, never "exact").

Shapes: a Softmax's weights [b, H, s, t]; a fused operator's mask [b, 1 | H, s, t] or [s, t]; a layer's reading
[s, t] bool (query slot, key slot).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from ropeexport.audits.layers import layer_of
from ropeexport.audits.patterns.base import constant_of, is_product, product_scale
from ropeexport.audits.query_scale import factor_table

# The mask input of each fused operator (ONNX Attention's attn_mask, com.microsoft GroupQueryAttention's
# attention_bias, MultiHeadAttention's attention_bias)
MASK_INPUT = {"Attention": 3, "GroupQueryAttention": 10, "MultiHeadAttention": 5}
BUDGET = 1 << 26  # values of the evaluated weights or masks (256 MiB of float32): beyond, the chunks are unread
# Nodes between a q.k product's operand and the scale's Mul that only move values (data input 0)
MOVES = {"Transpose", "Reshape", "Expand", "Unsqueeze", "Squeeze", "Identity", "Cast"}
SCORES = {"Cast", "Identity"}  # between the Softmax and the mask's Add / Where


def attention_nodes(model: ir.Model) -> dict[int, ir.Node]:
    """Layer -> its attention node (the first Softmax or fused attention operator naming that layer)."""
    found: dict[int, ir.Node] = {}
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.op_type == "Softmax" or node.op_type in MASK_INPUT:
            layer = layer_of(node.name or "", node.metadata_props)
            if layer is not None:
                found.setdefault(layer, node)
    return found


def _own_rule(node: ir.Node, n: int) -> np.ndarray:
    """bool [n, n]: what a fused operator hides by itself (GroupQueryAttention: causal, within ``local_window_size``;
    an Attention with ``is_causal``: causal; else nothing).
    """  # noqa: D205
    distance = np.arange(n)[:, None] - np.arange(n)[None, :]  # query slot - key slot
    if node.op_type == "GroupQueryAttention":
        window = node.attributes.get("local_window_size")
        w = int(window.value) if window is not None else -1
        return (distance >= 0) & ((distance < w) if w > 0 else True)
    causal = node.attributes.get("is_causal")
    return distance >= 0 if causal is not None and int(causal.value) else np.ones((n, n), bool)


def read_visible(path: Path, model: ir.Model, layers: list[int], n: int, heads: int,
                 threads: int = 2) -> tuple[dict[int, np.ndarray], dict[int, str]]:  # fmt: skip
    """(layer -> bool [n, n] which key slot each query slot sees, layer -> why unread) for ``layers``, one call of
    ``n`` tokens (module doc); ``heads``: the query heads a Softmax's weights carry (the budget's count).
    """  # noqa: D205
    from ropeexport.audits.slices import evaluate

    nodes = attention_nodes(model)
    unread = {i: "no attention operator or Softmax names this layer" for i in layers if i not in nodes}
    wanted: dict[int, ir.Value] = {}
    implied: dict[int, np.ndarray] = {}
    for i in [i for i in layers if i in nodes]:
        node = nodes[i]
        if node.op_type == "Softmax":
            wanted[i] = node.outputs[0]
            continue
        implied[i] = _own_rule(node, n)
        at = MASK_INPUT[node.op_type]
        if len(node.inputs) > at and node.inputs[at] is not None:
            wanted[i] = node.inputs[at]  # type: ignore[assignment]
    own = {i: rule for i, rule in implied.items() if i not in wanted}  # fused operators without a mask input
    size = sum(n * n * (heads if nodes[i].op_type == "Softmax" else 1) for i in wanted)
    if wanted and size > BUDGET:
        why = f"one call of {n} tokens would hold {size} attention weights or mask values (over {BUDGET}): not run"
        return own, unread | dict.fromkeys(wanted, why)
    names = [v.name or "" for v in wanted.values()]
    got = evaluate(path, names, n, threads) if wanted and all(names) else None
    if wanted and got is None:
        return own, unread | dict.fromkeys(wanted, "the call that evaluates its mask did not run")
    out = dict(own)
    for i, array in zip(wanted, got or [], strict=False):
        a = np.asarray(array)
        if a.ndim < 2 or a.shape[-2] != n or a.shape[-1] < n:
            unread[i] = f"its mask has shape {list(a.shape)}, not [.., {n}, {n}] for a call of {n} tokens"
            continue
        a = a.reshape(-1, n, a.shape[-1])[0, :, :n]  # the first row and head; a sinks' column past t dropped
        if nodes[i].op_type == "Softmax":
            out[i] = a > 0
            continue
        # a boolean mask, or an additive one: a hidden key below half the dtype's most negative value (or -inf)
        mask = a if a.dtype == np.bool_ else a > np.finfo(a.dtype).min / 2 if a.dtype.kind == "f" else a != 0
        out[i] = mask & implied[i]  # the operator's own causal rule on top of its mask
    return out, unread


def chunks_of(seen: np.ndarray) -> dict[str, Any]:
    """What a layer's [n, n] visibility says of its chunks: {"size": C (0: none, None: one boundary seen),
    "starts": the positions a chunk starts at} when each query sees exactly the keys from its chunk's start to
    itself; {"other": words} otherwise.
    """  # noqa: D205
    n = seen.shape[0]
    firsts = []
    for i in range(n):
        keys = np.flatnonzero(seen[i])
        if keys.size == 0 or keys[-1] != i or keys.size != i - keys[0] + 1:
            shown = "no key" if keys.size == 0 else f"keys {_runs(keys)}"
            return {"other": f"query slot {i} sees {shown}"}
        firsts.append(int(keys[0]))
    starts = [0] + [i for i in range(1, n) if firsts[i] == i]
    if any(firsts[i] != max(s for s in starts if s <= i) for i in range(n)):
        i = next(i for i in range(n) if firsts[i] != max(s for s in starts if s <= i))
        return {"other": f"query slot {i} sees keys {firsts[i]}-{i}"}
    gaps = {b - a for a, b in zip(starts[1:], starts[2:], strict=False)}
    size = 0 if len(starts) == 1 else (gaps.pop() if len(gaps) == 1 else None) if len(starts) > 2 else None
    return {"size": size, "starts": starts}


def _runs(keys: np.ndarray) -> str:
    from ropeexport.hf import spans

    return spans([int(k) for k in keys])


# --- the logits' scale in a decomposed attention -------------------------------------------------------------------


def _scalar(value: ir.Value | None) -> float | None:
    """A one-element constant's value, else None."""
    array = constant_of(value)
    return None if array is None or array.size != 1 else float(array.reshape(()))


def _operand(value: ir.Value, depth: int = 0) -> float:
    """The product of the scalar factors between a q.k product's operand and the first node that does more than
    move values or multiply by one constant (module doc).
    """  # noqa: D205
    made = value.producer()
    if made is None or depth > 16:
        return 1.0
    if made.op_type in MOVES and made.inputs and made.inputs[0] is not None:
        return _operand(made.inputs[0], depth + 1)
    if made.op_type in ("Mul", "Div") and len(made.inputs) == 2 and all(v is not None for v in made.inputs):
        for k in (1, 0) if made.op_type == "Mul" else (1,):
            c = _scalar(made.inputs[k])
            if c is not None and constant_of(made.inputs[1 - k]) is None:
                factor = c if made.op_type == "Mul" else 1.0 / c
                return factor * _operand(made.inputs[1 - k], depth + 1)  # type: ignore[arg-type]
    return 1.0


def _query_factor(value: ir.Value | None, depth: int = 0) -> bool:
    """True when ``value`` is a position's query factor (``audits.query_scale.factor_table``: a table gathered at
    position_ids // divisor) through nodes that only move values: a query scale, which ``audits.query_scale`` reads
    and judges, not a part of the logits' scale.
    """  # noqa: D205
    made = value.producer() if value is not None else None
    if made is None or depth > 8:
        return False
    if made.op_type in MOVES and made.inputs:
        return _query_factor(made.inputs[0], depth + 1)
    return factor_table(made) is not None


def _reaches_product(value: ir.Value, depth: int = 0) -> bool:
    made = value.producer()
    if made is None or depth > 8:
        return False
    if made.op_type == "Einsum" or is_product(made):
        return True
    return made.op_type in (*SCORES, "Mul", "Div", "Add", "Where") and any(
        v is not None and constant_of(v) is None and _reaches_product(v, depth + 1) for v in made.inputs)  # fmt: skip


def _logits(value: ir.Value, depth: int = 0) -> float | str:
    """The scale between the Softmax's input ``value`` and the q.k product(s), or why it is unread."""
    made = value.producer()
    if made is None or depth > 12:
        return "no q.k product found before the Softmax"
    if is_product(made):  # a FusedMatMul's alpha is a factor of the logits as the Muls around it are
        return product_scale(made) * _operand(made.inputs[0]) * _operand(made.inputs[1])  # type: ignore[arg-type]
    if made.op_type in SCORES:
        return _logits(made.inputs[0], depth + 1)  # type: ignore[arg-type]
    if made.op_type in ("Mul", "Div") and len(made.inputs) == 2:
        for k in (1, 0) if made.op_type == "Mul" else (1,):
            c = _scalar(made.inputs[k])
            if c is not None and made.inputs[1 - k] is not None:
                inner = _logits(made.inputs[1 - k], depth + 1)  # type: ignore[arg-type]
                return inner if isinstance(inner, str) else inner * (c if made.op_type == "Mul" else 1.0 / c)
        if made.op_type == "Mul":  # a query scale applied to the logits (the latent cache's): read apart, passed
            for k in (1, 0):
                if _query_factor(made.inputs[k]) and made.inputs[1 - k] is not None:
                    return _logits(made.inputs[1 - k], depth + 1)  # type: ignore[arg-type]
        return f"a {made.op_type} by a factor that is not one constant"
    if made.op_type in ("Add", "Where"):
        data = [v for v in made.inputs[1 if made.op_type == "Where" else 0:]
                if v is not None and constant_of(v) is None and _reaches_product(v)]  # fmt: skip
        if not data:
            return f"no q.k product found through its {made.op_type}"
        read = [_logits(v, depth + 1) for v in data]
        factors = [r for r in read if not isinstance(r, str)]
        if len(factors) < len(read):
            return next(r for r in read if isinstance(r, str))
        if max(factors) - min(factors) > 1e-6 * abs(max(factors)):
            return f"the logits added in its {made.op_type} are scaled {', '.join(f'{r:.6g}' for r in factors)}"
        return factors[0]
    return f"a {made.op_type} between the q.k product and the Softmax"


def decomposed_scales(model: ir.Model) -> dict[int, float | str]:
    """Layer -> the scale its decomposed attention's logits take (module doc), or why unread; Softmax layers only."""
    out: dict[int, float | str] = {}
    for layer, node in attention_nodes(model).items():
        if node.op_type == "Softmax" and node.inputs and node.inputs[0] is not None:
            out[layer] = _logits(node.inputs[0])
    return out
