"""Sliding windows per layer, read from the graph where it says them, against the config's layer types.

A window is an attention mask, not a rotary site: nothing of it is probed, only read. Two places say it:
- a GroupQueryAttention's ``local_window_size`` attribute (onnxruntime-genai's builder; -1: every key), per node,
  the node naming its layer;
- ropeexport's masks: the window constant ``i - j < window`` reads (an int64 scalar named ``.../window``), followed
  down the mask to the attention nodes that take it (a Softmax, or a fused attention: their names give the layers;
  the walk stops at a product, past which the mask is the attention's output);
  a layer whose attention takes no windowed mask attends to every key;
- ONNX's own Attention (opset 23: mobius-onnx writes it), where neither form above says a window: each layer's
  ``attn_mask`` (its input 3; none: causal only, every key) evaluated in ONNX Runtime on one call of window + 1
  tokens from position 0 with an empty cache (``mask_windows``): the keys its last query may see, all window + 1 of
  them read as every key (a window wider than that call is not told apart from none).
Checked only where the config says windows per layer type (``layer_types`` with ``sliding_attention``, Gemma 2 / 3,
gpt-oss, SmolLM3): a sliding layer must see ``sliding_window`` key slots, a full one every key. Not read: a dynamo
or TorchScript export's masks (transformers builds them from functions; the window is one constant among the
mask's arithmetic and names no layer), a model without either form (nothing said, no finding).
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from ropeexport.audits.layers import layer_finding, layer_of
from ropeexport.errors import SpecError

ATTENTION = ("Softmax", "GroupQueryAttention", "Attention", "MultiHeadAttention")  # where a mask is used
# A mask reaches its attention through elementwise ops; past a product it is the attention's output (a Where after
# the Softmax zeroing fully masked rows leads there), which every later layer reads: the walk stops
PRODUCTS = ("MatMul", "Gemm", "Einsum", "MatMulNBits")  # MatMulNBits: an int4 projection


def expected(config_path: Path) -> dict[int, int] | None:
    """Layer -> the key slots it sees (0: every key), from the config's layer types; None where it says none."""
    from ropeexport.hf import import_layers

    try:
        layers = import_layers(json.loads(config_path.read_text()), str(config_path))
    except (SpecError, ValueError, OSError):
        return None  # the audit's own import says what is wrong with the config
    if "sliding_attention" not in layers.types or not layers.window:
        return None
    return {i: layers.window if kind == "sliding_attention" else 0 for i, kind in enumerate(layers.types)}


def _int_attr(node: ir.Node, name: str) -> int | None:
    attr = node.attributes.get(name)
    return None if attr is None else int(attr.value)


def observed(model: ir.Model, constant: str = "window") -> dict[int, int]:
    """Layer -> the key slots its attention sees (0: every key), where the graph says it (module doc); {} if not.
    ``constant`` "chunk": the chunk each layer's mask cuts the keys into (Llama 4's, ``audits.features``) instead.
    """  # noqa: D205
    nodes = list(ir.traversal.RecursiveGraphIterator(model.graph))
    seen: dict[int, int] = {}
    gqa = [n for n in nodes if n.op_type == "GroupQueryAttention"]
    said = constant == "window" and any((_int_attr(n, "local_window_size") or -1) >= 0 for n in gqa)
    if said:  # the attribute says the windows
        for node in gqa:
            layer, size = layer_of(node.name or "", node.metadata_props), _int_attr(node, "local_window_size")
            if layer is not None:
                seen[layer] = 0 if size is None or size < 0 else size
        return seen
    consumers: dict[int, list[ir.Node]] = {}
    for node in nodes:
        for value in node.inputs:
            if value is not None:
                consumers.setdefault(id(value), []).append(node)
    attended = {i for n in nodes if n.op_type in ATTENTION for i in [layer_of(n.name or "", n.metadata_props)]
                if i is not None}  # fmt: skip
    for value in _window_constants(model, nodes, constant):
        window = int(np.asarray(value.const_value.numpy()).reshape(()))  # type: ignore[union-attr]
        for layer in _readers(value, consumers):
            seen[layer] = window
    if not seen:
        return {}
    return {i: seen.get(i, 0) for i in attended}


