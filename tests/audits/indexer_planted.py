"""Faults planted in the indexer (DeepSeek Sparse Attention) of ropeexport's own tiny DeepSeek V3.2, GLM-5 and Mistral
Large 4 decoders (``tests/audits/test_audit_indexer.py``): each a spec edit before the build or an edit of the built
model.onnx, named after what an exporter gets wrong.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper


def layout(pairs: str) -> Callable[[Any], Any]:
    """A spec edit: every indexer rotated in ``pairs`` (``half`` or ``interleaved``), the attention unchanged."""

    def edit(spec: Any) -> Any:
        layers = []
        for layer in spec.layers:
            a = layer.attention
            if a.index_topk and not a.index_shared:
                a = dataclasses.replace(a, index_layout=pairs)
            layers.append(dataclasses.replace(layer, attention=a))
        return spec.replace(layers=tuple(layers))

    return edit


def _rotary(proto: onnx.ModelProto, role: str) -> list[onnx.NodeProto]:
    return [n for n in proto.graph.node if n.op_type == "RotaryEmbedding" and f"indexer/rope/{role}_out" in n.name]


def rope_on_nope_part(model: Path) -> None:
    """Each indexer query's rotation given its nope part (the Split's outputs taken in the wrong order: channels
    rope_dim .. index_head_dim - 1 rotated), its rope part passed on unrotated in its place (fused form).
    """  # noqa: D205
    proto = onnx.load(str(model))
    for node in _rotary(proto, "query"):
        rope = node.input[0]
        nope = rope[:-1] + "1"  # the Split's second output: the dims the indexer never rotates
        node.input[0] = nope
        concat = next(n for n in proto.graph.node if n.op_type == "Concat" and list(n.input) == [node.output[0], nope])
        concat.input[:] = [rope, node.output[0]]
    onnx.save(proto, str(model))


def indexer_theta(theta: float) -> Callable[[Path], None]:
    """A plant: the indexer's rotations read tables of their own at ``theta`` (the attention's left right; fused form,
    the tables [positions, rope_dim / 2]).
    """  # noqa: D205

    def plant(model: Path) -> None:
        proto = onnx.load(str(model))
        made: dict[str, str] = {}
        for node in [*_rotary(proto, "query"), *_rotary(proto, "key")]:
            for k in (1, 2):
                name = node.input[k]
                if name not in made:
                    table = next(t for t in proto.graph.initializer if t.name == name)
                    rows, half = table.dims
                    angles = np.arange(rows)[:, None] * theta ** (-np.arange(half) / half)
                    values = (np.cos if k == 1 else np.sin)(angles).astype(np.float32)
                    made[name] = f"{name}_indexer_planted"
                    proto.graph.initializer.append(numpy_helper.from_array(values, made[name]))
                node.input[k] = made[name]
        onnx.save(proto, str(model))

    return plant


@contextmanager
def rotated_nope_layer(layer: int, like: int) -> Iterator[None]:
    """While building: layer ``layer``'s indexer (a NoPE layer's, which rotates nothing) given layer ``like``'s
    rotation, as an exporter rotating every layer's indexer writes it.
    """  # noqa: D205
    from ropeexport.decoder import export

    original = export.index_pieces

    def pieces(spec: Any) -> list[Any]:
        found = original(spec)
        found[layer] = found[like]
        return found

    export.index_pieces = pieces
    try:
        yield
    finally:
        export.index_pieces = original


def query_scaled_before_rotation(model: Path) -> None:
    """Each indexer query times 2 before its rotation (fused form): its scores double, each query's selection the
    same (relu(2 s) = 2 relu(s), a positive factor keeps the order), but the rotated values are no channels of the
    projection's output any more: which channels are rotated cannot be read.
    """  # noqa: D205
    proto = onnx.load(str(model))
    two = numpy_helper.from_array(np.array(2.0, np.float32), "indexer_planted_two")
    proto.graph.initializer.append(two)
    at = 0
    for node in _rotary(proto, "query"):
        scaled = f"{node.input[0]}_planted_twice"
        at = next(i for i, n in enumerate(proto.graph.node) if n is node)
        proto.graph.node.insert(at, onnx.helper.make_node("Mul", [node.input[0], two.name], [scaled],
                                                          name=f"{node.name}_planted_twice"))  # fmt: skip
        node.input[0] = scaled
    onnx.save(proto, str(model))
