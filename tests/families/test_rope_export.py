from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from ropeexport.dtypes import DTYPES
from ropeexport.families.rope.export import build_rope_graph
from ropeexport.families.rope.reference import ComplexRotaryEmbedding, reference_module
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.graph import onnx_io
from ropeexport.graph.onnx_io import save_model, sha256
from ropeexport.tensors import to_torch
from ropeexport.verification.compare import TOLERANCES
from tests.cases import MAX_POSITIONS, ORIGINAL, POSITION_CALLS, ROTARY, SCHEDULE_PARAMS, small_spec

pytestmark = pytest.mark.fast  # graph builds: every layout x schedule x form on 256 positions

# The case table: every layout x schedule x graph style x dtype ORT runs on the CPU.
CASES = [
    pytest.param(layout, scaling, graph, dtype, id=f"{layout}-{scaling}-{graph}-{dtype}")
    for layout, scaling, graph, dtype in itertools.product(
        ("half", "interleaved", "complex"), SCHEDULE_PARAMS, ("fused", "decomposed"), ("fp32", "fp16")
    )
]


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["query_out", "key_out"], feeds)


def feeds_for(spec: RopeSpec, positions: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    b, s = positions.shape
    dtype = DTYPES[spec.dtype].np_dtype
    return {
        "query": rng.standard_normal((b, spec.num_heads, s, spec.head_dim), dtype=np.float32).astype(dtype),
        "key": rng.standard_normal((b, spec.num_kv_heads, s, spec.head_dim), dtype=np.float32).astype(dtype),
        "position_ids": positions,
    }


@pytest.mark.parametrize(("layout", "scaling", "graph", "dtype"), CASES)
def test_ort_matches_eager(layout: str, scaling: str, graph: str, dtype: str) -> None:
    spec = RopeSpec(**small_spec(layout=layout, scaling=scaling, graph=graph, dtype=dtype))
    model = build_rope_graph(spec)
    reference = reference_module(spec)
    tol = TOLERANCES[dtype]
    for name, positions in POSITION_CALLS:
        feeds = feeds_for(spec, positions)
        got = run_ort(model, feeds)
        with torch.no_grad():
            want = reference(to_torch(feeds["query"]), to_torch(feeds["key"]), position_ids=torch.from_numpy(positions))
        for g, w in zip(got, want, strict=True):
            w = w.numpy().astype(np.float64)
            err = np.abs(g.astype(np.float64) - w)
            assert not ((err > tol.atol) & (err > tol.rtol * np.abs(w))).any(), f"{name}: max err {err.max():.3g}"


@pytest.mark.parametrize("graph", ["fused", "decomposed"])
@pytest.mark.parametrize("scaling", ["dynamic", "longrope"])
def test_length_dependent_schedule_switches_on_actual_length(scaling: str, graph: str) -> None:
    # The same positions 0..3 must rotate differently once another position in the call passes the original
    # length: a graph frozen at one length (the trace length) would give the same rows in both calls.
    spec = RopeSpec(**small_spec(scaling=scaling, graph=graph))
    model = build_rope_graph(spec)
    short = np.arange(4, dtype=np.int64)[None]
    long = np.array([[0, 1, 2, 3, ORIGINAL + 10]], dtype=np.int64)
    q_short = run_ort(model, feeds_for(spec, short))[0]
    q_long = run_ort(model, feeds_for(spec, long))[0][:, :, :4]
    assert np.abs(q_short[:, :, 1:] - q_long[:, :, 1:]).max() > 1e-3


def test_complex_form_exports_and_matches_meta_style_eager() -> None:
    spec = RopeSpec(**small_spec(layout="complex", rotary_dim=16, num_kv_heads=4))
    module = ComplexRotaryEmbedding(spec)
    positions = np.array([[0, 5, 100, MAX_POSITIONS - 1]], dtype=np.int64)
    feeds = feeds_for(spec, positions)
    got = run_ort(build_rope_graph(spec), feeds)
    want = module(
        torch.from_numpy(feeds["query"]), torch.from_numpy(feeds["key"]), position_ids=torch.from_numpy(positions)
    )
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w.numpy(), atol=2e-6, rtol=1e-6)


@pytest.mark.parametrize("scaling", ["default", "longrope"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_tables_are_half_width_initializers_in_table_dtype(scaling: str, dtype: str) -> None:
    spec = RopeSpec(**small_spec(scaling=scaling, dtype=dtype))
    model = build_rope_graph(spec)
    tables = {t.name: t for t in model.graph.initializer if t.name.endswith("_table")}
    rows = MAX_POSITIONS * (2 if scaling == "longrope" else 1)
    onnx_type = {"fp32": onnx.TensorProto.FLOAT, "fp16": onnx.TensorProto.FLOAT16, "bf16": onnx.TensorProto.BFLOAT16}
    for name in ("cos_table", "sin_table"):
        assert list(tables[name].dims) == [rows, ROTARY // 2]
        assert tables[name].data_type == onnx_type[dtype]


@pytest.mark.parametrize("graph", ["fused", "decomposed"])
def test_graph_style_opset_ir_and_dynamic_axes(graph: str) -> None:
    spec = RopeSpec(**small_spec(graph=graph))
    model = build_rope_graph(spec)
    ops = {n.op_type for n in model.graph.node}
    assert model.ir_version <= 13  # onnxruntime 1.31 reads IR 13 at most
    assert model.opset_import[0].version == (23 if graph == "fused" else 17)
    if graph == "fused":
        nodes = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
        heads = sorted(next(a.i for a in n.attribute if a.name == "num_heads") for n in nodes)
        assert heads == [spec.num_kv_heads, spec.num_heads]
    else:
        assert "RotaryEmbedding" not in ops
    for vi in model.graph.input:
        dims = [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
        assert dims[0] == "batch" and ("seq" in dims)


def test_same_spec_same_bytes(tmp_path: Path) -> None:
    spec = RopeSpec(**small_spec(scaling="dynamic"))
    a, b = tmp_path / "a", tmp_path / "b"
    save_model(build_rope_graph(spec), a)
    save_model(build_rope_graph(RopeSpec(**small_spec(scaling="dynamic"))), b)
    assert sha256(a / "model.onnx") == sha256(b / "model.onnx")


def test_large_tables_go_to_external_data_and_still_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx_io, "EXTERNAL_DATA_THRESHOLD", 1024)
    spec = RopeSpec(**small_spec())
    files = save_model(build_rope_graph(spec), tmp_path)
    assert files == ["model.onnx", onnx_io.DATA_FILE]
    assert (tmp_path / onnx_io.DATA_FILE).stat().st_size >= 2 * MAX_POSITIONS * (ROTARY // 2) * 4
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = feeds_for(spec, np.arange(4, dtype=np.int64)[None])
    assert session.run(None, feeds)[0].shape == feeds["query"].shape
