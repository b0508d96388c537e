from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import numpy_helper
from safetensors.numpy import load_file, save_file

from ropeexport import build
from ropeexport.errors import RuntimeInputError, SpecError
from ropeexport.families.t5.buckets import relative_buckets as t5_bucket
from ropeexport.families.tupe.reference import bucket_map, tupe_scores, tupe_weights
from ropeexport.families.tupe.spec import TupeSpec
from ropeexport.runtimes import open_runner
from tests.cases import tiered

H, D, DM, P = 2, 4, 6, 24  # heads, head_dim, d_model, max_positions of the tiny literal cases
SMALL = {"num_heads": H, "head_dim": D, "d_model": DM, "max_positions": P, "num_buckets": 16, "max_distance": 12}


def literal_bucket(rel: int, num_buckets: int, max_distance: int, bidirectional: bool) -> int:
    """T5's relative position bucket (Raffel et al. 2020; HF ``_relative_position_bucket``), for one j - i."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        if rel > 0:
            bucket += num_buckets
        n = abs(rel)
    else:
        n = max(-rel, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return bucket + n
    large = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact))
    return bucket + min(large, num_buckets - 1)


def literal_scores(spec: TupeSpec, w: dict, q: np.ndarray, k: np.ndarray, qpos: list[int], kpos: list[int]):
    """alpha_ij = (q.k + (p_i U^Q)(p_j U^K)^T) / sqrt(2d) + b_(j-i) per head, one element at a time (eqs. 7-8)."""
    p, uq, uk, rb = w["position_embeddings"], w["pos_query"], w["pos_key"], w["relative_bias"]
    d = spec.head_dim
    out = np.zeros((spec.num_heads, len(qpos), len(kpos)))
    for h in range(spec.num_heads):
        for a, i in enumerate(qpos):
            for b, j in enumerate(kpos):
                content = sum(float(q[h, a, c]) * float(k[h, b, c]) for c in range(d))
                untied = 0.0
                for c in range(d):
                    pi = sum(p[i, m] * uq[m, h * d + c] for m in range(spec.d_model))
                    pj = sum(p[j, m] * uk[m, h * d + c] for m in range(spec.d_model))
                    untied += pi * pj
                bias = rb[literal_bucket(j - i, spec.num_buckets, spec.max_distance, spec.bidirectional), h]
                value = content / math.sqrt(2 * d) + untied / math.sqrt(2 * d) + bias
                out[h, a, b] = -math.inf if spec.causal and j > i else value
    return out


def session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path / "model.onnx"), providers=["CPUExecutionProvider"])


def call(q: np.ndarray, k: np.ndarray, qpos: list[int], kpos: list[int]) -> dict[str, np.ndarray]:
    return {"query": q, "key": k, "query_position_ids": np.array([qpos]), "key_position_ids": np.array([kpos])}


def tiny(seed: int, qlen: int, klen: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((1, H, n, D), dtype=np.float32) for n in (qlen, klen))


QPOS, KPOS = [0, 7, 15, 23], [0, 1, 4, 6, 7, 9, 13, 18, 21, 23]  # j - i from -23 to +23, past max_distance


@pytest.mark.parametrize(("causal", "bidirectional"), [(False, True), (True, False), (False, False)])
def test_scores_are_the_three_terms_of_the_paper(tmp_path: Path, causal: bool, bidirectional: bool) -> None:
    spec = TupeSpec(**SMALL, causal=causal, bidirectional=bidirectional)
    q, k = tiny(1, len(QPOS), len(KPOS))
    expected = literal_scores(spec, tupe_weights(spec), q[0], k[0], QPOS, KPOS)
    got = session(build(spec, tmp_path).path).run(None, call(q, k, QPOS, KPOS))[0][0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    eager = tupe_scores(spec, torch.from_numpy(q), torch.from_numpy(k), torch.tensor([QPOS]), torch.tensor([KPOS]))
    np.testing.assert_allclose(eager.numpy()[0], expected, rtol=1e-5, atol=1e-5)


def _weights_file(path: Path, **zero: bool) -> Path:
    rng = np.random.default_rng(7)
    tensors = {
        "position_embeddings": rng.standard_normal((P, DM)),
        "pos_query": rng.standard_normal((DM, H * D)) / 2,
        "pos_key": rng.standard_normal((DM, H * D)) / 2,
        "relative_bias": rng.standard_normal((16, H)),
    }
    tensors = {n: (np.zeros_like(t) if zero.get(n) else t).astype(np.float32) for n, t in tensors.items()}
    save_file(tensors, str(path))
    return path


def test_each_term_alone(tmp_path: Path) -> None:
    # The weights files sit in tmp_path; the artifacts go to a tree of their own (a folder holding other files is
    # not one: build refuses it).
    q, k = tiny(2, len(QPOS), len(KPOS))
    zeros = np.zeros_like(q), np.zeros_like(k)
    # Content alone (no position projections, no bias): q . k / sqrt(2d), TUPE's scale, not 1/sqrt(d).
    path = _weights_file(tmp_path / "content.safetensors", pos_query=True, relative_bias=True)
    run = session(build(TupeSpec(**SMALL, weights=str(path), name="content"), tmp_path / "out").path).run
    content = run(None, call(q, k, QPOS, KPOS))[0][0]
    np.testing.assert_allclose(content, np.einsum("hid,hjd->hij", q[0], k[0]) / math.sqrt(2 * D), rtol=1e-5)
    # Untied term alone (q = k = 0, no bias).
    path = _weights_file(tmp_path / "untied.safetensors", relative_bias=True)
    spec = TupeSpec(**SMALL, weights=str(path), name="untied")
    w = tupe_weights(spec)
    untied = session(build(spec, tmp_path / "out").path).run(None, call(*zeros, QPOS, KPOS))[0][0]
    for h in range(H):
        for a, i in enumerate(QPOS):
            for b, j in enumerate(KPOS):
                pi = w["position_embeddings"][i] @ w["pos_query"][:, h * D : (h + 1) * D]
                pj = w["position_embeddings"][j] @ w["pos_key"][:, h * D : (h + 1) * D]
                assert untied[h, a, b] == pytest.approx(float(pi @ pj) / math.sqrt(2 * D), rel=1e-5, abs=1e-5)
    # Relative bias alone: b_h of the bucket of j - i.
    path = _weights_file(tmp_path / "bias.safetensors", pos_key=True)
    spec = TupeSpec(**SMALL, weights=str(path), name="bias")
    rb = tupe_weights(spec)["relative_bias"]
    bias = session(build(spec, tmp_path / "out").path).run(None, call(*zeros, QPOS, KPOS))[0][0]
    for h in range(H):
        for a, i in enumerate(QPOS):
            for b, j in enumerate(KPOS):
                assert bias[h, a, b] == pytest.approx(rb[literal_bucket(j - i, 16, 12, True), h], abs=1e-6)


# T5's defaults (32 buckets, max_distance 128) worked by hand from the formula.
BIDIRECTIONAL = {
    0: 0,
    -1: 1,
    -7: 7,
    -8: 8,
    -12: 9,
    -16: 10,
    -32: 12,
    -64: 14,
    -100: 15,
    -128: 15,
    -5000: 15,
    1: 17,
    8: 24,
    16: 26,
    200: 31,
}
UNIDIRECTIONAL = {5: 0, 0: 0, -5: 5, -15: 15, -16: 16, -32: 21, -127: 31, -128: 31, -9999: 31}


@pytest.mark.parametrize(("bidirectional", "table"), [(True, BIDIRECTIONAL), (False, UNIDIRECTIONAL)])
def test_buckets_of_t5_defaults(bidirectional: bool, table: dict[int, int]) -> None:
    rel = np.array(list(table))
    np.testing.assert_array_equal(t5_bucket(rel, 32, 128, bidirectional), list(table.values()))


@pytest.mark.parametrize(
    ("num_buckets", "max_distance", "bidirectional"),
    [(32, 128, True), (32, 128, False), (64, 256, True), (16, 40, True), (8, 20, False), (128, 1024, True)],
)
def test_buckets_agree_with_the_pytorch_float32_formula(num_buckets: int, max_distance: int, bidirectional: bool):
    rel = torch.arange(-2 * max_distance, 2 * max_distance + 1)
    nb, bucket = num_buckets, torch.zeros_like(rel)
    if bidirectional:  # the Hugging Face T5 code, written out
        nb //= 2
        bucket += (rel > 0).long() * nb
        n = rel.abs()
    else:
        n = -torch.min(rel, torch.zeros_like(rel))
    max_exact = nb // 2
    large = (
        max_exact + (torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (nb - max_exact)).long()
    )
    hf = bucket + torch.where(n < max_exact, n, torch.min(large, torch.full_like(large, nb - 1)))
    np.testing.assert_array_equal(t5_bucket(rel.numpy(), num_buckets, max_distance, bidirectional), hf.numpy())


CASES = [
    pytest.param(dtype, graph, causal, bidir, id=f"{dtype}-{graph}-{'causal' if causal else 'encoder'}-{bidir}")
    for dtype in ("fp32", "fp16")
    for graph in ("fused", "decomposed")
    for causal, bidir in ((False, True), (True, False))
]


@pytest.mark.parametrize(("dtype", "graph", "causal", "bidirectional"),
                         tiered(CASES, lambda c: c[:2] == ("fp32", "fused")))  # fmt: skip
def test_export_runs_in_ort_and_verifies(tmp_path: Path, dtype: str, graph: str, causal: bool, bidirectional: bool):
    spec = TupeSpec(
        dtype=dtype,
        graph=graph,
        causal=causal,
        bidirectional=bidirectional,
        num_heads=4,
        head_dim=16,
        max_positions=200,
        num_buckets=16,
        max_distance=40,
    )
    result = build(spec, tmp_path)
    report = result.encoding_report
    assert result.passed, [c.data for c in report.comparisons if not c.passed]
    assert {c.reference for c in report.comparisons} == {"eager", "float64"}
    assert [t.name for t in report.tables] == ["pos_query_table", "pos_key_table"]
    assert all(t.passed and t.shape == [200, 64] for t in report.tables)
    assert len(report.guards) == 4 and all(g.passed for g in report.guards)
    model = onnx.load(str(result.path / "model.onnx"))
    assert model.opset_import[0].version == (23 if graph == "fused" else 17)
    stored = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert stored["bucket_map"].shape == (81,)  # relative positions -40..40: nothing grows with max_positions^2
    np.testing.assert_array_equal(stored["bucket_map"], bucket_map(spec))


@pytest.mark.parametrize(
    ("where", "value"),
    [("query_position_ids", -1), ("query_position_ids", P), ("key_position_ids", -1), ("key_position_ids", P + 5)],
)
def test_positions_outside_the_table_raise(tmp_path: Path, where: str, value: int) -> None:
    spec = TupeSpec(**SMALL)
    result = build(spec, tmp_path)
    q, k = tiny(3, 2, 2)
    feeds = call(q, k, [0, 5], [1, 3])
    feeds[where][0, 1] = value
    with open_runner("ort", result.path / "model.onnx") as runner:
        with pytest.raises(RuntimeInputError, match=rf"{where}: value {value} .*\[0, {P}\)"):
            runner.infer(feeds)
    # A raw session, past the runner's check: the guarded Gather fails rather than wrapping -1 to the last row.
    with pytest.raises(Exception, match="out of data bounds"):
        session(result.path).run(None, feeds)
    with pytest.raises(IndexError, match=where):
        tupe_scores(
            spec,
            *map(torch.from_numpy, (q, k)),
            *(torch.from_numpy(feeds[n]) for n in ("query_position_ids", "key_position_ids")),
        )


def test_weights_file_is_used(tmp_path: Path) -> None:
    path = _weights_file(tmp_path / "w.safetensors")
    spec = TupeSpec(**SMALL, weights=str(path))
    for name, tensor in load_file(str(path)).items():
        np.testing.assert_array_equal(tupe_weights(spec)[name], tensor)
    seeded = TupeSpec(**SMALL)
    assert not np.array_equal(tupe_weights(spec)["pos_key"], tupe_weights(seeded)["pos_key"])
    q, k = tiny(4, len(QPOS), len(KPOS))
    result = build(spec, tmp_path / "out")
    assert result.passed
    got = session(result.path).run(None, call(q, k, QPOS, KPOS))[0][0]
    np.testing.assert_allclose(got, literal_scores(spec, tupe_weights(spec), q[0], k[0], QPOS, KPOS), atol=1e-5)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"drop": "pos_key"}, "lacks tensor.*pos_key"),
        ({"position_embeddings": np.zeros((P + 1, DM), np.float32)}, r"position_embeddings.*\[25, 6\].*\[24, 6\]"),
        ({"relative_bias": np.zeros((16, H + 1), np.float32)}, r"relative_bias.*\[16, 3\], expected \[16, 2\]"),
        ({"pos_query": np.zeros((DM, H * D + 1), np.float32)}, r"pos_query.*expected \[6, 8\]"),
    ],
)
def test_bad_weights_files_are_spec_errors(tmp_path: Path, change: dict, message: str) -> None:
    path = _weights_file(tmp_path / "w.safetensors")
    tensors = load_file(str(path))
    tensors.pop(change.pop("drop", ""), None)
    save_file(tensors | change, str(path))
    with pytest.raises(SpecError, match=message) as info:
        TupeSpec(**SMALL, weights=str(path))
    assert info.value.field == "weights"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"num_buckets": 7}, "num_buckets"),  # odd while bidirectional
        ({"num_buckets": 2}, "num_buckets"),  # one bucket per direction leaves no exact range
        ({"num_buckets": 1, "bidirectional": False}, "num_buckets"),
        ({"num_buckets": 16, "max_distance": 4}, "max_distance"),  # max_exact is 4: log(4 / 4) = 0 divides
        ({"max_distance": 0}, "max_distance"),
        ({"d_model": -1}, "d_model"),
        ({"num_heads": 0}, "num_heads"),
        ({"bidirectional": "sometimes"}, "bidirectional"),
        ({"causal": 2}, "causal"),
        ({"weights": 1.5}, "weights"),
        ({"artifact": "attention"}, "artifact"),
        ({"max_positions": 0}, "max_positions"),
        ({"max_positions": 2**20, "num_heads": 16, "head_dim": 64}, "max_positions"),  # tables past 2^27 entries
    ],
)
def test_bad_fields_are_spec_errors_naming_the_field(fields: dict, field: str) -> None:
    with pytest.raises(SpecError) as info:
        TupeSpec(**(SMALL | fields))
    assert info.value.field == field


def test_missing_weights_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read") as info:
        TupeSpec(**SMALL, weights=str(tmp_path / "absent.safetensors"))
    assert info.value.field == "weights"


def test_defaults() -> None:
    spec = TupeSpec(num_heads=4, head_dim=8)
    assert (spec.d_model, spec.causal, spec.bidirectional, spec.artifact) == (32, False, True, "scores")
