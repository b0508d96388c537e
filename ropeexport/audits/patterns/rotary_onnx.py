"""``RotaryEmbedding`` (opset 23): inputs 1 and 2; tables when position_ids (input 3) is given, else the cos/sin of
each token [b, s, rotary_dim / 2] (torch.onnx.export of transformers models, ropeexport's own fused form).
"""  # noqa: D205

from __future__ import annotations

import onnx_ir as ir

from ropeexport.audits.patterns.base import Match, Pattern, Site, SiteKind, Walk, attr, operator_sites


def _match(node: ir.Node) -> Match | None:
    if node.op_type != "RotaryEmbedding" or (node.domain or "") not in ("", "ai.onnx"):
        return None
    rows = node.inputs[3] if len(node.inputs) > 3 else None
    return 1, 2, rows, bool(attr(node, "interleaved")), rows is not None


def find(graph: ir.Graph, walk: Walk) -> list[Site]:
    """Its sites in ``graph`` (module doc)."""
    return operator_sites(graph, walk, SiteKind.ROTARY_ONNX, _match)


PATTERN = Pattern("rotary_onnx", "rope", (SiteKind.ROTARY_ONNX,), find)
