"""Sandwich: the bias against the inner product of sinusoidal embeddings (built here as vectors), export -> ORT for
every artifact x dtype x graph, shift invariance, the table guard, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import numpy_helper

from ropeexport import build
from ropeexport.errors import RuntimeInputError, SpecError
from ropeexport.families.sandwich.reference import sandwich_bias
from ropeexport.families.sandwich.spec import SandwichSpec
from tests.cases import tiered

P = 512
SMALL: dict[str, Any] = {"num_heads": 3, "head_dim": 16, "max_positions": P}


def sinusoid(m: np.ndarray, dim: int, theta: float) -> np.ndarray:
    """p_m, [len(m), dim]: (sin(m w_k), cos(m w_k)) pairs with w_k = theta^(-2k/d'), k = 1..d'/2."""
    k = np.arange(1, dim // 2 + 1)
    angle = m[:, None].astype(np.float64) * theta ** (-2.0 * k / dim)
    return np.stack([np.sin(angle), np.cos(angle)], axis=-1).reshape(len(m), dim)


def paper_bias(qpos: np.ndarray, kpos: np.ndarray, dim: int, heads: int, causal: bool, theta: float = 1e4):
    """(p_i . p_j - d'/2) / (8h / H) per head h = 1..H, -inf where a causal mask hides j > i. float64 [b, H, q, k]."""
    out = []
    for q_row, k_row in zip(qpos, kpos, strict=True):
        inner = sinusoid(q_row, dim, theta) @ sinusoid(k_row, dim, theta).T - dim / 2  # [q, k]
        per_head = np.stack([inner / (8.0 * h / heads) for h in range(1, heads + 1)])
        if causal:
            per_head[:, k_row[None, :] > q_row[:, None]] = -np.inf
        out.append(per_head)
    return np.stack(out)


def run_ort(path: Path, feeds: dict[str, Any]) -> np.ndarray:
    session = ort.InferenceSession(str(path / "model.onnx"), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize(("dim", "heads"), [(16, 3), (128, 8)])
def test_bias_is_the_scaled_inner_product_of_sinusoids(tmp_path: Path, causal: bool, dim: int, heads: int) -> None:
    spec = SandwichSpec(num_heads=heads, head_dim=16, embedding_dim=dim, max_positions=P, causal=causal)
    qpos = np.array([[0, 1, 2, 37, 300], [P - 5, P - 4, P - 3, P - 2, P - 1]], np.int64)
    kpos = np.array([np.arange(0, P, 3), np.arange(P - 1, 0, -3)], np.int64)
    want = paper_bias(qpos, kpos, dim, heads, causal)
    got = sandwich_bias(spec, torch.from_numpy(qpos), torch.from_numpy(kpos)).numpy()
    # One float32 rounding of values up to d' H / 8 in magnitude (and the float64 references' own ~1e-13).
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-12)
    assert np.array_equal(np.isneginf(got), np.isneginf(want))
    built = build(spec.replace(artifact="bias"), tmp_path)
    onnx_out = run_ort(built.path, {"query_position_ids": qpos, "key_position_ids": kpos})
    np.testing.assert_allclose(onnx_out, want, rtol=1e-7, atol=1e-12)


def test_bias_at_distance_zero_is_zero_and_negative_elsewhere() -> None:
    spec = SandwichSpec(**SMALL, causal=False)
    bias = sandwich_bias(spec, torch.tensor([[100]]), torch.arange(P)[None])
    assert torch.all(bias[..., 100] == 0) and torch.all(bias[..., :100] < 0) and torch.all(bias[..., 101:] < 0)


def test_embedding_dim_defaults_to_head_dim_and_theta_matters() -> None:
    assert SandwichSpec(head_dim=48).embedding_dim == 48
    assert SandwichSpec(head_dim=48, embedding_dim=128).embedding_dim == 128
    q, k = torch.tensor([[300]]), torch.arange(300)[None]
    base = sandwich_bias(SandwichSpec(**SMALL), q, k)
    assert not torch.equal(base, sandwich_bias(SandwichSpec(**SMALL, theta=500.0), q, k))
    want = paper_bias(q.numpy(), k.numpy(), 16, 3, True, theta=500.0)
    np.testing.assert_allclose(sandwich_bias(SandwichSpec(**SMALL, theta=500.0), q, k), want, rtol=1e-7, atol=1e-12)


CASES = [(a, d, g) for a in ("bias", "scores", "attention") for d in ("fp32", "fp16") for g in ("fused", "decomposed")]


@pytest.mark.parametrize(("artifact", "dtype", "graph"), tiered(CASES, lambda c: c[1:] == ("fp32", "fused")))
def test_export_verifies_on_ort(tmp_path: Path, artifact: str, dtype: str, graph: str) -> None:
    spec = SandwichSpec(**SMALL, artifact=artifact, dtype=dtype, graph=graph)
    result = build(spec, tmp_path)
    assert result.passed, [c.data for c in result.encoding_report.comparisons]
    assert {c.reference for c in result.encoding_report.comparisons} == {"eager", "float64"}
    assert all(c.runtime == "ort" and c.elements > 0 for c in result.encoding_report.comparisons)


@pytest.mark.parametrize("artifact", ["bias", "scores", "attention"])
def test_bidirectional_form_verifies_on_ort(tmp_path: Path, artifact: str) -> None:
    assert build(SandwichSpec(**SMALL, artifact=artifact, causal=False, embedding_dim=128), tmp_path).passed


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_scores_are_shift_invariant(tmp_path: Path, causal: bool) -> None:
    path = build(SandwichSpec(**SMALL, causal=causal, artifact="scores"), tmp_path).path
    rng = np.random.default_rng(0)
    query, key = (rng.standard_normal((2, 3, n, 16), dtype=np.float32) for n in (16, 150))
    qpos = np.stack([np.arange(134, 150), np.arange(20, 36)]).astype(np.int64)
    kpos = np.stack([np.arange(0, 150), np.arange(0, 150)]).astype(np.int64)
    base = run_ort(path, {"query": query, "key": key, "query_position_ids": qpos, "key_position_ids": kpos})
    for shift in (1, 9, P - 150):
        moved = {"query": query, "key": key, "query_position_ids": qpos + shift, "key_position_ids": kpos + shift}
        np.testing.assert_array_equal(run_ort(path, moved), base)


def test_graph_rejects_positions_outside_the_table(tmp_path: Path) -> None:
    """Straight to ORT (past the runner's own check): |i - j| of these pairs is inside the table, yet they fail."""
    path = build(SandwichSpec(**SMALL, artifact="bias"), tmp_path).path
    ok = {"query_position_ids": np.array([[3]]), "key_position_ids": np.array([[0, 1, 2, 3]])}
    assert run_ort(path, ok).shape == (1, 3, 1, 4)
    for q, k in (([[-1]], [[0, 1]]), ([[P]], [[P - 1]]), ([[5]], [[4, -2]]), ([[P - 1]], [[P + 3]])):
        feeds = {"query_position_ids": np.array(q, np.int64), "key_position_ids": np.array(k, np.int64)}
        with pytest.raises(Exception, match="(?i)indices|out of|bound"):
            run_ort(path, feeds)
        with pytest.raises(RuntimeInputError):
            sandwich_bias(
                SandwichSpec(**SMALL),
                torch.from_numpy(feeds["query_position_ids"]),
                torch.from_numpy(feeds["key_position_ids"]),
            )


def test_artifact_table_grows_with_max_positions(tmp_path: Path) -> None:
    for positions in (256, 1024):
        spec = SandwichSpec(num_heads=3, head_dim=16, max_positions=positions, artifact="bias", name=f"s{positions}")
        model = onnx.load(str(build(spec, tmp_path).path / "model.onnx"))
        table = next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "sandwich_table")
        assert table.shape == (positions, 3) and table.dtype == np.float32


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"embedding_dim": 15}, "embedding_dim"),
        ({"embedding_dim": -2}, "embedding_dim"),
        ({"embedding_dim": "wide"}, "embedding_dim"),
        ({"head_dim": 15}, "embedding_dim"),  # d' defaults to an odd head_dim
        ({"theta": 1.0}, "theta"),
        ({"theta": 0.0}, "theta"),
        ({"theta": float("inf")}, "theta"),
        ({"theta": "big"}, "theta"),
        ({"num_heads": 64, "max_positions": 2**22}, "max_positions"),  # a 1 GiB table
        ({"num_heads": -1}, "num_heads"),
        ({"causal": "yes please"}, "causal"),
        ({"max_positions": 0}, "max_positions"),
    ],
)
def test_bad_fields_name_the_field(fields: dict, field: str) -> None:
    with pytest.raises(SpecError) as err:
        SandwichSpec(**fields)
    assert err.value.field == field
