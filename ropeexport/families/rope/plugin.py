"""RoPE as an ONNX graph whose rotations are ``ropeexport::RotaryEmbedding`` plugin nodes, for TensorRT.

TensorRT parses the opset-23 ``RotaryEmbedding`` into its native layer only from 10.15 on; older versions (from 10.6,
which has quickly deployable plugins) run this graph through the plugin registered by ``ropeexport/trt/plugin.py``,
which launches the Triton kernel of ``ropeexport/trt/triton_rope.py``.

Artifact contract: the same as ``families.rope.export`` (the ``rope`` artifact): inputs ``query`` [batch, num_heads,
seq, head_dim], ``key`` [batch, num_kv_heads, seq, head_dim] (table dtype), ``position_ids`` int64 [batch, seq];
outputs ``query_out`` and ``key_out`` with the input shapes; the same metadata, plus ``ropeexport.graph = plugin``.

Each rotation is one node ``RotaryEmbedding`` in domain ``ropeexport`` (opset import ``ropeexport`` 1) with inputs
(x, cos_cache, sin_cache, rows) and int attributes ``interleaved`` and ``rotary_dim``, plus the string attribute
``plugin_namespace = "ropeexport"`` by which TensorRT's ONNX parser finds the plugin (it matches the node's op_type
and that attribute, never the domain). The tables are the half-width initializers ``cos_table`` / ``sin_table``
[regimes * max_positions, rotary_dim / 2] of the fused graph, computed in float64 and rounded once; the rows come
from the same helpers as the fused graph, so every schedule picks the same rows:
- static schedules: rows = positions;
- ``switch`` (longrope): a row's rows shifted into the long table when its own L_b = max(position_ids[b]) + 1 >
  original_max_position_embeddings;
- ``continuous`` (dynamic NTK): cos/sin [b, s, r/2] are computed per call (each row: default table or float64 in
  the graph at its own L_b, rounded once); they are flattened to a [b * s, r/2] table and token t of the flattened
  batch reads row t.
A position outside [0, max_positions) maps to a row past the table; the plugin writes NaN there (runners reject such
positions before running, from the metadata).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from ropeexport.families.rope.export import cos_sin_rows, rope_graph, rope_tables, row_lengths
from ropeexport.families.rope.schedules import get_schedule
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.graph.onnx_io import GraphBuilder, artifact_metadata, make_model
from ropeexport.trt.plugin_op import DOMAIN, DOMAIN_VERSION, OP_TYPE

OPSET = 17  # the decomposed graph's opset: the row arithmetic needs nothing newer


def _flat_table(g: GraphBuilder, cos: str, sin: str, pos: str, rotary_dim: int) -> tuple[str, str, str]:
    """Per-token cos/sin [b, s, r/2] as tables [b * s, r/2] and rows [b, s] = 0 .. b * s - 1 reading them."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    width = g.const(f"{pos}_table_width", i64(-1, rotary_dim // 2))
    cos_flat = g.op("Reshape", [cos, width], name=f"{pos}_cos_flat")  # [b * s, r/2]
    sin_flat = g.op("Reshape", [sin, width], name=f"{pos}_sin_flat")
    count = g.op("Size", [pos])  # b * s, int64 scalar
    start, step = g.const(f"{pos}_first_row", np.array(0, np.int64)), g.const(f"{pos}_row_step", np.array(1, np.int64))
    tokens = g.op("Range", [start, count, step])
    rows = g.op("Reshape", [tokens, g.op("Shape", [pos])], name=f"{pos}_token_rows")  # [b, s]
    return cos_flat, sin_flat, rows


def build_rope_plugin_graph(spec: RopeSpec) -> onnx.ModelProto:
    """The ``rope`` artifact with plugin nodes (contract and row choice in the module docstring)."""
    if spec.artifact != "rope":
        raise ValueError(f"the plugin graph builds the 'rope' artifact only, not {spec.artifact!r}")
    g = GraphBuilder()
    tables = rope_tables(g, spec)
    regime = get_schedule(spec.scaling).regime
    length = row_lengths(g, ["position_ids"], OPSET) if regime != "static" else None
    # The fused graph's helpers return (tables, rows) for table schedules, per-token cos/sin otherwise.
    cos, sin, rows = cos_sin_rows(g, spec.replace(graph="fused"), tables, "position_ids", length)
    if rows is None:
        cos, sin, rows = _flat_table(g, cos, sin, "position_ids", spec.rotary_dim)
    interleaved = int(spec.layout != "half")  # complex is the interleaved rotation (Meta Llama)
    for x in ("query", "key"):
        g.nodes.append(
            helper.make_node(
                OP_TYPE,
                [x, cos, sin, rows],
                [f"{x}_out"],
                name=f"{x}_rotary_embedding",
                domain=DOMAIN,
                interleaved=interleaved,
                rotary_dim=spec.rotary_dim,
                plugin_namespace=DOMAIN,
            )
        )
    graph = rope_graph(spec, g)  # the same contract as the fused and decomposed rope artifacts
    metadata = artifact_metadata(spec, ["position_ids"]) | {
        "ropeexport.graph": "plugin",
        "ropeexport.plugin": f"{DOMAIN}::{OP_TYPE}",
    }
    return make_model(graph, OPSET, metadata, domains={DOMAIN: DOMAIN_VERSION})
