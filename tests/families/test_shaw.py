from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from safetensors.numpy import save_file

from ropeexport import build
from ropeexport.errors import RuntimeInputError, SpecError
from ropeexport.families.shaw.reference import shaw_attention, shaw_scores, shaw_weights
from ropeexport.families.shaw.spec import ShawSpec
from ropeexport.runtimes import open_runner
from tests.cases import tiered

H, D, K = 2, 4, 2  # heads, head_dim, clip of the tiny literal cases


def session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path / "model.onnx"), providers=["CPUExecutionProvider"])


def feeds(q: np.ndarray, k: np.ndarray, qpos: list[int], kpos: list[int], v: np.ndarray | None = None) -> dict:
    out = {"query": q, "key": k, "query_position_ids": np.array([qpos]), "key_position_ids": np.array([kpos])}
    return out | ({"value": v} if v is not None else {})


def literal_scores(q, k, a_key, qpos, kpos, clip, causal):
    """e_ij = q_i . (k_j + a^K_clip(j-i)) / sqrt(d), one element at a time (Shaw et al. 2018, eqs. 3-4)."""
    d = q.shape[-1]
    out = np.zeros((q.shape[0], len(qpos), len(kpos)))
    for h in range(q.shape[0]):
        for a, i in enumerate(qpos):
            for b, j in enumerate(kpos):
                r = max(-clip, min(clip, j - i))
                total = 0.0
                for c in range(d):
                    total += float(q[h, a, c]) * (float(k[h, b, c]) + a_key[r + clip][c])
                out[h, a, b] = -math.inf if causal and j > i else total / math.sqrt(d)
    return out


def literal_attention(scores, v, a_value, qpos, kpos, clip):
    """z_i = sum_j softmax_j(e_ij) (v_j + a^V_clip(j-i)) (eq. 3), one element at a time."""
    heads, d = v.shape[0], v.shape[-1]
    out = np.zeros((heads, len(qpos), d))
    for h in range(heads):
        for a, i in enumerate(qpos):
            top = max(scores[h, a])
            exps = [math.exp(s - top) if s != -math.inf else 0.0 for s in scores[h, a]]
            for b, j in enumerate(kpos):
                r = max(-clip, min(clip, j - i))
                for c in range(d):
                    out[h, a, c] += exps[b] / sum(exps) * (float(v[h, b, c]) + a_value[r + clip][c])
    return out


def tiny(seed: int, qlen: int, klen: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((1, H, n, D), dtype=np.float32) for n in (qlen, klen, klen))


# Distances j - i from -6 to +5: well past the clip (2) on both sides.
QPOS, KPOS = [3, 6, 9], [0, 2, 3, 4, 5, 8, 11]


