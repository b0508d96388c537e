"""``MRotaryEmbedding`` (com.microsoft): multimodal RoPE with tables of its own, as onnxruntime-genai 0.18's builder
writes Qwen2.5-VL and Qwen3-VL. Inputs: x [b, s, n_h * h_d] (input 0), position_ids [3, b, s] (input 1: time,
height, width), cos_cache and sin_cache [max_positions, rotary_dim / 2] (inputs 2 and 3): one-axis tables, each
frequency pair's row picked by the axis the operator's ``mrope_section`` and ``mrope_layout`` attributes give it
(0: contiguous sections, Qwen2-VL's; 1: interleaved by frequency index, Qwen3-VL's). The tables are a site like any
fused operator's (read as rows 0 .. L - 1); which axis each pair turns by is read by running the operator itself
(``audits.axes.operator_axes``), not from its attributes' names.
"""  # noqa: D205

from __future__ import annotations

import onnx_ir as ir

from ropeexport.audits.patterns.base import MICROSOFT, Match, Pattern, Site, SiteKind, Walk, attr, operator_sites


def _match(node: ir.Node) -> Match | None:
    if node.op_type != "MRotaryEmbedding" or (node.domain or "") != MICROSOFT:
        return None
    return 2, 3, node.inputs[1] if len(node.inputs) > 1 else None, bool(attr(node, "interleaved")), True


def find(graph: ir.Graph, walk: Walk) -> list[Site]:
    """Its sites in ``graph`` (module doc)."""
    return operator_sites(graph, walk, SiteKind.MROTARY_MICROSOFT, _match)


PATTERN = Pattern("mrotary_microsoft", "rope", (SiteKind.MROTARY_MICROSOFT,), find)
