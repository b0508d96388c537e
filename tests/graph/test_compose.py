"""Every artifact kind as a piece of a bigger graph (``graph.compose.call``): called twice under two prefixes it
gives the artifact's own outputs bit for bit, stores its tables once, and keeps refusing out-of-range positions."""  # noqa: D205

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import ropeexport as rx
from ropeexport.catalog import recipe_for, recipes
from ropeexport.errors import SpecError
from ropeexport.graph.compose import call, model_around, opset_imports
from ropeexport.graph.onnx_io import GraphBuilder

pytestmark = pytest.mark.fast  # graph builds: every kind as a piece of a bigger graph, small tables

SMALL = {"max_positions": 64, "num_heads": 4, "head_dim": 16}
CASES = [(e, a, g) for (e, a) in sorted(recipes()) for g in ("fused", "decomposed")]


def _spec(encoding: str, artifact: str, graph: str) -> object:
    fields = {k: v for k, v in SMALL.items() if k in {f.name for f in dataclasses.fields(rx.spec(encoding).__class__)}}
    if encoding == "sinusoidal":
        fields["d_model"] = 32
    return rx.spec(encoding, artifact=artifact, graph=graph, **fields)


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _feeds(spec: object) -> tuple[dict[str, np.ndarray], list[str]]:
    """The kind's own first probe call (every kind knows its contract), and its position inputs."""
    kind = recipe_for(spec)
    probe = kind.probes(spec)[0][0]
    return kind.feeds(spec, probe, np.random.default_rng(0)), list(probe.positions)


@pytest.mark.parametrize(("encoding", "artifact", "graph"), CASES, ids=["-".join(c) for c in CASES])
def test_a_piece_called_twice_equals_the_artifact(encoding: str, artifact: str, graph: str) -> None:
    spec = _spec(encoding, artifact, graph)
    piece = rx.export(spec)
    g = GraphBuilder()
    wired = {i.name: f"outer/{i.name}" for i in piece.graph.input}
    first, second = call(g, piece, wired, "a/"), call(g, piece, wired, "b/")
    inputs = [helper.make_value_info(f"outer/{i.name}", i.type) for i in piece.graph.input]
    outputs = []
    for tag, produced in (("a", first), ("b", second)):
        for o in piece.graph.output:
            g.op("Identity", [produced[o.name]], name=f"{tag}.{o.name}")
            outputs.append(helper.make_value_info(f"{tag}.{o.name}", o.type))
    composed = model_around(g, inputs, outputs, opset_imports(piece))
    onnx.checker.check_model(composed, full_check=True)
    # Tables are stored once however often the piece is called.
    stored = sum(t.ByteSize() for t in composed.graph.initializer)
    assert stored <= sum(t.ByteSize() for t in piece.graph.initializer)
    feeds, positions = _feeds(spec)
    want = dict(zip([o.name for o in piece.graph.output], _session(piece).run(None, feeds), strict=True))
    got = _session(composed).run(None, {f"outer/{k}": v for k, v in feeds.items()})
    for (tag, name), value in zip([(t, o.name) for t in "ab" for o in piece.graph.output], got, strict=True):
        np.testing.assert_array_equal(value, want[name], err_msg=f"{tag}/{name}")
    position = positions[0]
    bad = {f"outer/{k}": v for k, v in feeds.items()} | {f"outer/{position}": feeds[position] + spec.max_positions}
    with pytest.raises(Exception, match="must lie in"):  # the piece's range guard, inside the bigger graph
        _session(composed).run(None, bad)


def test_call_names_a_missing_or_unknown_input() -> None:
    piece = rx.export(rx.spec("alibi", **SMALL))
    with pytest.raises(SpecError, match="'key_position_ids' is not given"):
        call(GraphBuilder(), piece, {"query_position_ids": "q"}, "p/")
    wired = {i.name: i.name for i in piece.graph.input} | {"positions": "x"}
    with pytest.raises(SpecError, match="'positions' is not an input of the piece"):
        call(GraphBuilder(), piece, wired, "p/")


def test_a_prefix_is_used_once() -> None:
    piece = rx.export(rx.spec("alibi", **SMALL))
    wired = {i.name: i.name for i in piece.graph.input}
    g = GraphBuilder()
    call(g, piece, wired, "layer0/")
    with pytest.raises(SpecError, match="'layer0/' was used already"):
        call(g, piece, wired, "layer0/")
