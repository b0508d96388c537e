"""The plugin graph (``ropeexport::RotaryEmbedding`` nodes) and its TensorRT registration.

Here, without TensorRT: the graph's structure, and its values through ``onnx.reference`` with the custom op
implemented twice (a float64 NumPy rotation, and the Triton kernel in the interpreter), against the eager reference.
Where TensorRT and a GPU exist: the registered plugin inside a real engine.
"""

from __future__ import annotations

import importlib.util
import itertools
import subprocess
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
import torch
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

from ropeexport.dtypes import DTYPES
from ropeexport.errors import RuntimeUnavailable
from ropeexport.families.rope.export import build_rope_graph
from ropeexport.families.rope.plugin import DOMAIN, OP_TYPE, build_rope_plugin_graph
from ropeexport.families.rope.reference import reference_module, table_regimes
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.graph.onnx_io import save_model
from ropeexport.numerics import round_once
from ropeexport.tensors import to_torch
from ropeexport.trt import plugin as trt_plugin
from ropeexport.verification.compare import TOLERANCES
from tests.cases import MAX_POSITIONS, POSITION_CALLS, SCHEDULE_PARAMS, small_spec

HAVE_TRITON = importlib.util.find_spec("triton") is not None


def _torch_of(array: np.ndarray) -> torch.Tensor:
    return to_torch(array)


def _numpy_of(tensor: torch.Tensor) -> np.ndarray:
    if tensor.dtype == torch.bfloat16:
        return tensor.cpu().view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    return tensor.cpu().numpy()


