"""Transformer-XL relative encoding (Dai et al. 2019): the four-term logit, export -> ORT, shifts, bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import numpy_helper
from safetensors.numpy import save_file

from ropeexport import build
from ropeexport.catalog import recipe_for, spec_from_dict
from ropeexport.errors import RuntimeInputError, SpecError
from ropeexport.families.transformer_xl.export import build_transformer_xl_scores_graph
from ropeexport.families.transformer_xl.probes import check_tables
from ropeexport.families.transformer_xl.reference import TransformerXLScores, relative_embedding
from ropeexport.families.transformer_xl.spec import TransformerXLSpec
from ropeexport.graph.onnx_io import save_model
from ropeexport.report.views import TableRecord
from ropeexport.runtimes import open_runner
from ropeexport.verification.core import verify_artifact
from tests.cases import tiered

P = 64  # max_positions of the small specs
H, D, DM = 2, 4, 6  # heads, head_dim, d_model of R (not H * D, so W_R is not square)
SMALL = {"num_heads": H, "head_dim": D, "d_model": DM, "max_positions": P}


def write_weights(path: Path, seed: int = 7, **override: np.ndarray) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tensors = {
        "r_w_bias": rng.standard_normal((H, D)).astype(np.float32),
        "r_r_bias": rng.standard_normal((H, D)).astype(np.float32),
        "r_net": (rng.standard_normal((H * D, DM)) * 0.5).astype(np.float32),
    } | override
    save_file(tensors, str(path))
    return tensors


def four_terms(
    q: np.ndarray, k: np.ndarray, qpos: np.ndarray, kpos: np.ndarray, w: dict[str, np.ndarray], causal: bool
) -> np.ndarray:
    """A + B + C + D of Dai et al. (2019), one logit at a time, in float64 loops; / sqrt(d); -inf for j > i."""
    u, v, w_r = (w[n].astype(np.float64) for n in ("r_w_bias", "r_r_bias", "r_net"))
    b_, h_, nq, d = q.shape
    nk = k.shape[2]
    out = np.zeros((b_, h_, nq, nk))
    for b in range(b_):
        for i in range(nq):
            for j in range(nk):
                dist = int(qpos[b, i]) - int(kpos[b, j])
                if causal and dist < 0:
                    out[b, :, i, j] = -np.inf
                    continue
                # R_(i-j): d_model/2 sines, then d_model/2 cosines of dist / 10000^(2c / d_model).
                r = [math.sin(dist / 10000 ** (2 * c / DM)) for c in range(DM // 2)]
                r += [math.cos(dist / 10000 ** (2 * c / DM)) for c in range(DM // 2)]
                for h in range(h_):
                    wr = [sum(w_r[h * d + e, m] * r[m] for m in range(DM)) for e in range(d)]  # (W_R R)_h
                    qi, kj = q[b, h, i].astype(np.float64), k[b, h, j].astype(np.float64)
                    a = sum(qi[e] * kj[e] for e in range(d))
                    b_term = sum(qi[e] * wr[e] for e in range(d))
                    c = sum(u[h, e] * kj[e] for e in range(d))
                    d_term = sum(v[h, e] * wr[e] for e in range(d))
                    out[b, h, i, j] = (a + b_term + c + d_term) / math.sqrt(d)
    return out


def _export(spec: TransformerXLSpec, tmp_path: Path) -> Path:
    save_model(build_transformer_xl_scores_graph(spec), tmp_path)
    return tmp_path / "model.onnx"


def _feeds(qpos: list | np.ndarray, kpos: list | np.ndarray, seed: int = 3) -> dict[str, np.ndarray]:
    qpos, kpos = np.asarray(qpos, np.int64), np.asarray(kpos, np.int64)
    rng = np.random.default_rng(seed)
    return {
        "query": rng.standard_normal((qpos.shape[0], H, qpos.shape[1], D)).astype(np.float32),
        "key": rng.standard_normal((kpos.shape[0], H, kpos.shape[1], D)).astype(np.float32),
        "query_position_ids": qpos,
        "key_position_ids": kpos,
    }


def test_relative_embedding_is_sin_half_then_cos_half() -> None:
    # inv_freq = 1 / 10000^(arange(0, 4, 2) / 4) = [1, 1/100]; R_3 = [sin 3, sin 0.03, cos 3, cos 0.03].
    want = [math.sin(3.0), math.sin(0.03), math.cos(3.0), math.cos(0.03)]
    np.testing.assert_allclose(relative_embedding(np.array([3.0]), 4)[0], want, rtol=0, atol=1e-15)


@pytest.mark.parametrize("causal", [True, False])
def test_ort_and_eager_equal_the_four_terms(tmp_path: Path, causal: bool) -> None:
    weights = write_weights(tmp_path / "w.safetensors")
    spec = TransformerXLSpec(**SMALL, causal=causal, weights=str(tmp_path / "w.safetensors"))
    feeds = _feeds([[9, 3, 63], [0, 40, 41]], [[0, 3, 9, 12, 63], [41, 0, 1, 40, 2]])
    want = four_terms(
        feeds["query"], feeds["key"], feeds["query_position_ids"], feeds["key_position_ids"], weights, causal
    )
    (got,) = ort.InferenceSession(str(_export(spec, tmp_path))).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        eager = TransformerXLScores(spec)(
            torch.from_numpy(feeds["query"]),
            torch.from_numpy(feeds["key"]),
            query_position_ids=torch.from_numpy(feeds["query_position_ids"]),
            key_position_ids=torch.from_numpy(feeds["key_position_ids"]),
        )
    np.testing.assert_allclose(eager.numpy(), want, rtol=1e-5, atol=1e-5)
    assert np.isneginf(got).any() == causal


def test_weights_file_is_what_the_artifact_stores(tmp_path: Path) -> None:
    weights = write_weights(tmp_path / "w.safetensors", seed=11)
    spec = TransformerXLSpec(**SMALL, weights=str(tmp_path / "w.safetensors"))
    stored = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(_export(spec, tmp_path))).graph.initializer}
    np.testing.assert_array_equal(stored["r_w_bias"], weights["r_w_bias"])
    np.testing.assert_array_equal(stored["r_r_bias"], weights["r_r_bias"])
    # Row 5 of the causal table is distance 5: W_R R_5 per head.
    r5 = [math.sin(5 / 10000 ** (2 * c / DM)) for c in range(DM // 2)]
    r5 += [math.cos(5 / 10000 ** (2 * c / DM)) for c in range(DM // 2)]
    want = (weights["r_net"].astype(np.float64) @ np.array(r5)).reshape(H, D)
    np.testing.assert_allclose(stored["r_head_table"][5], want, rtol=1e-6, atol=1e-7)
    seeded = TransformerXLSpec(**SMALL)
    other = {t.name: numpy_helper.to_array(t) for t in build_transformer_xl_scores_graph(seeded).graph.initializer}
    assert not np.array_equal(other["r_w_bias"], weights["r_w_bias"])


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", tiered(["fp32", "fp16"], lambda d: d == "fp32"))
@pytest.mark.parametrize("graph", tiered(["fused", "decomposed"], lambda g: g == "fused"))
def test_export_ort_verifies(tmp_path: Path, causal: bool, dtype: str, graph: str) -> None:
    spec = TransformerXLSpec(num_heads=2, head_dim=16, max_positions=300, causal=causal, dtype=dtype, graph=graph)
    result = build(spec, tmp_path)
    assert result.passed, result.report
    tables = result.encoding_report.tables
    assert {t.name for t in tables} == {"r_w_bias", "r_r_bias", "r_head_table"}
    assert all(t.passed and t.max_ulp <= 0.5 for t in tables)
    model = onnx.load(str(result.path / "model.onnx"))
    assert next(o.version for o in model.opset_import if o.domain == "") == (23 if graph == "fused" else 17)
    assert len(numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "r_head_table"))) == (
        300 if causal else 599
    )


@pytest.mark.parametrize("causal", [True, False])
def test_scores_depend_only_on_distance(tmp_path: Path, causal: bool) -> None:
    session = ort.InferenceSession(str(_export(TransformerXLSpec(**SMALL, causal=causal), tmp_path)))
    qpos, kpos = np.array([[4, 9, 10, 20]]), np.array([[0, 4, 9, 10, 20, 21, 30]])
    base = session.run(None, _feeds(qpos, kpos))[0]
    for shift in (1, 17, P - 31):
        shifted = session.run(None, _feeds(qpos + shift, kpos + shift))[0]  # same q and k (same seed)
        np.testing.assert_allclose(shifted, base, rtol=0, atol=1e-6)
    moved = session.run(None, _feeds(qpos + 1, kpos))[0]  # not a shift of both: the logits must change
    assert not np.allclose(moved[np.isfinite(moved) & np.isfinite(base)], base[np.isfinite(moved) & np.isfinite(base)])


def test_verification_catches_other_weights_and_mask(tmp_path: Path) -> None:
    spec = TransformerXLSpec(**SMALL)
    assert not verify_artifact(
        spec.replace(seed=1), recipe_for(spec.replace(seed=1)), _export(spec, tmp_path / "seed"), ["ort"]
    ).passed
    assert not verify_artifact(
        spec.replace(causal=False), recipe_for(spec.replace(causal=False)), _export(spec, tmp_path / "mask"), ["ort"]
    ).passed


BAD = [(q, k) for bad in (-1, P, -P, 10 * P) for q, k in (([[0, bad]], [[0, 1]]), ([[0, 1]], [[bad, 0]]))]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("qpos", "kpos"), BAD)
def test_bad_position_raises_in_runner_and_in_graph(tmp_path: Path, causal: bool, qpos: list, kpos: list) -> None:
    path = _export(TransformerXLSpec(**SMALL, causal=causal), tmp_path)
    with open_runner("ort", path) as runner:
        runner.infer(_feeds([[0, P - 1]], [[P - 1, 0]]))  # the edges are fine
        with pytest.raises(RuntimeInputError, match="position_ids"):
            runner.infer(_feeds(qpos, kpos))
    with pytest.raises(Exception, match="out of data bounds"):  # the raw session: the position guard refuses
        ort.InferenceSession(str(path)).run(None, _feeds(qpos, kpos))
    with pytest.raises(RuntimeInputError):
        f = {n: torch.from_numpy(a) for n, a in _feeds(qpos, kpos).items()}
        TransformerXLScores(TransformerXLSpec(**SMALL, causal=causal))(
            f["query"], f["key"], query_position_ids=f["query_position_ids"], key_position_ids=f["key_position_ids"]
        )


def test_spec_is_frozen_and_json_round_trips(tmp_path: Path) -> None:
    write_weights(tmp_path / "w.safetensors")
    spec = TransformerXLSpec(**SMALL, weights=str(tmp_path / "w.safetensors"))
    data = json.loads(json.dumps(spec.to_dict()))
    assert spec_from_dict(data) == spec
    with pytest.raises(AttributeError):
        spec.seed = 3  # type: ignore[misc]
    assert TransformerXLSpec(num_heads=3, head_dim=8).d_model == 24  # 0 means num_heads * head_dim


BAD_WEIGHTS = [
    pytest.param({"r_r_bias": None}, "r_r_bias", id="missing-tensor"),
    pytest.param({"r_net": np.zeros((H * D, DM + 2), np.float32)}, "r_net", id="wrong-shape"),
    pytest.param({"r_w_bias": np.zeros((D, H), np.float32)}, "r_w_bias", id="transposed"),
    pytest.param({"extra": np.zeros(2, np.float32)}, "extra", id="unexpected-tensor"),
    pytest.param({"r_w_bias": np.full((H, D), np.nan, np.float32)}, "r_w_bias", id="nan"),
]


@pytest.mark.parametrize(("override", "named"), BAD_WEIGHTS)
def test_bad_weights_file_is_a_spec_error_naming_weights(tmp_path: Path, override: dict, named: str) -> None:
    path = tmp_path / "w.safetensors"
    tensors = write_weights(path, **{k: v for k, v in override.items() if v is not None})
    if any(v is None for v in override.values()):
        save_file({k: v for k, v in tensors.items() if k not in override}, str(path))
    with pytest.raises(SpecError) as caught:
        TransformerXLSpec(**SMALL, weights=str(path))
    assert caught.value.field == "weights" and named in caught.value.message


def test_missing_weights_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        TransformerXLSpec(**SMALL, weights=str(tmp_path / "absent.safetensors"))
    assert caught.value.field == "weights"
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(SpecError, match="weights"):
        TransformerXLSpec(**SMALL, weights=str(tmp_path / "junk.safetensors"))


BAD_FIELDS = [
    pytest.param({"d_model": 7}, "d_model", id="odd-d_model"),
    pytest.param({"num_heads": 3, "head_dim": 3, "d_model": 0}, "d_model", id="odd-default-d_model"),
    pytest.param({"num_heads": 0}, "num_heads", id="no-heads"),
    pytest.param({"head_dim": 0}, "head_dim", id="no-head_dim"),
    pytest.param({"causal": "maybe"}, "causal", id="causal-not-bool"),
    pytest.param({"seed": -1}, "seed", id="negative-seed"),
    pytest.param({"weights": 3}, "weights", id="weights-not-a-path"),
    pytest.param({"artifact": "attention"}, "artifact", id="no-attention-artifact"),
    pytest.param({"max_positions": 2**22, "num_heads": 16, "head_dim": 64}, "max_positions", id="table-too-large"),
]


@pytest.mark.parametrize(("fields", "field"), BAD_FIELDS)
def test_bad_fields_raise_spec_error_naming_the_field(fields: dict, field: str) -> None:
    with pytest.raises(SpecError) as caught:
        TransformerXLSpec(**(SMALL | fields))
    assert caught.value.field == field
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("distance", [0, P - 1])
def test_table_check_catches_one_element_one_ulp_off(tmp_path: Path, distance: int) -> None:
    spec = TransformerXLSpec(**SMALL, causal=False)
    model = build_transformer_xl_scores_graph(spec)
    table = next(t for t in model.graph.initializer if t.name == "r_head_table")
    values = numpy_helper.to_array(table).copy()
    row = distance + P - 1  # bidirectional: row r holds distance r - (P - 1)
    values[row, 1, 2] = np.nextafter(values[row, 1, 2], np.float32(np.inf))  # 1 ulp: 0.5 to 1.5 ulp from float64
    table.CopyFrom(numpy_helper.from_array(values, "r_head_table"))
    save_model(model, tmp_path)
    checks = {c.name: c for c in map(TableRecord, check_tables(spec, tmp_path / "model.onnx"))}
    assert checks["r_w_bias"].passed and checks["r_r_bias"].passed
    assert not checks["r_head_table"].passed and checks["r_head_table"].worst_distance == distance
