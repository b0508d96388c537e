"""In-graph range guards: every artifact kind, in plain ONNX Runtime (no runner pre-check), refuses a position
outside [0, max_positions) with a message naming the input and the valid range, and accepts both ends of it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from ropeexport.catalog import recipe_for, recipes
from ropeexport.graph.guard import guard_node_name
from ropeexport.recipes import Probe
from tests.test_every_kind import small

pytestmark = pytest.mark.fast  # graph builds: every kind's range guard, small tables

ort = pytest.importorskip("onnxruntime")

CASES = [
    pytest.param(encoding, artifact, graph, id=f"{encoding}-{artifact}-{graph}")
    for (encoding, artifact) in sorted(recipes())
    for graph in ("fused", "decomposed")
]
P = 96  # tests.test_every_kind.SMALL's max_positions


def _session(spec: object) -> tuple[object, dict[str, int]]:
    """The session and its position inputs, each with its axes (0: [b, s]; 2 or 3: [axes, b, s])."""
    model = recipe_for(spec).export(spec)
    positions = {i.name: (i.type.tensor_type.shape.dim[0].dim_value if len(i.type.tensor_type.shape.dim) == 3 else 0)
                 for i in model.graph.input if i.name.endswith("position_ids")}  # fmt: skip
    options = ort.SessionOptions()
    options.log_severity_level = 4  # the refusals below are expected: keep ORT's own error log quiet
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]), positions


def _feeds(spec: object, positions: dict[str, int], values: dict[str, list[int]]) -> dict[str, np.ndarray]:
    """Feeds with ``values`` on every axis of a multi-axis input (a bad value on each axis is refused alike)."""
    kind = recipe_for(spec)
    rows = {n: np.array([values.get(n, [0, 1, 2])], np.int64) for n in positions}
    probe = Probe("guard", {n: np.stack([r] * positions[n]) if positions[n] else r for n, r in rows.items()})
    return kind.feeds(spec, probe, np.random.default_rng(0))


@pytest.mark.parametrize(("encoding", "artifact", "graph"), CASES)
def test_plain_onnxruntime_refuses_positions_outside_the_range(encoding: str, artifact: str, graph: str) -> None:
    spec = small(encoding, artifact=artifact, graph=graph)
    assert spec.max_positions == P
    session, positions = _session(spec)
    assert positions, "every artifact takes positions"
    for name in positions:
        ends = _feeds(spec, positions, {name: [0, P - 1, 1]})
        session.run(None, ends)  # both ends of the range are accepted
        for bad in (-1, -7, P, 5000):
            feeds = _feeds(spec, positions, {name: [0, bad, 1]})
            with pytest.raises(Exception) as refused:
                session.run(None, feeds)
            message = str(refused.value)
            # The message names the input and the valid range, and never the bad value as if it were an index.
            assert guard_node_name(name, P) in message
            assert f"idx={bad}" not in message


def test_the_guard_runs_before_anything_reads_the_positions() -> None:
    spec = small("alibi", artifact="bias")
    model = recipe_for(spec).export(spec)
    readers = [n for n in model.graph.node if "query_position_ids" in n.input]
    # Only the guard's own nodes read the raw input; the rest read the checked copy.
    assert readers and all(n.name.startswith("query_position_ids__guard") for n in readers)
    onnx.checker.check_model(model, full_check=True)


def _limit_tests(model: onnx.ModelProto) -> int:
    """How many nodes compare a position with max_positions (a guard's ``inside``, a piece's clamp)."""
    limits = {t.name for t in model.graph.initializer if not t.dims and t.data_type == onnx.TensorProto.INT64
              and int(onnx.numpy_helper.to_array(t)) == P}  # fmt: skip
    return sum(1 for n in model.graph.node if n.op_type == "Less" and n.input[1] in limits)


# (artifact, graph form, range tests per call): a piece keeps its clamp behind its guard; a block that calls it
# checks position_ids once with its guard (the piece's own guard superseded and dropped) and keeps the piece's clamp:
# dropping it would leave every layer's table reads on one rows value, where an audit tells the layers' sites apart
# by their rows (``audits.patterns.gathered``), for five nodes a decode step.
RANGE_TESTS = [
    ("rope", "fused", 2),
    ("rope", "decomposed", 2),
    *(("block", form, 2) for form in ("fused", "decomposed", "tensorrt", "static-cache", "gqa")),
]


@pytest.mark.parametrize(("artifact", "graph", "tests"), RANGE_TESTS, ids=[f"{a}-{g}" for a, g, _ in RANGE_TESTS])
def test_a_composed_graph_tests_the_range_once(artifact: str, graph: str, tests: int) -> None:
    spec = small("rope", artifact=artifact, graph=graph)
    model = recipe_for(spec).export(spec)
    assert _limit_tests(model) == tests
    onnx.checker.check_model(model, full_check=True)