class NumpyRotaryEmbedding(OpRun):
    """``ropeexport.RotaryEmbedding`` in float64 NumPy, rounded once to x's dtype: the plugin's contract, written apart.

    Rows past the table raise (``np.take``), as a runner must never feed them.
    """

    op_domain = DOMAIN

    # **ignored: onnx.reference also hands over the defaults of the standard RotaryEmbedding schema (num_heads, ...).
    def _run(self, x, cos, sin, rows, interleaved=0, rotary_dim=0, plugin_namespace="", **ignored):  # type: ignore[no-untyped-def]
        c = np.take(cos.astype(np.float64), rows, axis=0, mode="raise")[:, None]  # [b, 1, s, r/2]
        s = np.take(sin.astype(np.float64), rows, axis=0, mode="raise")[:, None]
        x64 = x.astype(np.float64)
        r = rotary_dim
        ia, ib = (np.arange(0, r, 2), np.arange(1, r, 2)) if interleaved else (np.arange(r // 2), np.arange(r // 2, r))
        out = x64.copy()
        out[..., ia] = x64[..., ia] * c - x64[..., ib] * s
        out[..., ib] = x64[..., ib] * c + x64[..., ia] * s
        name = {np.dtype(np.float32): "fp32", np.dtype(np.float16): "fp16", np.dtype(ml_dtypes.bfloat16): "bf16"}
        return (round_once(out, name[x.dtype]),)


class TritonRotaryEmbedding(OpRun):
    """``ropeexport.RotaryEmbedding`` as the plugin computes it: the Triton kernel (interpreter mode, CPU tensors)."""

    op_domain = DOMAIN

    # **ignored: onnx.reference also hands over the defaults of the standard RotaryEmbedding schema (num_heads, ...).
    def _run(self, x, cos, sin, rows, interleaved=0, rotary_dim=0, plugin_namespace="", **ignored):  # type: ignore[no-untyped-def]
        from ropeexport.trt.triton_rope import rope_triton

        out = rope_triton(
            _torch_of(x),
            _torch_of(cos),
            _torch_of(sin),
            torch.from_numpy(np.ascontiguousarray(rows)),
            interleaved=bool(interleaved),
            rotary_dim=int(rotary_dim),
        )
        return (_numpy_of(out),)


def feeds_for(spec: RopeSpec, positions: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    b, s = positions.shape
    dtype = DTYPES[spec.dtype].np_dtype
    return {
        "query": rng.standard_normal((b, spec.num_heads, s, spec.head_dim), dtype=np.float32).astype(dtype),
        "key": rng.standard_normal((b, spec.num_kv_heads, s, spec.head_dim), dtype=np.float32).astype(dtype),
        "position_ids": positions,
    }


def check_against_eager(spec: RopeSpec, run: Callable[[dict[str, np.ndarray]], list[np.ndarray]]) -> float:
    """Every position call of tests.cases through ``run``, compared with the eager module; returns the max error."""
    reference = reference_module(spec)
    tol = TOLERANCES[spec.dtype]
    worst = 0.0
    for name, positions in POSITION_CALLS:
        feeds = feeds_for(spec, positions)
        got = run(feeds)
        with torch.no_grad():
            want = reference(to_torch(feeds["query"]), to_torch(feeds["key"]), position_ids=torch.from_numpy(positions))
        for g, w in zip(got, want, strict=True):
            w64 = w.double().numpy()
            err = np.abs(np.asarray(g).astype(np.float64) - w64)
            worst = max(worst, float(err.max()))
            assert not ((err > tol.atol) & (err > tol.rtol * np.abs(w64))).any(), f"{name}: max err {err.max():.3g}"
    return worst


def evaluator(model: onnx.ModelProto, impl: type[OpRun]) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    op = type(OP_TYPE, (impl,), {})  # onnx.reference finds a new op by its class name
    ref = ReferenceEvaluator(model, new_ops=[op])
    return lambda feeds: list(ref.run(["query_out", "key_out"], feeds))


LAYOUTS = ("half", "interleaved", "complex")


@pytest.mark.parametrize(("layout", "scaling"), list(itertools.product(LAYOUTS, SCHEDULE_PARAMS)))
def test_plugin_graph_structure(layout: str, scaling: str, tmp_path: Path) -> None:
    spec = RopeSpec(**small_spec(layout=layout, scaling=scaling))
    model = build_rope_plugin_graph(spec)
    onnx.checker.check_model(model, full_check=True)  # custom domains are allowed
    assert save_model(model, tmp_path) == ["model.onnx"]  # what a build writes (and checks again)
    assert {(o.domain, o.version) for o in model.opset_import} == {("", 17), (DOMAIN, 1)}
    nodes = [n for n in model.graph.node if n.op_type == OP_TYPE]
    assert [n.domain for n in nodes] == [DOMAIN, DOMAIN], "both rotations are plugin nodes, none is the ONNX op"
    for node in nodes:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert attrs == {
            "interleaved": int(layout != "half"),
            "rotary_dim": spec.rotary_dim,
            "plugin_namespace": b"ropeexport",
        }
        assert list(node.input[1:3]) == ["cos_table", "sin_table"] or scaling == "dynamic"
    # The same contract as the fused artifact: inputs, outputs, metadata.
    fused = build_rope_graph(spec)
    assert [str(v) for v in model.graph.input] == [str(v) for v in fused.graph.input]
    assert [str(v) for v in model.graph.output] == [str(v) for v in fused.graph.output]
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta == {p.key: p.value for p in fused.metadata_props} | {
        "ropeexport.graph": "plugin",
        "ropeexport.plugin": "ropeexport::RotaryEmbedding",
    }
    # The tables: half width, float64 rounded once, one block of rows per regime.
    tables = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    regimes = table_regimes(spec)
    for i, name in enumerate(("cos_table", "sin_table")):
        want = np.concatenate([round_once(pair[i], spec.dtype) for pair in regimes])
        assert tables[name].shape == (len(regimes) * MAX_POSITIONS, spec.rotary_dim // 2)
        np.testing.assert_array_equal(tables[name], want)


@pytest.mark.parametrize(
    ("layout", "scaling", "dtype"),
    [(layout, scaling, "fp32") for layout, scaling in itertools.product(LAYOUTS, SCHEDULE_PARAMS)]
    + [("interleaved", "longrope", "fp16"), ("half", "dynamic", "bf16")],
)
def test_plugin_graph_matches_eager_numpy_op(layout: str, scaling: str, dtype: str) -> None:
    spec = RopeSpec(**small_spec(layout=layout, scaling=scaling, dtype=dtype))
    check_against_eager(spec, evaluator(build_rope_plugin_graph(spec), NumpyRotaryEmbedding))


@pytest.mark.skipif(not HAVE_TRITON, reason="Triton is not installed: the kernel-backed evaluation needs it")
@pytest.mark.parametrize(
    ("layout", "scaling", "dtype"),
    [
        ("half", "default", "fp32"),
        ("interleaved", "default", "fp16"),
        ("complex", "llama3", "bf16"),
        ("half", "longrope", "fp16"),
        ("interleaved", "dynamic", "fp32"),
        ("half", "yarn", "bf16"),
    ],
)
def test_plugin_graph_matches_eager_triton_op(
    layout: str, scaling: str, dtype: str, record_property: Callable[[str, object], None]
) -> None:
    spec = RopeSpec(**small_spec(layout=layout, scaling=scaling, dtype=dtype))
    record_property(
        "max_abs_err", check_against_eager(spec, evaluator(build_rope_plugin_graph(spec), TritonRotaryEmbedding))
    )


def test_plugin_graph_rejects_the_scores_artifact() -> None:
    with pytest.raises(ValueError, match="'rope' artifact only"):
        build_rope_plugin_graph(RopeSpec(**small_spec(artifact="scores")))


# --- TensorRT ------------------------------------------------------------------------------------------------------

MISSING = trt_plugin.missing()
NO_GPU = None if torch.cuda.is_available() else f"no CUDA GPU (torch {torch.__version__})"


@pytest.mark.skipif(MISSING is None, reason="TensorRT with tensorrt.plugin is installed: the real tests below run")
def test_register_without_tensorrt_says_what_is_missing() -> None:
    assert MISSING is not None and "TensorRT" in MISSING
    with pytest.raises(RuntimeUnavailable, match=r"cannot register the TensorRT plugin ropeexport::RotaryEmbedding: "):
        trt_plugin.register()


def _interpreted() -> bool:
    from ropeexport.trt.triton_rope import interpreted

    return interpreted()


needs_trt = pytest.mark.skipif(
    MISSING is not None or NO_GPU is not None, reason=f"needs TensorRT >= 10.6 and a CUDA GPU: {MISSING or NO_GPU}"
)


@pytest.mark.tensorrt
@pytest.mark.gpu
@needs_trt
def test_plugin_engine_tests_natively(run_natively: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    """The engine tests below need the kernel compiled for CUDA: rerun them in a native subprocess when interpreted."""
    if not _interpreted():
        pytest.skip("this run is native: the engine tests run directly")
    run = run_natively(__file__, "-m", "tensorrt", "-k", "not natively")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout


def _skip_if_interpreted() -> None:
    if _interpreted():
        pytest.skip("the kernel is in interpreter mode here; test_plugin_engine_tests_natively reruns this natively")


@pytest.mark.tensorrt
@pytest.mark.gpu
@needs_trt
def test_plugin_is_in_tensorrt_registry() -> None:
    import tensorrt as trt

    trt_plugin.register()
    trt_plugin.register()  # a second call is a no-op
    assert trt.get_plugin_registry().get_creator("RotaryEmbedding", "1", "ropeexport") is not None


@pytest.mark.tensorrt
@pytest.mark.gpu
@needs_trt
@pytest.mark.parametrize(
    ("layout", "scaling", "dtype"),
    [("half", "default", "fp16"), ("interleaved", "longrope", "fp32"), ("half", "dynamic", "bf16")],
)
def test_plugin_engine_matches_eager(layout: str, scaling: str, dtype: str, tmp_path: Path) -> None:
    _skip_if_interpreted()
    from ropeexport.runtimes.trt import TrtRunner

    trt_plugin.register()
    spec = RopeSpec(**small_spec(layout=layout, scaling=scaling, dtype=dtype))
    save_model(build_rope_plugin_graph(spec), tmp_path)
    with TrtRunner(tmp_path / "model.onnx") as runner:
        check_against_eager(spec, lambda feeds: [runner.infer(feeds)[n] for n in ("query_out", "key_out")])


@pytest.mark.parametrize("scaling", ["default", "dynamic"])
def test_plugin_graph_builds_and_verifies_without_tensorrt(tmp_path: Path, scaling: str) -> None:
    # ORT has no kernel for the plugin op: the build says so and verifies on onnx.reference, which carries it.
    from ropeexport import build
    from tests.cases import small_spec

    result = build(RopeSpec(**small_spec(graph="plugin", scaling=scaling)), tmp_path)
    report = result.encoding_report
    runtimes = {r.name: r for r in report.runtimes}
    assert result.passed and runtimes["ort"].status == "skipped"
    assert runtimes["onnx-reference"].status == "verified"
    assert all(g.passed for g in report.guards) and report.guards
