from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from ropeexport.catalog import recipe_for
from ropeexport.families.rope.export import build_rope_graph
from ropeexport.families.rope.probes import rope_probes
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.graph.onnx_io import save_model
from ropeexport.report.views import ComparisonRecord, GuardRecord, PropertyRecord, TableRecord
from ropeexport.verification.core import verify_artifact
from tests.cases import ORIGINAL, small_spec


def verify(built: RopeSpec, claimed: RopeSpec, tmp_path: Path, model: onnx.ModelProto | None = None):
    save_model(model or build_rope_graph(built), tmp_path)
    return verify_artifact(claimed, recipe_for(claimed), tmp_path / "model.onnx", ["ort"])


def test_correct_artifact_passes_with_every_contract_field(tmp_path: Path) -> None:
    spec = RopeSpec(**small_spec(scaling="yarn"))
    result = verify(spec, spec, tmp_path)
    assert result.passed
    assert {(c.reference, c.output) for c in result.comparisons} == {
        (r, o) for r in ("eager", "float64") for o in ("query_out", "key_out")
    }
    for c in result.comparisons:
        d = ComparisonRecord(c.to_dict())
        assert d.passed and d.runtime == "ort" and d.max_ulp >= 0 and d.elements > 0
    assert all(t.passed and t.max_ulp <= 0.5 for t in map(TableRecord, result.tables))
    assert result.coverage["sweep"].startswith("every position")


# Wrong artifacts verification must fail: (what was built, what the artifact claims to be).
WRONG = [
    pytest.param({"layout": "interleaved"}, {"layout": "half"}, id="half-and-interleaved-swapped"),
    pytest.param({}, {"scaling": "linear"}, id="scaling-silently-ignored"),
    pytest.param({"theta": 10001.0}, {}, id="wrong-theta"),
    pytest.param({"scaling": "default"}, {"scaling": "longrope"}, id="longrope-frozen-to-one-table"),
    pytest.param({"max_positions": 128}, {}, id="table-shorter-than-max-positions"),
    pytest.param({"dtype": "fp16"}, {"dtype": "fp16", "scaling": "dynamic"}, id="dynamic-frozen-at-default"),
]


@pytest.mark.parametrize(("built", "claimed"), WRONG)
def test_wrong_artifact_fails(tmp_path: Path, built: dict, claimed: dict) -> None:
    result = verify(RopeSpec(**small_spec(**built)), RopeSpec(**small_spec(**claimed)), tmp_path)
    assert not result.passed


def test_positions_off_by_one_fail(tmp_path: Path) -> None:
    spec = RopeSpec(**small_spec())
    model = build_rope_graph(spec)
    for table in model.graph.initializer:
        if table.name in ("cos_table", "sin_table"):
            rows = numpy_helper.to_array(table)
            table.CopyFrom(numpy_helper.from_array(np.roll(rows, 1, axis=0), table.name))
    result = verify(spec, spec, tmp_path, model)
    assert not result.passed
    failing = [c for c in result.comparisons if not c.passed]
    assert failing and all(c.max_abs > 1e-2 for c in failing)
    assert not any(t.passed for t in map(TableRecord, result.tables))


def test_angles_rounded_to_fp16_before_cos_fail(tmp_path: Path) -> None:
    # The classic drift: angles computed in fp16, then cos/sin taken (correct in float64 otherwise).
    spec = RopeSpec(**small_spec())
    model = build_rope_graph(spec)
    positions = np.arange(spec.max_positions, dtype=np.float64)[:, None]
    inv = 1.0 / spec.theta ** (np.arange(0, spec.rotary_dim, 2) / spec.rotary_dim)
    angles = (positions * inv).astype(np.float16).astype(np.float64)
    for table in model.graph.initializer:
        fn = {"cos_table": np.cos, "sin_table": np.sin}.get(table.name)
        if fn:
            table.CopyFrom(numpy_helper.from_array(fn(angles).astype(np.float32), table.name))
    assert not verify(spec, spec, tmp_path, model).passed


def test_probes_cover_table_ends_and_both_sides_of_original() -> None:
    spec = RopeSpec(**small_spec(scaling="longrope"))
    probes, coverage = rope_probes(spec)
    lengths = {int(p.positions["position_ids"].max()) + 1 for p in probes}
    positions = set(np.concatenate([p.positions["position_ids"].ravel() for p in probes]).tolist())
    assert {0, spec.max_positions - 1} <= positions
    assert {ORIGINAL, ORIGINAL + 1} <= lengths
    assert coverage["positions_checked"] == spec.max_positions


