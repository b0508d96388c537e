from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from ropeexport import build
from ropeexport.errors import RuntimeInputError, SpecError
from ropeexport.families.alibi.reference import alibi_bias, alibi_slopes
from ropeexport.families.alibi.spec import AlibiSpec
from ropeexport.runtimes import open_runner
from tests.cases import tiered


def paper_slopes(n: int) -> list[float]:
    """The recipe from the ALiBi authors' code (Press et al. 2022), written out independently."""

    def power_of_two(m: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(m) - 3)))
        return [start * start**i for i in range(m)]

    if math.log2(n).is_integer():
        return power_of_two(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_two(closest) + paper_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.fast
@pytest.mark.parametrize("heads", range(1, 129))
def test_slopes_follow_the_paper_recipe(heads: int) -> None:
    np.testing.assert_allclose(alibi_slopes(heads), paper_slopes(heads), rtol=1e-14, atol=0)


@pytest.mark.fast
@pytest.mark.parametrize(("heads", "first_slopes"), [(8, [1 / 2, 1 / 4, 1 / 8]), (16, [2**-0.5, 1 / 2, 2**-1.5])])
def test_power_of_two_slopes_are_the_geometric_sequence(heads: int, first_slopes: list[float]) -> None:
    # The paper: for 8 heads the slopes are 1/2, 1/4, ..., 1/256; for 16 heads 1/sqrt(2), 1/2, ...
    np.testing.assert_allclose(alibi_slopes(heads)[:3], first_slopes, rtol=1e-15)
    assert alibi_slopes(heads)[-1] == pytest.approx(2.0**-8)


@pytest.mark.fast
def test_non_power_of_two_takes_every_other_slope_of_the_doubled_set() -> None:
    # 12 heads: the 8 slopes 2^-1..2^-8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 (odd entries of the 16-head set).
    expected = [2.0**-k for k in range(1, 9)] + [2.0 ** -(k + 0.5) for k in range(4)]
    np.testing.assert_allclose(alibi_slopes(12), expected, rtol=1e-15)


@pytest.mark.fast
@pytest.mark.parametrize("causal", [True, False])
def test_eager_bias_is_minus_m_times_distance(causal: bool) -> None:
    spec = AlibiSpec(num_heads=6, causal=causal, max_positions=64)
    qpos = torch.tensor([[0, 3, 10, 11]])
    kpos = torch.tensor([[0, 1, 2, 3, 10, 11, 12]])
    bias = alibi_bias(spec, qpos, kpos).numpy()
    slopes = paper_slopes(6)
    for h in range(6):
        for a, i in enumerate(qpos[0].tolist()):
            for b, j in enumerate(kpos[0].tolist()):
                if causal and j > i:
                    assert bias[0, h, a, b] == -np.inf
                else:
                    expected = -slopes[h] * ((i - j) if causal else abs(i - j))
                    assert bias[0, h, a, b] == pytest.approx(expected, rel=1e-6, abs=1e-6)


CASES = [
    pytest.param(artifact, dtype, graph, causal, id=f"{artifact}-{dtype}-{graph}-{'causal' if causal else 'bidir'}")
    for artifact in ("bias", "scores", "attention")
    for dtype in ("fp32", "fp16")
    for graph in ("fused", "decomposed")
    for causal in (True, False)
]


@pytest.mark.parametrize(("artifact", "dtype", "graph", "causal"),
                         tiered(CASES, lambda c: c[1:] == ("fp32", "fused", True)))  # fmt: skip
def test_export_runs_in_ort_and_verifies(tmp_path: Path, artifact: str, dtype: str, graph: str, causal: bool) -> None:
    spec = AlibiSpec(
        artifact=artifact, dtype=dtype, graph=graph, causal=causal, num_heads=12, head_dim=16, max_positions=1024
    )
    result = build(spec, tmp_path)
    assert result.passed, [c.data for c in result.encoding_report.comparisons if not c.passed]
    assert {c.reference for c in result.encoding_report.comparisons} == {"eager", "float64"}
    if graph == "fused" and artifact == "attention":
        import onnx

        ops = {n.op_type for n in onnx.load(str(result.path / "model.onnx")).graph.node}
        assert "Attention" in ops


def test_artifact_size_does_not_grow_with_max_positions(tmp_path: Path) -> None:
    sizes = {}
    for max_positions in (2048, 131072):
        spec = AlibiSpec(name=f"a{max_positions}", num_heads=16, max_positions=max_positions)
        result = build(spec, tmp_path)
        assert result.passed
        model = onnx.load(str(result.path / "model.onnx"))
        stored = sum(t.ByteSize() for t in model.graph.initializer)
        sizes[max_positions] = (stored, (result.path / "model.onnx").stat().st_size)
    # What is stored is the same: only decimal max_positions in names and metadata differ (a few bytes).
    assert sizes[2048][0] == sizes[131072][0]
    assert abs(sizes[2048][1] - sizes[131072][1]) <= 16
    assert sizes[131072][1] < 8192  # slopes, the graph, metadata and the two range guards


@pytest.mark.parametrize("causal", [True, False])
def test_scores_are_unchanged_when_every_position_shifts(tmp_path: Path, causal: bool) -> None:
    spec = AlibiSpec(artifact="scores", causal=causal, num_heads=4, head_dim=8, max_positions=4096)
    result = build(spec, tmp_path)
    session = ort.InferenceSession(str(result.path / "model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 4, 5, 8), dtype=np.float32)
    k = rng.standard_normal((1, 4, 7, 8), dtype=np.float32)
    qpos, kpos = np.array([[3, 4, 5, 6, 7]]), np.array([[0, 1, 2, 3, 4, 5, 6]])

    def run(shift):
        return session.run(
            None,
            {
                "query": q,
                "key": k,
                "query_position_ids": qpos + shift,  # noqa: E731
                "key_position_ids": kpos + shift,
            },
        )[0]

    base = run(0)
    for shift in (1, 100, 3000):
        np.testing.assert_allclose(run(shift), base, rtol=1e-6, atol=1e-5)
    assert np.isneginf(base).any() == causal


def test_positions_past_max_positions_raise_in_the_runner(tmp_path: Path) -> None:
    result = build(AlibiSpec(num_heads=4, max_positions=128), tmp_path)
    with open_runner("ort", result.path / "model.onnx") as runner:
        with pytest.raises(RuntimeInputError, match=r"key_position_ids: value 128 .*\[0, 128\)"):
            runner.infer({"query_position_ids": np.array([[5]]), "key_position_ids": np.array([[0, 128]])})
        with pytest.raises(RuntimeInputError, match="query_position_ids: value -1"):
            runner.infer({"query_position_ids": np.array([[-1]]), "key_position_ids": np.array([[0]])})


@pytest.mark.fast
@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"num_heads": 0}, "num_heads"),
        ({"num_heads": -3}, "num_heads"),
        ({"head_dim": 0}, "head_dim"),
        ({"causal": "maybe"}, "causal"),
        ({"artifact": "rope"}, "artifact"),
        ({"max_positions": 0}, "max_positions"),
        ({"slope_scale": 0}, "slope_scale"),
        ({"slope_scale": float("inf")}, "slope_scale"),
    ],
)
def test_bad_fields_are_rejected(fields: dict, field: str) -> None:
    with pytest.raises(SpecError) as err:
        AlibiSpec(**fields)
    assert err.value.field == field