@pytest.mark.parametrize("causal", [True, False])
def test_scores_follow_the_paper_formula(tmp_path: Path, causal: bool) -> None:
    spec = ShawSpec(num_heads=H, head_dim=D, clip=K, causal=causal, max_positions=16)
    q, k, _ = tiny(1, len(QPOS), len(KPOS))
    a_key = shaw_weights(spec)["relative_key"].tolist()
    expected = literal_scores(q[0], k[0], a_key, QPOS, KPOS, K, causal)
    result = build(spec, tmp_path)
    got = session(result.path).run(None, feeds(q, k, QPOS, KPOS))[0][0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    eager = shaw_scores(spec, *map(torch.from_numpy, (q, k)), torch.tensor([QPOS]), torch.tensor([KPOS]))
    np.testing.assert_allclose(eager.numpy()[0], expected, rtol=1e-5, atol=1e-5)
    assert np.isneginf(got).any() == causal


@pytest.mark.parametrize("graph", ["fused", "decomposed"])
@pytest.mark.parametrize("causal", [True, False])
def test_attention_follows_the_paper_formula(tmp_path: Path, graph: str, causal: bool) -> None:
    spec = ShawSpec(artifact="attention", graph=graph, num_heads=H, head_dim=D, clip=K, causal=causal, max_positions=16)
    q, k, v = tiny(2, len(QPOS), len(KPOS))
    w = shaw_weights(spec)
    scores = literal_scores(q[0], k[0], w["relative_key"].tolist(), QPOS, KPOS, K, causal)
    expected = literal_attention(scores, v[0], w["relative_value"].tolist(), QPOS, KPOS, K)
    result = build(spec, tmp_path)
    got = session(result.path).run(None, feeds(q, k, QPOS, KPOS, v))[0][0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    eager = shaw_attention(spec, tq, tk, tv, torch.tensor([QPOS]), torch.tensor([KPOS]))
    np.testing.assert_allclose(eager.numpy()[0], expected, rtol=1e-5, atol=1e-5)


def test_distances_past_the_clip_use_the_end_rows(tmp_path: Path) -> None:
    # With k = 0 every score is q . a^K_r / sqrt(d): a function of the clipped distance alone.
    spec = ShawSpec(num_heads=1, head_dim=D, clip=3, causal=False, max_positions=64)
    result = build(spec, tmp_path)
    q = np.random.default_rng(3).standard_normal((1, 1, 1, D), dtype=np.float32)
    kpos = list(range(0, 41))  # j - i from -20 to +20 around i = 20
    got = session(result.path).run(None, feeds(q, np.zeros((1, 1, 41, D), np.float32), [20], kpos))[0][0, 0, 0]
    by_distance = {j - 20: got[b] for b, j in enumerate(kpos)}
    a_key = shaw_weights(spec)["relative_key"]
    for dist, score in by_distance.items():
        row = min(3, max(-3, dist)) + 3
        assert score == pytest.approx(float(q[0, 0, 0] @ a_key[row]) / math.sqrt(D), abs=1e-5)
    assert len({round(float(s), 5) for s in by_distance.values()}) == 7  # 2k + 1 distinct rows, no more
    assert by_distance[20] == by_distance[4] == by_distance[3] != by_distance[2]
    assert by_distance[-20] == by_distance[-4] == by_distance[-3] != by_distance[-2]


CASES = [
    pytest.param(artifact, dtype, graph, causal, id=f"{artifact}-{dtype}-{graph}-{'causal' if causal else 'bidir'}")
    for artifact in ("scores", "attention")
    for dtype in ("fp32", "fp16")
    for graph in ("fused", "decomposed")
    for causal in (True, False)
]


@pytest.mark.parametrize(("artifact", "dtype", "graph", "causal"),
                         tiered(CASES, lambda c: c[1:] == ("fp32", "fused", True)))  # fmt: skip
def test_export_runs_in_ort_and_verifies(tmp_path: Path, artifact: str, dtype: str, graph: str, causal: bool) -> None:
    spec = ShawSpec(
        artifact=artifact, dtype=dtype, graph=graph, causal=causal, num_heads=4, head_dim=16, clip=5, max_positions=128
    )
    result = build(spec, tmp_path)
    assert result.passed, [c.data for c in result.encoding_report.comparisons if not c.passed]
    assert {c.reference for c in result.encoding_report.comparisons} == {"eager", "float64"}
    model = onnx.load(str(result.path / "model.onnx"))
    assert model.opset_import[0].version == (23 if graph == "fused" else 17)
    ops = {n.op_type for n in model.graph.node}
    assert ("Attention" in ops) == (graph == "fused" and artifact == "attention")


@pytest.mark.parametrize("artifact", ["scores", "attention"])
@pytest.mark.parametrize("causal", [True, False])
def test_outputs_are_unchanged_when_every_position_shifts(tmp_path: Path, artifact: str, causal: bool) -> None:
    spec = ShawSpec(artifact=artifact, causal=causal, num_heads=2, head_dim=8, clip=3, max_positions=4096)
    run = session(build(spec, tmp_path).path).run
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1, 2, n, 8), dtype=np.float32) for n in (5, 9, 9))
    qpos, kpos = [4, 5, 6, 7, 8], list(range(9))
    base = run(None, feeds(q, k, qpos, kpos, v if artifact == "attention" else None))[0]
    for shift in (1, 37, 4000):
        moved = [p + shift for p in qpos], [p + shift for p in kpos]
        shifted = run(None, feeds(q, k, *moved, v if artifact == "attention" else None))[0]
        np.testing.assert_allclose(shifted, base, rtol=1e-6, atol=1e-6)
    # ... while moving the queries alone changes them: the test can fail.
    other = run(None, feeds(q, k, [p + 2 for p in qpos], kpos, v if artifact == "attention" else None))[0]
    finite = np.isfinite(other) & np.isfinite(base)
    assert np.abs(other[finite] - base[finite]).max() > 1e-3


