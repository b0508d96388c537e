from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from ropeexport.errors import RuntimeInputError, RuntimeUnavailable
from ropeexport.families.rope.export import build_rope_graph
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.graph.onnx_io import save_model
from ropeexport.runtimes import open_runner
from tests.cases import MAX_POSITIONS, small_spec
from tests.families.test_rope_export import feeds_for

pytestmark = pytest.mark.fast  # registry: the runtimes and their refusals, on small tables

GRAPHS = [
    pytest.param({"graph": g, "scaling": s}, id=f"{g}-{s}")
    for g in ("fused", "decomposed")
    for s in ("default", "longrope", "dynamic")
]


def saved(tmp_path: Path, **fields: object) -> tuple[RopeSpec, Path]:
    spec = RopeSpec(**small_spec(**fields))
    save_model(build_rope_graph(spec), tmp_path)
    return spec, tmp_path / "model.onnx"


@pytest.mark.parametrize("fields", GRAPHS)
@pytest.mark.parametrize("bad", [-1, MAX_POSITIONS, MAX_POSITIONS + 1000, -MAX_POSITIONS])
def test_runner_rejects_positions_outside_table(tmp_path: Path, fields: dict, bad: int) -> None:
    spec, path = saved(tmp_path, **fields)
    positions = np.array([[0, 1, bad]], dtype=np.int64)
    with (
        open_runner("ort", path) as runner,
        pytest.raises(RuntimeInputError, match=rf"position_ids: value {bad} .*\[0, {MAX_POSITIONS}\)"),
    ):
        runner.infer(feeds_for(spec, positions))


@pytest.mark.parametrize("fields", GRAPHS)
@pytest.mark.parametrize("bad", [-1, MAX_POSITIONS])
def test_graph_itself_fails_on_positions_outside_table(tmp_path: Path, fields: dict, bad: int) -> None:
    # Without our runner (a user's own ORT session) a bad position must still fail, never wrap like Gather does.
    spec, path = saved(tmp_path, **fields)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="out of|outside|bounds|range"):
        session.run(None, feeds_for(spec, np.array([[0, bad]], dtype=np.int64)))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f: f.pop("key"), "missing \\['key'\\]"),
        (lambda f: f.update(extra=np.zeros(1)), "unknown \\['extra'\\]"),
        (lambda f: f.update(query=f["query"].astype(np.float16)), "query: expected dtype float32"),
        (lambda f: f.update(position_ids=f["position_ids"].astype(np.int32)), "position_ids: expected dtype int64"),
        (lambda f: f.update(query=f["query"][0]), "query: expected rank 4"),
        (lambda f: f.update(query=f["query"][:, :2]), "query: dim 1 must be 4"),
        (lambda f: f.update(position_ids=f["position_ids"][:, :2]), "seq"),
    ],
)
def test_runner_rejects_feeds_that_do_not_fit(tmp_path: Path, change, message: str) -> None:
    spec, path = saved(tmp_path)
    feeds = feeds_for(spec, np.arange(5, dtype=np.int64)[None])
    change(feeds)
    with open_runner("ort", path) as runner, pytest.raises(RuntimeInputError, match=message):
        runner.infer(feeds)


def test_ort_reports_missing_bf16_kernels_and_reference_runs_them(tmp_path: Path) -> None:
    spec, path = saved(tmp_path, dtype="bf16")
    with pytest.raises(RuntimeUnavailable, match="onnxruntime .* cannot load the model"):
        open_runner("ort", path)
    with open_runner("onnx-reference", path) as runner:
        feeds = feeds_for(spec, np.arange(5, dtype=np.int64)[None])
        out = runner.infer(feeds)
    assert out["query_out"].dtype.name == "bfloat16" and out["query_out"].shape == feeds["query"].shape


def test_unknown_runtime_lists_valid_names(tmp_path: Path) -> None:
    _, path = saved(tmp_path)
    with pytest.raises(ValueError, match="allowed: ort, onnx-reference"):
        open_runner("tensorrt-typo", path)


def test_every_runtime_runs_an_artifact_or_says_why(tmp_path: Path) -> None:
    # The runtimes table (runtimes.RUNTIMES) is what --runtime takes: each one either runs a small artifact and gives
    # the float64 answer's shape, or raises RuntimeUnavailable with a reason (TensorRT without a GPU). A runtime added
    # to the table without a working runner fails here.
    from ropeexport.runtimes import RUNTIMES

    spec, path = saved(tmp_path)
    feeds = feeds_for(spec, np.arange(5, dtype=np.int64)[None])
    for name in RUNTIMES:
        try:
            with open_runner(name, path) as runner:
                out = runner.infer(feeds)
        except RuntimeUnavailable as why:
            assert str(why).strip(), name
            continue
        assert out["query_out"].shape == feeds["query"].shape, name