def test_sweep_covers_every_position_of_a_large_table() -> None:
    spec = RopeSpec(head_dim=128, num_heads=32, num_kv_heads=8, max_positions=131072)
    probes, coverage = rope_probes(spec)
    sweep = np.concatenate([p.positions["position_ids"].ravel() for p in probes if p.name.startswith("sweep")])
    assert np.array_equal(np.sort(sweep), np.arange(131072))
    assert coverage["positions_checked"] == 131072


def test_unordered_probe_puts_the_largest_position_mid_row() -> None:
    # An L taken from the last column (or from one row) must see a different regime than the true L.
    spec = RopeSpec(**small_spec(scaling="longrope"))
    probe = next(p for p in rope_probes(spec)[0] if p.name == "unordered")
    ids = probe.positions["position_ids"]
    assert int(ids.max()) + 1 > ORIGINAL >= int(ids[:, -1].max()) + 1
    assert int(ids[0].max()) + 1 <= ORIGINAL


@pytest.mark.parametrize("graph", ["fused", "decomposed"])
def test_length_taken_from_the_last_column_fails(tmp_path: Path, graph: str) -> None:
    spec = RopeSpec(**small_spec(scaling="longrope", graph=graph))
    model = build_rope_graph(spec)
    node = next(n for n in model.graph.node if n.op_type == "ReduceMax")
    # Wrong L: max over the last column only (a plausible exporter bug).
    model.graph.node.insert(
        0, onnx.helper.make_node("Slice", ["position_ids", "minus_one", "big", "one_axis"], ["last_column"])
    )
    model.graph.initializer.extend(
        [
            numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
            numpy_helper.from_array(np.array([2**62], np.int64), "big"),
            numpy_helper.from_array(np.array([1], np.int64), "one_axis"),
        ]
    )
    node.input[0] = "last_column"
    assert not verify(spec, spec, tmp_path, model).passed


def test_graph_without_range_guard_fails_verification(tmp_path: Path) -> None:
    spec = RopeSpec(**small_spec(graph="decomposed"))
    model = build_rope_graph(spec)
    # Take the boundary guard out (graph.guard) and route the raw positions around the table's own row check.
    guard = [n for n in model.graph.node if n.name.startswith("position_ids__guard") or "must lie in" in n.name]
    for node in guard:
        model.graph.node.remove(node)
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if name == "position_ids__checked":
                node.input[i] = "position_ids"
        if node.op_type == "Gather" and node.input[0] in ("cos_table", "sin_table"):
            node.input[1] = "position_ids"
    result = verify(spec, spec, tmp_path, model)
    assert not result.passed
    # -1 wraps to the last row and returns numbers; 256 fails in the table's Gather, which is no range guard either.
    assert [g.case for g in map(GuardRecord, result.guards) if not g.passed] == ["position -1", "position 256"]


def test_nan_where_outputs_cancel_fails(tmp_path: Path) -> None:
    spec = RopeSpec(**small_spec(dtype="fp16"))
    model = build_rope_graph(spec)
    for out in model.graph.output:  # NaN wherever |y| < 4e-3: near-zero outputs must still be judged
        node = next(n for n in model.graph.node if out.name in n.output)
        node.output[list(node.output).index(out.name)] = f"{out.name}_raw"
        model.graph.node.extend(
            [
                onnx.helper.make_node("Abs", [f"{out.name}_raw"], [f"{out.name}_abs"]),
                onnx.helper.make_node("Less", [f"{out.name}_abs", "tiny"], [f"{out.name}_small"]),
                onnx.helper.make_node("Where", [f"{out.name}_small", "nan", f"{out.name}_raw"], [out.name]),
            ]
        )
    model.graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(4e-3, np.float16), "tiny"),
            numpy_helper.from_array(np.array(np.nan, np.float16), "nan"),
        ]
    )
    assert not verify(spec, spec, tmp_path, model).passed


# The decay curve is measured in calls of at most 1024 distances (and never more than the table's rows): a dynamic
# schedule's frequencies depend on each call's L, so every call must be expected with its own L. 64 and 1100 split
# the distances into two calls with different L.
@pytest.mark.parametrize("max_positions", [64, 1100])
def test_a_valid_dynamic_schedule_passes_at_any_length(tmp_path: Path, max_positions: int) -> None:
    params = {"factor": 2.0, "original_max_position_embeddings": max_positions // 2}
    spec = RopeSpec(head_dim=16, num_heads=2, max_positions=max_positions, scaling="dynamic", scaling_params=params)
    result = verify(spec, spec, tmp_path)
    decay = next(p for p in map(PropertyRecord, result.properties) if p.name == "long-term decay")
    assert decay.passed, decay.summary
    assert result.passed
