from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from ropeexport import build
from ropeexport.families.rope.spec import RopeSpec
from tests.cases import small_spec, tiered

CASES = [
    pytest.param(layout, scaling, graph, dtype, id=f"{layout}-{scaling}-{graph}-{dtype}")
    for layout, scaling, graph, dtype in itertools.product(
        ("half", "interleaved"), ("default", "dynamic", "longrope", "yarn"), ("fused", "decomposed"), ("fp32", "fp16")
    )
]


@pytest.mark.parametrize(("layout", "scaling", "graph", "dtype"),
                         tiered(CASES, lambda c: c[0] == "half" and c[2:] == ("fused", "fp32")))  # fmt: skip
def test_scores_artifact_verifies(tmp_path: Path, layout: str, scaling: str, graph: str, dtype: str) -> None:
    spec = RopeSpec(**small_spec(artifact="scores", layout=layout, scaling=scaling, graph=graph, dtype=dtype))
    result = build(spec, tmp_path)
    assert result.passed, [c.data for c in result.encoding_report.comparisons if not c.passed]
    assert all(g.passed for g in result.encoding_report.guards) and len(result.encoding_report.guards) == 4


def test_scores_equal_the_literal_dot_product_of_rotated_vectors(tmp_path: Path) -> None:
    # <R_i q, R_j k> / sqrt(d), with R written from the seed's block-diagonal form (interleaved pairs, full rotation).
    spec = RopeSpec(artifact="scores", layout="interleaved", head_dim=8, num_heads=2, max_positions=64)
    result = build(spec, tmp_path)
    session = ort.InferenceSession(str(result.path / "model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 2, 3, 8), dtype=np.float32)
    k = rng.standard_normal((1, 2, 4, 8), dtype=np.float32)
    qpos, kpos = np.array([[5, 17, 63]]), np.array([[0, 5, 40, 63]])
    got = session.run(None, {"query": q, "key": k, "query_position_ids": qpos, "key_position_ids": kpos})[0]
    theta = 10000.0 ** (-np.arange(0, 8, 2) / 8)

    def rotation(m: int) -> np.ndarray:
        r = np.zeros((8, 8))
        for i, t in enumerate(theta):
            c, s = np.cos(m * t), np.sin(m * t)
            r[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, -s], [s, c]]
        return r

    for h in range(2):
        for a, i in enumerate(qpos[0]):
            for b, j in enumerate(kpos[0]):
                want = (rotation(i) @ q[0, h, a]) @ (rotation(j) @ k[0, h, b]) / np.sqrt(8)
                assert got[0, h, a, b] == pytest.approx(want, abs=2e-5)


@pytest.mark.parametrize("graph", ["fused", "decomposed"])
def test_scores_depend_only_on_relative_position(tmp_path: Path, graph: str) -> None:
    spec = RopeSpec(**small_spec(artifact="scores", graph=graph))
    result = build(spec, tmp_path)
    session = ort.InferenceSession(str(result.path / "model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(2)
    q = rng.standard_normal((1, spec.num_heads, 4, spec.head_dim), dtype=np.float32)
    k = rng.standard_normal((1, spec.num_kv_heads, 6, spec.head_dim), dtype=np.float32)
    qpos, kpos = np.array([[2, 3, 4, 5]]), np.array([[0, 1, 2, 3, 4, 5]])

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
    for shift in (1, 37, 200):
        np.testing.assert_allclose(run(shift), base, atol=2e-5)


def test_gqa_query_heads_share_their_key_head(tmp_path: Path) -> None:
    spec = RopeSpec(artifact="scores", head_dim=8, num_heads=4, num_kv_heads=2, max_positions=32)
    result = build(spec, tmp_path)
    session = ort.InferenceSession(str(result.path / "model.onnx"), providers=["CPUExecutionProvider"])
    q = np.tile(np.random.default_rng(3).standard_normal((1, 1, 2, 8), dtype=np.float32), (1, 4, 1, 1))
    k = np.random.default_rng(4).standard_normal((1, 2, 3, 8), dtype=np.float32)
    pos = {"query_position_ids": np.array([[1, 2]]), "key_position_ids": np.array([[0, 1, 2]])}
    scores = session.run(None, {"query": q, "key": k, **pos})[0]
    # Same query in every head: heads 0-1 meet key head 0, heads 2-3 key head 1.
    np.testing.assert_array_equal(scores[0, 0], scores[0, 1])
    np.testing.assert_array_equal(scores[0, 2], scores[0, 3])
    assert np.abs(scores[0, 0] - scores[0, 2]).max() > 1e-3
