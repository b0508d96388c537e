from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ropeexport as rx
from ropeexport.errors import RuntimeInputError
from ropeexport.graph.onnx_io import save_model
from ropeexport.runtimes.iobinding import IoBindingRunner, session_options
from ropeexport.runtimes.ort import OrtRunner

MAX_POSITIONS = 256
NP = {"fp32": np.float32, "fp16": np.float16}


def saved(tmp_path: Path, graph: str = "fused", dtype: str = "fp32") -> Path:
    spec = rx.spec("rope", head_dim=64, num_heads=4, max_positions=MAX_POSITIONS, graph=graph, dtype=dtype)
    save_model(rx.export(spec), tmp_path)
    return tmp_path / "model.onnx"


def feeds(positions: np.ndarray, dtype: str = "fp32", seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    b, s = positions.shape
    return {
        "query": rng.standard_normal((b, 4, s, 64), dtype=np.float32).astype(NP[dtype]),
        "key": rng.standard_normal((b, 4, s, 64), dtype=np.float32).astype(NP[dtype]),
        "position_ids": positions.astype(np.int64),
    }


def assert_bitwise_equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert list(got) == list(want)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        assert got[name].tobytes() == want[name].tobytes(), name  # bit for bit, not within a tolerance


PREFILL = np.array([[0, 1, 2, 3, 4, 5, 6, MAX_POSITIONS - 1], [7, 100, 200, 254, 3, 9, 11, 12]])


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("graph", ["fused", "decomposed"])
@pytest.mark.parametrize("threads", [1, 2])
def test_outputs_equal_ort_runner_bit_for_bit(tmp_path: Path, graph: str, dtype: str, threads: int) -> None:
    path = saved(tmp_path, graph, dtype)
    x = feeds(PREFILL, dtype)
    with OrtRunner(path, providers=["CPUExecutionProvider"]) as plain:
        want = plain.infer(x)
    with IoBindingRunner(path, threads=threads) as runner:
        assert_bitwise_equal(runner.infer(x), want)
        runner.bind(x)
        assert_bitwise_equal(runner.run(), want)
        assert_bitwise_equal(runner.run(), want)  # a second call into the same buffers


def test_model_bytes_and_explicit_options(tmp_path: Path) -> None:
    path = saved(tmp_path)
    x = feeds(PREFILL)
    with OrtRunner(path, providers=["CPUExecutionProvider"]) as plain:
        want = plain.infer(x)
    runner = IoBindingRunner(path.read_bytes(), session_options(1))
    assert runner.model_path is None
    assert_bitwise_equal(runner.infer(x), want)


def test_outputs_are_preallocated_and_reused(tmp_path: Path) -> None:
    path = saved(tmp_path)
    runner = IoBindingRunner(path, threads=1)
    runner.bind(feeds(PREFILL))
    first = runner.outputs
    arrays = {name: array for name, array in first.items()}
    out = runner.run()
    assert out is first and all(out[n] is arrays[n] for n in arrays)  # written in place, nothing allocated
    runner.bind(feeds(PREFILL, seed=1))  # same shapes: the same output arrays are bound again
    assert all(runner.outputs[n] is arrays[n] for n in arrays)
    decode = np.array([[250], [3]])
    runner.bind(feeds(decode))  # new shapes: new outputs of the new shape
    assert runner.outputs["query_out"].shape == (2, 4, 1, 64)
    with OrtRunner(path, providers=["CPUExecutionProvider"]) as plain:
        assert_bitwise_equal(runner.run(), plain.infer(feeds(decode)))


def test_in_place_writes_to_bound_feeds_are_seen(tmp_path: Path) -> None:
    # The serving loop: overwrite the bound input arrays, run again, no rebinding.
    path = saved(tmp_path)
    runner = IoBindingRunner(path, threads=1)
    x = feeds(PREFILL)
    runner.bind(x)
    runner.run()
    y = feeds(PREFILL[:, ::-1].copy(), seed=3)
    for name, array in y.items():
        runner.feeds[name][...] = array
    with OrtRunner(path, providers=["CPUExecutionProvider"]) as plain:
        assert_bitwise_equal(runner.run(), plain.infer(y))


@pytest.mark.parametrize("bad", [-1, MAX_POSITIONS, MAX_POSITIONS + 1000, -MAX_POSITIONS])
def test_refuses_positions_outside_table(tmp_path: Path, bad: int) -> None:
    path = saved(tmp_path)
    x = feeds(np.array([[0, 1, bad]]))
    message = rf"position_ids: value {bad} .*\[0, {MAX_POSITIONS}\)"
    with OrtRunner(path, providers=["CPUExecutionProvider"]) as plain, pytest.raises(RuntimeInputError) as refused:
        plain.infer(x)
    runner = IoBindingRunner(path, threads=1)
    with pytest.raises(RuntimeInputError, match=message) as ours:
        runner.infer(x)
    assert str(ours.value) == str(refused.value)  # the same refusal as the plain runner's
    with pytest.raises(RuntimeInputError, match=message):
        runner.bind(x)
    with pytest.raises(RuntimeError, match="before bind"):
        runner.run()  # the refused feeds were never bound


def test_refuses_feeds_that_do_not_fit(tmp_path: Path) -> None:
    runner = IoBindingRunner(saved(tmp_path), threads=1)
    x = feeds(PREFILL)
    x["query"] = x["query"].astype(np.float16)
    with pytest.raises(RuntimeInputError, match="query: expected dtype float32"):
        runner.bind(x)
