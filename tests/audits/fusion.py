"""ONNX Runtime PR #29261's RotaryEmbedding -> GroupQueryAttention fusion, as its first revision rewrote a graph.

``GroupQueryAttentionFusion`` (onnxruntime/core/optimizer/group_query_attention_fusion.cc) folds the two
RotaryEmbedding nodes feeding a GroupQueryAttention's query and key into its built-in rotary: do_rotary=1, the
rotations' inputs as its query and key, their cos/sin caches as its inputs 7 and 8 (PR #29261 adds the opset-23
RotaryEmbedding, whose caches are its inputs 1 and 2, and forwards position_ids as input 9). Its review (2026-06-26)
found that the matcher reads neither ``interleaved`` nor ``rotary_embedding_dim``: the fused node rotates halves
(``rotary_interleaved`` left at 0) over twice its cache's width. The pass is registered for the CUDA provider only,
and ONNX Runtime 1.31.1 and 1.32.0 fuse nothing on the CPU provider (``tests/audits/test_optimized.py`` checks it), so
the audit's tests plant the rewrite themselves: ``plant`` makes it in every graph, the nodes' attributes as the first
revision left them, or with ``interleaved`` carried over (what the review asked for).
"""  # noqa: D205

from __future__ import annotations

import onnx
from onnx import helper

MICROSOFT = "com.microsoft"


def _caches(rotary: onnx.NodeProto) -> tuple[str, str, str]:
    """(cos, sin, position_ids) a RotaryEmbedding reads: opset 23 (X, cos, sin, position_ids), com.microsoft (input,
    position_ids, cos, sin).
    """  # noqa: D205
    inputs = list(rotary.input) + [""] * 4
    if rotary.domain == MICROSOFT:
        return inputs[2], inputs[3], inputs[1]
    return inputs[1], inputs[2], inputs[3]


def _interleaved(rotary: onnx.NodeProto) -> int:
    return next((a.i for a in rotary.attribute if a.name == "interleaved"), 0)


def _fuse(graph: onnx.GraphProto, carry_interleaved: bool) -> int:
    """The rewrite in one graph (and every subgraph below it); the number of GroupQueryAttention nodes fused."""
    fused = 0
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                fused += _fuse(attribute.g, carry_interleaved)
    made = {o: n for n in graph.node for o in n.output}
    removed: list[onnx.NodeProto] = []
    for node in graph.node:
        rotary = {a.name: a.i for a in node.attribute}.get("do_rotary", 0)
        if node.op_type != "GroupQueryAttention" or node.domain != MICROSOFT or rotary or len(node.input) < 2:
            continue
        query, key = made.get(node.input[0]), made.get(node.input[1])
        if query is None or key is None or query.op_type != "RotaryEmbedding" or key.op_type != "RotaryEmbedding":
            continue
        cos, sin, positions = _caches(query)
        inputs = list(node.input) + [""] * max(0, 10 - len(node.input))
        inputs[0], inputs[1] = query.input[0], key.input[0]
        inputs[7], inputs[8], inputs[9] = cos, sin, positions
        del node.input[:]
        node.input.extend(inputs)
        node.attribute.append(helper.make_attribute("do_rotary", 1))
        if carry_interleaved:
            node.attribute.append(helper.make_attribute("rotary_interleaved", _interleaved(query)))
        removed += [query, key]
        fused += 1
    for rotary in removed:
        graph.node.remove(rotary)
    return fused


def plant(model: onnx.ModelProto, carry_interleaved: bool = False) -> int:
    """``model`` rewritten in place as the fusion rewrites it (module doc); the number of nodes fused."""
    return _fuse(model.graph, carry_interleaved)
