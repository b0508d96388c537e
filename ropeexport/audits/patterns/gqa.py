"""``GroupQueryAttention`` (com.microsoft) with ``do_rotary=1``: its cos_cache / sin_cache inputs (7, 8), tables
[max_positions, rotary_dim / 2] indexed by the positions it counts itself (onnxruntime-genai's builder; an ``If`` may
pick between two, as its LongRoPE models do), or by its position_ids input (9) where it has one (ropeexport's gqa
form once the cache holds tokens).

ONNX Runtime checks the caches only when the operator runs (``cos_cache dimension 1 must be <= head_size / 2 and a
multiple of 8`` in 1.31: a head_dim 32 model with partial rotary 0.75 has 12-wide caches, and cannot run at all), so
``check_reader`` runs one reader alone, on a call of 8 tokens with random activations and the site's own tables.
"""  # noqa: D205

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from ropeexport.audits.patterns.base import MICROSOFT, Match, Pattern, Site, SiteKind, Walk, attr, operator_sites

TOKENS = 8


def _match(node: ir.Node) -> Match | None:
    if node.op_type != "GroupQueryAttention" or (node.domain or "") != MICROSOFT or not attr(node, "do_rotary"):
        return None
    # position_ids (input 9, ONNX Runtime 1.2x on): the table rows it reads once the cache holds tokens, as
    # ropeexport's gqa form feeds them (its piece's rows: a LongRoPE row past the switch reads the long table)
    rows = node.inputs[9] if len(node.inputs) > 9 else None
    return 7, 8, rows, bool(attr(node, "rotary_interleaved")), True


def find(graph: ir.Graph, walk: Walk) -> list[Site]:
    """Its sites in ``graph`` (module doc)."""
    return operator_sites(graph, walk, SiteKind.GROUP_QUERY_ATTENTION, _match)


def _last(value: ir.Value | None) -> int | None:
    """The last axis of ``value`` where the graph declares it as a number."""
    dims = list(value.shape) if value is not None and value.shape is not None else []
    return dims[-1] if dims and isinstance(dims[-1], int) else None


def _head_size(node: ir.Node, heads: int, kv: int, packed: bool, spec: Any) -> int:
    """The head size the graph declares (the cache's last axis, or the query's width), else the config's."""
    past = _last(node.inputs[3] if len(node.inputs) > 3 else None)
    if past:
        return past
    width = _last(node.inputs[0])
    if width:
        return width // (heads + 2 * kv if packed else heads)
    return int(spec.head_dim)


def check_reader(node: ir.Node, cos: np.ndarray, sin: np.ndarray, spec: Any) -> str | None:
    """ONNX Runtime's reason for refusing ``node`` alone with these caches on a call of 8 tokens, or None.

    query [1, 8, (n_h + 2 n_kv) h_d] packed (no key input) or [1, 8, n_h h_d] with key and value [1, 8, n_kv h_d];
    past [1, n_kv, 0, h_d] where the node takes one; seqlens_k [1] = 7, total_sequence_length = 8; every attribute
    of the node kept.
    """
    import onnxruntime as ort
    from onnx import helper

    from ropeexport.audits.model import ort_reason, quiet

    heads, kv = attr(node, "num_heads"), attr(node, "kv_num_heads") or attr(node, "num_heads")
    packed = len(node.inputs) < 2 or node.inputs[1] is None
    d = _head_size(node, heads, kv, packed, spec)
    dtype = np.asarray(cos).dtype
    if dtype not in (np.float32, np.float16):
        return None  # ORT runs GroupQueryAttention on the CPU in float and float16 only: nothing to learn here
    elem = helper.np_dtype_to_tensor_dtype(dtype)
    rng = np.random.default_rng(0)
    feeds = {"query": rng.standard_normal((1, TOKENS, ((heads + 2 * kv) if packed else heads) * d)).astype(dtype)}
    if not packed:
        for name in ("key", "value"):
            feeds[name] = rng.standard_normal((1, TOKENS, kv * d)).astype(dtype)
    has_past = len(node.inputs) > 3 and node.inputs[3] is not None
    if has_past:
        feeds |= {n: np.zeros((1, kv, 0, d), dtype) for n in ("past_key", "past_value")}
    feeds |= {"seqlens_k": np.array([TOKENS - 1], np.int32), "total_sequence_length": np.array(TOKENS, np.int32),
              "cos_cache": np.asarray(cos), "sin_cache": np.asarray(sin)}  # fmt: skip
    names = ["query", "key" if not packed else "", "value" if not packed else "",
             "past_key" if has_past else "", "past_value" if has_past else "", "seqlens_k", "total_sequence_length",
             "cos_cache", "sin_cache"]  # fmt: skip
    attributes = {name: a.value for name, a in node.attributes.items()
                  if a.type not in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)}  # fmt: skip
    alone = helper.make_node("GroupQueryAttention", names, ["out", "present_key", "present_value"],
                             domain=MICROSOFT, **attributes)  # fmt: skip
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
              for n, a in feeds.items()]  # fmt: skip
    outputs = [helper.make_tensor_value_info(n, elem, None) for n in ("out", "present_key", "present_value")]
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(MICROSOFT, 1)]
    model = helper.make_model(helper.make_graph([alone], "reader", inputs, outputs), opset_imports=opsets)
    model.ir_version = 10
    options, run = quiet()
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        session.run(None, feeds, run)
    except Exception as exc:  # noqa: BLE001 - ORT's reason is the finding
        return ort_reason(exc)
    return None


PATTERN = Pattern("gqa", "rope", (SiteKind.GROUP_QUERY_ATTENTION,), find, check_reader)