@pytest.mark.parametrize(("where", "value"), [("query_position_ids", -1), ("key_position_ids", 64)])
def test_positions_outside_the_range_raise_in_the_runner(tmp_path: Path, where: str, value: int) -> None:
    result = build(ShawSpec(num_heads=2, head_dim=8, clip=2, max_positions=64), tmp_path)
    q, k = np.zeros((1, 2, 1, 8), np.float32), np.zeros((1, 2, 3, 8), np.float32)
    call = feeds(q, k, [63], [0, 1, 2])
    call[where][0, 0] = value
    with open_runner("ort", result.path / "model.onnx") as runner:
        with pytest.raises(RuntimeInputError, match=rf"{where}: value {value} .*\[0, 64\)"):
            runner.infer(call)


def test_weights_file_is_used(tmp_path: Path) -> None:
    rows = np.arange(5 * D, dtype=np.float32).reshape(5, D) / 10  # clip 2: 2k + 1 = 5 rows
    path = tmp_path / "w.safetensors"
    save_file({"relative_key": rows, "relative_value": -rows}, str(path))
    spec = ShawSpec(num_heads=H, head_dim=D, clip=K, weights=str(path), max_positions=16)
    np.testing.assert_array_equal(shaw_weights(spec)["relative_key"], rows)
    np.testing.assert_array_equal(shaw_weights(spec)["relative_value"], -rows)
    q, k, _ = tiny(6, len(QPOS), len(KPOS))
    result = build(spec, tmp_path / "out")
    assert result.passed
    got = session(result.path).run(None, feeds(q, k, QPOS, KPOS))[0][0]
    np.testing.assert_allclose(got, literal_scores(q[0], k[0], rows.tolist(), QPOS, KPOS, K, True), atol=1e-5)
    assert result.encoding_report.spec["weights"] == str(path)


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ({"relative_key": np.zeros((5, D), np.float32)}, "lacks tensor.*relative_value"),
        (
            {"relative_key": np.zeros((5, D), np.float32), "relative_value": np.zeros((7, D), np.float32)},
            r"relative_value.*shape \[7, 4\], expected \[5, 4\]",
        ),
        (
            {"relative_key": np.zeros((5, D + 1), np.float32), "relative_value": np.zeros((5, D), np.float32)},
            r"relative_key.*shape \[5, 5\], expected \[5, 4\]",
        ),
    ],
)
def test_bad_weights_files_are_spec_errors(tmp_path: Path, tensors: dict, message: str) -> None:
    path = tmp_path / "w.safetensors"
    save_file(tensors, str(path))
    with pytest.raises(SpecError, match=message) as info:
        ShawSpec(num_heads=H, head_dim=D, clip=K, weights=str(path))
    assert info.value.field == "weights"


def test_a_missing_weights_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read") as info:
        ShawSpec(weights=str(tmp_path / "absent.safetensors"))
    assert info.value.field == "weights"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("clip", 0),
        ("clip", -3),
        ("clip", "two"),
        ("clip", 10**6),
        ("num_heads", 0),
        ("head_dim", 0),
        ("causal", "maybe"),
        ("seed", -1),
        ("weights", 3),
        ("artifact", "bias"),
        ("dtype", "fp8"),
    ],
)
def test_bad_fields_are_spec_errors_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(SpecError) as info:
        ShawSpec(**{field: value})
    assert info.value.field == field


def test_tables_past_the_size_limit_are_refused() -> None:
    with pytest.raises(SpecError, match="2\\^27") as info:
        ShawSpec(clip=60000, head_dim=4096)
    assert info.value.field == "clip"


def test_seed_decides_the_seeded_tables() -> None:
    a, b = (shaw_weights(ShawSpec(head_dim=D, clip=K, seed=s))["relative_key"] for s in (0, 1))
    assert a.shape == (5, D) and not np.array_equal(a, b)
    np.testing.assert_array_equal(a, shaw_weights(ShawSpec(head_dim=D, clip=K, seed=0))["relative_key"])