def _window_constants(model: ir.Model, nodes: list[ir.Node], constant: str = "window") -> list[ir.Value]:
    """The int64 scalars named ``.../window`` (or ``constant``) (initializers and Constants' outputs) of the main
    graph.
    """  # noqa: D205
    found = [v for v in model.graph.initializers.values() if v.name and v.name.rsplit("/", 1)[-1] == constant]
    found += [n.outputs[0] for n in nodes
              if n.op_type == "Constant" and (n.outputs[0].name or "").endswith(f"/{constant}")]  # fmt: skip
    return [v for v in found if v.const_value is not None and v.const_value.size == 1
            and v.const_value.dtype == ir.DataType.INT64]  # fmt: skip


def _readers(value: ir.Value, consumers: dict[int, list[ir.Node]]) -> set[int]:
    """The layers of the attention nodes the value's mask reaches (the walk stops at each)."""
    layers: set[int] = set()
    queue, done = deque([value]), {id(value)}
    while queue:
        for node in consumers.get(id(queue.popleft()), []):
            if node.op_type in ATTENTION:
                layer = layer_of(node.name or "", node.metadata_props)
                if layer is not None:
                    layers.add(layer)
                continue
            if node.op_type in PRODUCTS:
                continue
            for out in node.outputs:
                if id(out) not in done:
                    done.add(id(out))
                    queue.append(out)
    return layers


def _attention_masks(model: ir.Model) -> dict[int, ir.Value | None]:
    """Layer -> the ``attn_mask`` its ONNX Attention (opset 23) of the main graph takes (None: no mask)."""
    out: dict[int, ir.Value | None] = {}
    for node in model.graph:
        if node.op_type == "Attention" and node.domain in ("", "ai.onnx"):
            layer = layer_of(node.name or "", node.metadata_props)
            if layer is not None:
                out[layer] = node.inputs[3] if len(node.inputs) > 3 else None
    return out


def mask_windows(path: Path, model: ir.Model, window: int) -> dict[int, int]:
    """Layer -> the key slots its ONNX Attention's mask lets the last query of a call of ``window`` + 1 tokens see
    (module doc; 0: all of them, every key); {} where no layer has that Attention, or ONNX Runtime refuses the graph
    that computes the masks (nothing read, nothing said).
    """  # noqa: D205
    from ropeexport.audits.observe import NotEvaluated, evaluate_values

    masks = _attention_masks(model)
    names = sorted({v.name for v in masks.values() if v is not None and v.name})
    try:
        computed = dict(zip(names, evaluate_values(path, names, window + 1), strict=True)) if names else {}
    except (NotEvaluated, SpecError):
        return {}
    seen: dict[int, int] = {}
    for layer, mask in masks.items():
        if mask is None:  # causal only
            seen[layer] = 0
            continue
        values = np.asarray(computed.get(mask.name or ""))
        if values.ndim == 0 or values.shape[-1] != window + 1:
            return {}  # not one column a key of the call: not read
        last = (values[..., -1, :] if values.ndim >= 2 else values).reshape(-1, window + 1)[0]
        # a boolean mask says who takes part; an additive one masks with a large negative number (-inf, the dtype's
        # lowest, -1e4)
        allowed = int(np.count_nonzero(last if last.dtype == np.bool_ else last > -1e4))
        seen[layer] = 0 if allowed > window else allowed
    return seen


def _slots(window: int) -> str:
    return f"a window of {window} key slots" if window else "every key"


def window_findings(model: ir.Model, config_path: Path | None, path: Path | None = None) -> list[dict[str, Any]]:
    """``window`` findings: the layers whose attention sees another window than the config gives them, grouped by
    (what the graph says, what the config says); each with ``sites`` [] (no rotary site). ``path``: the model's file,
    where its masks are evaluated (``mask_windows``).
    """  # noqa: D205
    want = None if config_path is None else expected(config_path)
    if want is None:
        return []
    have = observed(model)
    if not have and path is not None:  # no window said by name: the masks ONNX's own Attention takes, evaluated
        have = mask_windows(path, model, max(want.values()))
    groups: dict[tuple[int, int], list[int]] = {}
    for layer, window in sorted(have.items()):
        if layer in want and want[layer] != window:
            groups.setdefault((window, want[layer]), []).append(layer)
    out = []
    for (window, wanted), layers in groups.items():
        kind = "sliding_attention" if wanted else "full_attention"
        template = (f"{{who}} attend{{s}} to {_slots(window)} where the config gives {{them}} {_slots(wanted)} "
                    f"({kind} in layer_types)")  # fmt: skip
        out.append(layer_finding("window", template, "", layers) | {"sites": []})
    return out
