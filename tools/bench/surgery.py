"""Graph surgery for the experiments: variants of a shipped artifact that isolate one cost each.

Never shipped: each variant is timed beside the shipped artifact and its output checked against it
(``max_abs_vs_fused``).
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper


def prune(model: onnx.ModelProto) -> onnx.ModelProto:
    """Drop nodes and initializers nothing downstream of the graph outputs uses."""
    graph = model.graph
    needed = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(node.input)
    del graph.node[:]
    graph.node.extend(reversed(keep))
    inits = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    return model


def without_guards(model: onnx.ModelProto) -> onnx.ModelProto:
    """The fused RoPE graph with its range guard removed: RotaryEmbedding reads ``position_ids`` directly."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for node in model.graph.node:
        if node.op_type == "RotaryEmbedding" and len(node.input) == 4:
            node.input[3] = "position_ids"
    return prune(model)


def without_boundary_guards(model: onnx.ModelProto) -> onnx.ModelProto:
    """The artifact without its boundary range guards (``graph.guard``): every node reads the raw position inputs."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if name.endswith("__checked"):
                node.input[i] = name.removesuffix("__checked")
    return prune(model)


def bypass(model: onnx.ModelProto, op_type: str) -> onnx.ModelProto:
    """Remove every ``op_type`` node, wiring its consumers to its first input (for ops that only copy or expand)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for node in [n for n in model.graph.node if n.op_type == op_type]:
        for other in model.graph.node:
            for i, name in enumerate(other.input):
                if name == node.output[0]:
                    other.input[i] = node.input[0]
        model.graph.node.remove(node)
    return prune(model)


def fp16_via_fp32(model32: onnx.ModelProto) -> onnx.ModelProto:
    """An fp32 model behind Casts: fp16 float inputs cast up, fp32 outputs cast back to fp16 (tables stay fp32)."""
    model = onnx.ModelProto.FromString(model32.SerializeToString())
    graph = model.graph
    casts_in, casts_out = [], []
    for value in graph.input:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            inner = f"{value.name}_fp32"
            for node in graph.node:
                for i, name in enumerate(node.input):
                    if name == value.name:
                        node.input[i] = inner
            casts_in.append(helper.make_node("Cast", [value.name], [inner], to=TensorProto.FLOAT))
            value.type.tensor_type.elem_type = TensorProto.FLOAT16
    for value in graph.output:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            inner = f"{value.name}_fp32"
            for node in graph.node:
                for i, name in enumerate(node.output):
                    if name == value.name:
                        node.output[i] = inner
            casts_out.append(helper.make_node("Cast", [inner], [value.name], to=TensorProto.FLOAT16))
            value.type.tensor_type.elem_type = TensorProto.FLOAT16
    nodes = casts_in + list(graph.node) + casts_out
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def guard_nodes(model: onnx.ModelProto) -> list[str]:
    """Op types of the fused graph's nodes other than RotaryEmbedding (the range guard)."""
    return [n.op_type for n in model.graph.node if n.op_type != "RotaryEmbedding"]
