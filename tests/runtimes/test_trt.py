"""The TensorRT stage: what can be checked without TensorRT here, and the real engine tests where it exists."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from ropeexport import build
from ropeexport.errors import RuntimeUnavailable
from ropeexport.families.rope.export import build_rope_graph
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.graph.onnx_io import save_model
from ropeexport.runtimes import open_runner
from ropeexport.runtimes.trt import PAIR_DIM_CAP, profile_shapes

HAVE_TRT = importlib.util.find_spec("tensorrt") is not None


def _gpu() -> bool:
    import torch

    return torch.cuda.is_available()


needs_trt = pytest.mark.skipif(not (HAVE_TRT and _gpu()), reason="needs TensorRT and a CUDA GPU (absent here)")


def test_profiles_come_from_the_symbolic_dims() -> None:
    spec = RopeSpec(head_dim=16, num_heads=4, num_kv_heads=2, max_positions=4096)
    shapes = profile_shapes(build_rope_graph(spec), spec.max_positions)
    assert shapes["query"] == ([1, 4, 1, 16], [1, 4, 512, 16], [16, 4, 4096, 16])
    assert shapes["key"][2] == [16, 2, 4096, 16] and shapes["position_ids"] == ([1, 1], [1, 512], [16, 4096])


def test_pair_dims_are_capped_in_profiles() -> None:
    from ropeexport.families.alibi.export import alibi_bias_nodes
    from ropeexport.families.alibi.spec import AlibiSpec
    from ropeexport.families.bias.export import build_scores_graph

    spec = AlibiSpec(artifact="scores", num_heads=4, head_dim=8, max_positions=131072)
    shapes = profile_shapes(build_scores_graph(spec, alibi_bias_nodes), spec.max_positions)
    assert shapes["query"][2] == [16, 4, PAIR_DIM_CAP, 8]


@pytest.mark.skipif(HAVE_TRT and _gpu(), reason="TensorRT and a GPU are present: the real tests below run instead")
def test_without_tensorrt_the_runner_says_why(tmp_path: Path) -> None:
    spec = RopeSpec(head_dim=8, num_heads=2, max_positions=32)
    save_model(build_rope_graph(spec), tmp_path)
    with pytest.raises(RuntimeUnavailable, match="TensorRT is not installed|no CUDA GPU"):
        open_runner("trt", tmp_path / "model.onnx")


@pytest.mark.skipif(HAVE_TRT and _gpu(), reason="TensorRT and a GPU are present: the real tests below run instead")
def test_build_for_trt_reports_it_skipped_and_verifies_elsewhere(tmp_path: Path) -> None:
    result = build(RopeSpec(head_dim=8, num_heads=2, max_positions=32), tmp_path, runtimes=["trt"])
    runtimes = {r.name: r for r in result.encoding_report.runtimes}
    assert runtimes["trt"].status == "skipped" and "TensorRT" in runtimes["trt"].reason
    assert runtimes["onnx-reference"].status == "verified" and result.passed
    assert "tensorrt" not in json.loads((result.path / "manifest.json").read_text())


@pytest.mark.tensorrt
@pytest.mark.gpu
@needs_trt
@pytest.mark.parametrize("graph", ["decomposed", "fused"])
def test_trt_engine_builds_verifies_and_is_recorded(tmp_path: Path, graph: str) -> None:
    result = build(RopeSpec(head_dim=64, num_heads=8, max_positions=4096, graph=graph), tmp_path, runtimes=["trt"])
    runtimes = {r.name: r for r in result.encoding_report.runtimes}
    assert runtimes["trt"].status == "verified", runtimes["trt"].data
    assert result.passed
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert manifest["tensorrt"]["tensorrt"] and manifest["tensorrt"]["gpu"]
    assert (result.path / "model.engine").stat().st_size > 0


@pytest.mark.tensorrt
@pytest.mark.gpu
@needs_trt
def test_engine_from_another_tensorrt_version_is_refused(tmp_path: Path) -> None:
    from ropeexport.errors import SpecError

    spec = RopeSpec(head_dim=64, num_heads=8, max_positions=256, graph="decomposed")
    result = build(spec, tmp_path, runtimes=["trt"])
    info = result.path / "model.engine.json"
    data = json.loads(info.read_text()) | {"tensorrt": "0.0.0"}
    info.write_text(json.dumps(data))
    with pytest.raises(SpecError, match="engine"):
        open_runner("trt", result.path / "model.onnx")
