"""Sinusoidal encoding (Vaswani et al. 2017): the paper's equation, export -> ORT, bad positions and bad specs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import numpy_helper

from ropeexport import build
from ropeexport.catalog import recipe_for
from ropeexport.errors import RuntimeInputError, SpecError
from ropeexport.families.sinusoidal.export import build_apply_graph, build_scores_graph
from ropeexport.families.sinusoidal.probes import check_tables
from ropeexport.families.sinusoidal.reference import SinusoidalEmbedding, sinusoid_table
from ropeexport.families.sinusoidal.spec import SinusoidalSpec
from ropeexport.graph.onnx_io import save_model
from ropeexport.report.views import TableRecord
from ropeexport.runtimes import open_runner
from ropeexport.verification.core import verify_artifact
from tests.cases import tiered

P = 96  # max_positions of the small specs
SMALL = {"d_model": 16, "num_heads": 2, "head_dim": 8, "max_positions": P}


def paper_pe(positions: int, d: int, base: float = 10000.0) -> np.ndarray:
    """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(pos / base^(2i/d)), one element at a time."""
    pe = np.zeros((positions, d))
    for pos in range(positions):
        for i in range(d // 2):
            pe[pos, 2 * i] = math.sin(pos / base ** (2 * i / d))
            pe[pos, 2 * i + 1] = math.cos(pos / base ** (2 * i / d))
    return pe


def _export(model: onnx.ModelProto, tmp_path: Path) -> Path:
    save_model(model, tmp_path)
    return tmp_path / "model.onnx"


def _stored_table(path: Path) -> np.ndarray:
    model = onnx.load(str(path))
    return next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "pe_table")


@pytest.mark.parametrize("base", [10000.0, 500.0])
def test_float64_table_is_the_papers_equation(base: float) -> None:
    np.testing.assert_allclose(sinusoid_table(40, 12, base), paper_pe(40, 12, base), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_stored_table_is_the_equation_rounded_once(tmp_path: Path, dtype: str) -> None:
    spec = SinusoidalSpec(**SMALL, dtype=dtype)
    stored = _stored_table(_export(build_apply_graph(spec), tmp_path))
    want = paper_pe(P, 16).astype(np.float32 if dtype == "fp32" else np.float16)  # numpy rounds to nearest once
    np.testing.assert_array_equal(stored, want)


@pytest.mark.parametrize("scale_input", [False, True])
def test_apply_in_ort_is_x_plus_pe(tmp_path: Path, scale_input: bool) -> None:
    spec = SinusoidalSpec(**SMALL, scale_input=scale_input)
    path = _export(build_apply_graph(spec), tmp_path)
    rng = np.random.default_rng(1)
    pos = np.array([[5, 0, 95, 17], [3, 3, 60, 1]], np.int64)  # unordered, repeated, the last row
    x = rng.standard_normal((2, 4, 16)).astype(np.float32)
    (y,) = ort.InferenceSession(str(path)).run(None, {"x": x, "position_ids": pos})
    pe = paper_pe(P, 16)
    want = np.zeros((2, 4, 16))
    for b in range(2):
        for s in range(4):
            want[b, s] = x[b, s].astype(np.float64) * (math.sqrt(16) if scale_input else 1.0) + pe[pos[b, s]]
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_scores_in_ort_add_pe_to_every_head_then_scale(tmp_path: Path) -> None:
    spec = SinusoidalSpec(**SMALL, artifact="scores")
    path = _export(build_scores_graph(spec), tmp_path)
    rng = np.random.default_rng(2)
    qpos, kpos = np.array([[7, 2, 90]], np.int64), np.array([[0, 2, 7, 95, 40]], np.int64)
    q = rng.standard_normal((1, 2, 3, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 5, 8)).astype(np.float32)
    feeds = {"query": q, "key": k, "query_position_ids": qpos, "key_position_ids": kpos}
    (scores,) = ort.InferenceSession(str(path)).run(None, feeds)
    pe = paper_pe(P, 8)
    want = np.zeros((1, 2, 3, 5))
    for h in range(2):
        for i in range(3):
            for j in range(5):
                qi = q[0, h, i].astype(np.float64) + pe[qpos[0, i]]
                kj = k[0, h, j].astype(np.float64) + pe[kpos[0, j]]
                want[0, h, i, j] = sum(qi[c] * kj[c] for c in range(8)) / math.sqrt(8)
    np.testing.assert_allclose(scores, want, rtol=1e-5, atol=1e-5)


BUILDS = [
    pytest.param(artifact, dtype, graph, scaled, id=f"{artifact}{'-scaled' if scaled else ''}-{dtype}-{graph}")
    for artifact in ("apply", "scores")
    for dtype in ("fp32", "fp16")
    for graph in ("fused", "decomposed")
    for scaled in ((False, True) if artifact == "apply" else (False,))
]


@pytest.mark.parametrize(("artifact", "dtype", "graph", "scaled"),
                         tiered(BUILDS, lambda c: c[1:3] == ("fp32", "fused")))  # fmt: skip
def test_export_ort_verifies(tmp_path: Path, artifact: str, dtype: str, graph: str, scaled: bool) -> None:
    spec = SinusoidalSpec(**SMALL, artifact=artifact, dtype=dtype, graph=graph, scale_input=scaled)
    result = build(spec, tmp_path)
    assert result.passed, result.report
    report = result.encoding_report
    assert all(t.passed and t.max_ulp <= 0.5 for t in report.tables)
    assert {c.reference for c in report.comparisons} == {"eager", "float64"}
    model = onnx.load(str(result.path / "model.onnx"))
    assert next(o.version for o in model.opset_import if o.domain == "") == (23 if graph == "fused" else 17)


# Artifacts that are wrong for the spec they claim: verification must say so.
WRONG = [
    pytest.param({"base": 10001.0}, {}, id="wrong-base"),
    pytest.param({}, {"scale_input": True}, id="scaling-ignored"),
    pytest.param({"max_positions": P - 1}, {}, id="short-table"),
]


@pytest.mark.parametrize(("built", "claimed"), WRONG)
def test_wrong_artifact_fails_verification(tmp_path: Path, built: dict, claimed: dict) -> None:
    path = _export(build_apply_graph(SinusoidalSpec(**(SMALL | built))), tmp_path)
    assert not verify_artifact(
        SinusoidalSpec(**(SMALL | claimed)), recipe_for(SinusoidalSpec(**(SMALL | claimed))), path, ["ort"]
    ).passed


def test_rows_shifted_by_one_fail_verification(tmp_path: Path) -> None:
    spec = SinusoidalSpec(**SMALL)
    model = build_apply_graph(spec)
    table = next(t for t in model.graph.initializer if t.name == "pe_table")
    table.CopyFrom(numpy_helper.from_array(np.roll(numpy_helper.to_array(table), 1, axis=0), "pe_table"))
    assert not verify_artifact(spec, recipe_for(spec), _export(model, tmp_path), ["ort"]).passed


def _apply_feeds(pos: list[int]) -> dict[str, np.ndarray]:
    return {"x": np.zeros((1, len(pos), 16), np.float32), "position_ids": np.array([pos], np.int64)}


def _scores_feeds(qpos: list[int], kpos: list[int]) -> dict[str, np.ndarray]:
    return {
        "query": np.zeros((1, 2, len(qpos), 8), np.float32),
        "key": np.zeros((1, 2, len(kpos), 8), np.float32),
        "query_position_ids": np.array([qpos], np.int64),
        "key_position_ids": np.array([kpos], np.int64),
    }


BAD = [-1, P, -P, 10 * P]
BAD_SCORES = [(q, k) for bad in BAD for q, k in (([0, bad], [0, 1]), ([0, 1], [bad, 0]))]


@pytest.mark.parametrize("bad", BAD)
def test_apply_bad_position_raises_in_runner_and_in_graph(tmp_path: Path, bad: int) -> None:
    path = _export(build_apply_graph(SinusoidalSpec(**SMALL)), tmp_path)
    with open_runner("ort", path) as runner:
        runner.infer(_apply_feeds([0, P - 1]))  # the edges are fine
        with pytest.raises(RuntimeInputError, match="position_ids"):
            runner.infer(_apply_feeds([0, bad]))
    with pytest.raises(Exception, match="out of data bounds"):  # the raw session: the guarded Gather refuses
        ort.InferenceSession(str(path)).run(None, _apply_feeds([0, bad]))


@pytest.mark.parametrize(("qpos", "kpos"), BAD_SCORES)
def test_scores_bad_position_raises_in_runner_and_in_graph(tmp_path: Path, qpos: list[int], kpos: list[int]) -> None:
    path = _export(build_scores_graph(SinusoidalSpec(**SMALL, artifact="scores")), tmp_path)
    with open_runner("ort", path) as runner, pytest.raises(RuntimeInputError, match="position_ids"):
        runner.infer(_scores_feeds(qpos, kpos))
    with pytest.raises(Exception, match="out of data bounds"):
        ort.InferenceSession(str(path)).run(None, _scores_feeds(qpos, kpos))


def test_eager_module_rejects_bad_positions() -> None:
    module = SinusoidalEmbedding(SinusoidalSpec(**SMALL))
    with pytest.raises(RuntimeInputError):
        module(torch.zeros(1, 2, 16), position_ids=torch.tensor([[0, P]]))


BAD_FIELDS = [
    pytest.param({"d_model": 15}, "d_model", id="odd-d_model"),
    pytest.param({"d_model": 0}, "d_model", id="zero-d_model"),
    pytest.param({"base": 0.0}, "base", id="zero-base"),
    pytest.param({"base": 1.0}, "base", id="base-one"),
    pytest.param({"base": "ten"}, "base", id="base-not-a-number"),
    pytest.param({"scale_input": "maybe"}, "scale_input", id="scale_input-not-bool"),
    pytest.param({"artifact": "scores", "head_dim": 7}, "head_dim", id="odd-head_dim-for-scores"),
    pytest.param({"artifact": "scores", "scale_input": True}, "scale_input", id="scale_input-for-scores"),
    pytest.param({"artifact": "bias"}, "artifact", id="no-bias-artifact"),
    pytest.param({"num_heads": 0}, "num_heads", id="no-heads"),
    pytest.param({"max_positions": 0}, "max_positions", id="no-positions"),
    pytest.param({"max_positions": 2**22, "d_model": 1024}, "max_positions", id="table-too-large"),
]


@pytest.mark.parametrize(("fields", "field"), BAD_FIELDS)
def test_bad_fields_raise_spec_error_naming_the_field(fields: dict, field: str) -> None:
    with pytest.raises(SpecError) as caught:
        SinusoidalSpec(**(SMALL | fields))
    assert caught.value.field == field
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("row", [1, P - 1])
def test_table_check_catches_one_element_one_ulp_off(tmp_path: Path, row: int) -> None:
    spec = SinusoidalSpec(**SMALL)
    model = build_apply_graph(spec)
    table = next(t for t in model.graph.initializer if t.name == "pe_table")
    values = numpy_helper.to_array(table).copy()
    values[row, 3] = np.nextafter(values[row, 3], np.float32(np.inf))  # 1 ulp: 0.5 to 1.5 ulp from float64
    table.CopyFrom(numpy_helper.from_array(values, "pe_table"))
    (check,) = map(TableRecord, check_tables(spec, _export(model, tmp_path)))
    assert not check.passed and check.worst_row == row and check.max_ulp > 0.5
