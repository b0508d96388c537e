"""``RotaryEmbedding`` (com.microsoft): inputs 2 and 3, tables [max_positions, rotary_dim / 2] indexed by its
position_ids (input 1), as Optimum, the ORT transformers optimizer and onnxruntime-genai's builder for fp16 on CPU
write it.
"""  # noqa: D205

from __future__ import annotations

import onnx_ir as ir

from ropeexport.audits.patterns.base import MICROSOFT, Match, Pattern, Site, SiteKind, Walk, attr, operator_sites


def _match(node: ir.Node) -> Match | None:
    if node.op_type != "RotaryEmbedding" or (node.domain or "") != MICROSOFT:
        return None
    return 2, 3, node.inputs[1] if len(node.inputs) > 1 else None, bool(attr(node, "interleaved")), True


def find(graph: ir.Graph, walk: Walk) -> list[Site]:
    """Its sites in ``graph`` (module doc)."""
    return operator_sites(graph, walk, SiteKind.ROTARY_MICROSOFT, _match)


PATTERN = Pattern("rotary_microsoft", "rope", (SiteKind.ROTARY_MICROSOFT,), find)
