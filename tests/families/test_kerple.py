"""KERPLE: both kernels against the paper's formulas (written here), export -> ORT for every artifact x dtype x graph,
shift invariance, weights, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
from safetensors.numpy import save_file

from ropeexport import build
from ropeexport.errors import SpecError
from ropeexport.families.kerple.reference import kerple_bias
from ropeexport.families.kerple.spec import KerpleSpec
from tests.cases import tiered

P = 512
SMALL: dict[str, Any] = {"num_heads": 3, "head_dim": 16, "max_positions": P}
R1 = np.array([0.5, 1.25, 2.0], np.float32)
R2 = np.array([0.125, 0.75, 1.5], np.float32)


def write(path: Path, **tensors: np.ndarray) -> str:
    save_file(tensors, str(path))
    return str(path)


def paper_bias(kernel: str, r1: np.ndarray, r2: np.ndarray, qpos: np.ndarray, kpos: np.ndarray, causal: bool):
    """Chi et al. 2022, eq. for the log kernel -r1 log(1 + r2 |m - n|) and the power kernel -r1 |m - n|^r2, per head,
    -inf where the causal mask hides key n > m. float64 [b, h, q, k]."""
    b, q, k = qpos.shape[0], qpos.shape[1], kpos.shape[1]
    out = np.empty((b, len(r1), q, k))
    for bi in range(b):
        for h in range(len(r1)):
            for m in range(q):
                for n in range(k):
                    dist = abs(int(qpos[bi, m]) - int(kpos[bi, n]))
                    if causal and kpos[bi, n] > qpos[bi, m]:
                        out[bi, h, m, n] = -np.inf
                    elif kernel == "log":
                        out[bi, h, m, n] = -float(r1[h]) * np.log(1.0 + float(r2[h]) * dist)
                    else:
                        out[bi, h, m, n] = -float(r1[h]) * dist ** float(r2[h])
    return out


def run_ort(path: Path, feeds: dict[str, Any]) -> np.ndarray:
    session = ort.InferenceSession(str(path / "model.onnx"), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("kernel", ["log", "power"])
def test_bias_matches_the_paper_per_head(tmp_path: Path, kernel: str, causal: bool) -> None:
    weights = write(tmp_path / "k.safetensors", r1=R1, r2=R2)
    spec = KerpleSpec(**SMALL, kernel=kernel, causal=causal, weights=weights, artifact="bias")
    qpos = np.array([[0, 1, 5, 200], [P - 4, P - 3, P - 2, P - 1]], np.int64)
    kpos = np.array([np.arange(0, P, 7), np.arange(P - 1, -1, -7)], np.int64)
    want = paper_bias(kernel, R1, R2, qpos, kpos, causal)
    got = kerple_bias(spec, torch.from_numpy(qpos), torch.from_numpy(kpos)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)  # float32 arithmetic: a few ulp
    assert np.array_equal(np.isneginf(got), np.isneginf(want))
    built = build(spec, tmp_path / "out")
    onnx_out = run_ort(built.path, {"query_position_ids": qpos, "key_position_ids": kpos})
    np.testing.assert_allclose(onnx_out, want, rtol=1e-6, atol=0)


def test_log_kernel_keeps_precision_for_small_r2(tmp_path: Path) -> None:
    """r2 * n near 2^-20: a plain log(1 + x) in float32 would keep ~3 significant digits; log1p keeps them all
    (the reference is float64, where 1 + x still holds x to ~1e-10)."""
    r2 = np.array([2.0**-20, 3.0e-6, 1.0e-5], np.float32)
    spec = KerpleSpec(**SMALL, causal=False, weights=write(tmp_path / "k.safetensors", r1=R1, r2=r2), artifact="bias")
    qpos, kpos = np.zeros((1, 1), np.int64), np.arange(1, 40, dtype=np.int64)[None]
    want = paper_bias("log", R1, r2, qpos, kpos, False)
    np.testing.assert_allclose(kerple_bias(spec, torch.from_numpy(qpos), torch.from_numpy(kpos)), want, rtol=1e-6)
    built = build(spec, tmp_path / "out")
    onnx_out = run_ort(built.path, {"query_position_ids": qpos, "key_position_ids": kpos})
    np.testing.assert_allclose(onnx_out, want, rtol=1e-6)


CASES = [
    (k, a, d, g)
    for k in ("log", "power")
    for a in ("bias", "scores", "attention")
    for d in ("fp32", "fp16")
    for g in ("fused", "decomposed")
]


@pytest.mark.parametrize(("kernel", "artifact", "dtype", "graph"), tiered(CASES, lambda c: c[2:] == ("fp32", "fused")))
def test_export_verifies_on_ort(tmp_path: Path, kernel: str, artifact: str, dtype: str, graph: str) -> None:
    spec = KerpleSpec(**SMALL, kernel=kernel, artifact=artifact, dtype=dtype, graph=graph)
    result = build(spec, tmp_path)
    assert result.passed, [c.data for c in result.encoding_report.comparisons]
    assert {c.reference for c in result.encoding_report.comparisons} == {"eager", "float64"}
    assert all(c.runtime == "ort" and c.elements > 0 for c in result.encoding_report.comparisons)


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_bidirectional_form_verifies_on_ort(tmp_path: Path, kernel: str) -> None:
    assert build(KerpleSpec(**SMALL, kernel=kernel, causal=False, artifact="attention"), tmp_path).passed


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("kernel", ["log", "power"])
def test_scores_are_shift_invariant(tmp_path: Path, kernel: str, causal: bool) -> None:
    path = build(KerpleSpec(**SMALL, kernel=kernel, causal=causal, artifact="scores"), tmp_path).path
    rng = np.random.default_rng(0)
    query, key = (rng.standard_normal((2, 3, n, 16), dtype=np.float32) for n in (16, 120))
    qpos = np.stack([np.arange(104, 120), np.arange(50, 66)]).astype(np.int64)
    kpos = np.stack([np.arange(0, 120), np.arange(0, 120)]).astype(np.int64)
    base = run_ort(path, {"query": query, "key": key, "query_position_ids": qpos, "key_position_ids": kpos})
    for shift in (1, 13, P - 120):
        moved = {"query": query, "key": key, "query_position_ids": qpos + shift, "key_position_ids": kpos + shift}
        np.testing.assert_array_equal(run_ort(path, moved), base)


def test_weights_file_is_used_and_seeds_differ(tmp_path: Path) -> None:
    qpos, kpos = torch.arange(8)[None], torch.arange(8)[None]
    spec = KerpleSpec(**SMALL, causal=False, weights=write(tmp_path / "a.safetensors", r1=R1, r2=R2))
    r1_doubled = KerpleSpec(**SMALL, causal=False, weights=write(tmp_path / "b.safetensors", r1=2 * R1, r2=R2))
    torch.testing.assert_close(kerple_bias(r1_doubled, qpos, kpos), 2 * kerple_bias(spec, qpos, kpos), rtol=0, atol=0)
    seeded = kerple_bias(KerpleSpec(**SMALL, causal=False), qpos, kpos)
    assert not torch.equal(seeded, kerple_bias(spec, qpos, kpos))
    assert torch.equal(seeded, kerple_bias(KerpleSpec(**SMALL, causal=False, seed=0), qpos, kpos))
    assert not torch.equal(seeded, kerple_bias(KerpleSpec(**SMALL, causal=False, seed=5), qpos, kpos))


def test_log_kernel_accepts_r2_above_two(tmp_path: Path) -> None:
    r2 = np.array([0.5, 3.0, 9.0], np.float32)
    assert KerpleSpec(**SMALL, kernel="log", weights=write(tmp_path / "k.safetensors", r1=R1, r2=r2)).kernel == "log"


BAD_WEIGHTS = [
    pytest.param({"r1": R1}, "log", id="r2-missing"),
    pytest.param({"r1": R1, "r2": R2, "r3": R2}, "log", id="unexpected-tensor"),
    pytest.param({"r1": R1[:2], "r2": R2}, "log", id="r1-wrong-shape"),
    pytest.param({"r1": R1[None], "r2": R2}, "log", id="r1-wrong-rank"),
    pytest.param({"r1": np.array([0.5, 0.0, 1.0], np.float32), "r2": R2}, "log", id="r1-zero"),
    pytest.param({"r1": R1, "r2": np.array([0.5, -0.1, 1.0], np.float32)}, "power", id="r2-negative"),
    pytest.param({"r1": R1, "r2": np.array([0.5, 2.5, 1.0], np.float32)}, "power", id="r2-above-two-power"),
    pytest.param({"r1": R1, "r2": np.array([0.5, np.inf, 1.0], np.float32)}, "log", id="r2-inf"),
]


@pytest.mark.parametrize(("tensors", "kernel"), BAD_WEIGHTS)
def test_bad_weights_are_a_spec_error_naming_weights(tmp_path: Path, tensors: dict, kernel: str) -> None:
    path = write(tmp_path / "k.safetensors", **tensors)
    with pytest.raises(SpecError) as err:
        KerpleSpec(**SMALL, kernel=kernel, weights=path)
    assert err.value.field == "weights"


def test_r_that_rounds_to_zero_in_fp16_is_rejected(tmp_path: Path) -> None:
    r1 = np.array([0.5, 1e-9, 1.0], np.float32)  # below fp16's smallest subnormal (6e-8)
    path = write(tmp_path / "k.safetensors", r1=r1, r2=R2)
    assert KerpleSpec(**SMALL, weights=path).dtype == "fp32"
    with pytest.raises(SpecError) as err:
        KerpleSpec(**SMALL, weights=path, dtype="fp16")
    assert err.value.field == "weights"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"kernel": "exp"}, "kernel"),
        ({"kernel": None}, "kernel"),
        ({"seed": -3}, "seed"),
        ({"weights": 1}, "weights"),
        ({"causal": "often"}, "causal"),
        ({"num_heads": 0}, "num_heads"),
        ({"head_dim": 0}, "head_dim"),
        ({"artifact": "apply"}, "artifact"),
    ],
)
def test_bad_fields_name_the_field(fields: dict, field: str) -> None:
    with pytest.raises(SpecError) as err:
        KerpleSpec(**fields)
    assert err.value.field == field


def test_defaults_are_the_papers_causal_form() -> None:
    spec = KerpleSpec()
    assert spec.causal and spec.kernel == "log" and spec.artifact == "bias"