def test_slope_scale_scales_the_bias_and_is_verified(tmp_path: Path) -> None:
    """Falcon-RW's slopes are m_h / sqrt(head_dim); the stored slopes are checked against the scaled recipe."""
    spec = AlibiSpec(num_heads=12, head_dim=64, slope_scale=0.125, max_positions=256)
    qpos, kpos = torch.tensor([[5, 9]]), torch.tensor([[0, 1, 2, 9]])
    plain = alibi_bias(spec.replace(slope_scale=1.0), qpos, kpos)
    scaled = alibi_bias(spec, qpos, kpos)
    finite = torch.isfinite(plain)
    assert torch.allclose(scaled[finite], plain[finite] * 0.125, rtol=1e-6)
    result = build(spec, tmp_path)
    assert result.passed and result.encoding_report.tables[0].max_ulp <= 0.5


@pytest.mark.fast
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("artifact", ["bias", "scores", "attention"])
def test_single_pass_is_bit_identical_to_the_general_path(artifact: str, causal: bool, dtype: str) -> None:
    """The one-pass bias drops the clamp, Expand and the [b, H, q, k] Where, and changes no bit."""
    from ropeexport.catalog import recipe_for
    from ropeexport.families.alibi.export import alibi_bias_nodes

    spec = AlibiSpec(artifact=artifact, num_heads=12, head_dim=16, causal=causal, max_positions=4096, dtype=dtype)
    fast = recipe_for(spec).export(spec)
    builder = {"bias": "build_bias_graph", "scores": "build_scores_graph", "attention": "build_attention_graph"}
    import ropeexport.families.bias.export as attention

    general = getattr(attention, builder[artifact])(spec, alibi_bias_nodes)
    ops = [n.op_type for n in fast.graph.node]
    single = dtype == "fp32" or artifact == "bias"  # fp16 scores/attention keep the general path (see alibi.py)
    assert ("Max" not in ops and "Expand" not in ops and "Identity" not in ops) == single
    rng = np.random.default_rng(0)
    feeds = {
        "query_position_ids": rng.integers(0, 4096, (2, 7)),
        "key_position_ids": rng.integers(0, 4096, (2, 9)),
    }
    if artifact != "bias":
        for name, length in (("query", 7), ("key", 9), ("value", 9)):
            if name == "value" and artifact == "scores":
                continue
            feeds[name] = rng.standard_normal((2, 12, length, 16)).astype(np.float32 if dtype == "fp32" else np.float16)
    run = lambda m: ort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]  # noqa: E731
    a, b = run(fast), run(general)
    assert a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


@pytest.mark.fast
def test_biases_the_clamp_could_change_take_the_general_path() -> None:
    from ropeexport.catalog import recipe_for

    for spec in (
        AlibiSpec(dtype="fp16", num_heads=8, max_positions=131072),  # 0.5 x 131071 is past fp16's 65504
        AlibiSpec(num_heads=8, slope_scale=1e36, max_positions=131072),
        AlibiSpec(num_heads=4, slope_scale=1e-46, max_positions=64),  # float32 slopes round to 0: 0 x inf is NaN
        AlibiSpec(num_heads=1, slope_scale=3.4844912295785354e39, max_positions=26),  # float32 product overflows
    ):
        ops = [n.op_type for n in recipe_for(spec).export(spec).graph.node]
        assert "Max" in ops, spec  # the clamp to the finite range stays where it can act
