"""Multimodal RoPE (M-RoPE): position_ids [3, batch, seq], the frequency pairs split between time, height and width.

Against transformers 5.23's own recomposition (Qwen2-VL, Qwen2.5-VL: contiguous ``mrope_section`` blocks; Qwen3-VL,
Qwen3.5: interleaved by frequency index, Qwen3.5 with partial rotary 0.25), every export form verified per position
against the float64 oracle over text, axes-apart and image-grid positions, and the bad inputs refused by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

import ropeexport as rx
from ropeexport.errors import RuntimeInputError, SpecError
from ropeexport.families.rope import mrope
from ropeexport.families.rope.export import build_rope_graph
from ropeexport.families.rope.oracle import rope_oracle
from ropeexport.families.rope.probes import rope_probes
from ropeexport.families.rope.reference import reference_module
from ropeexport.families.rope.schedules import get_schedule
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.runtimes.ort import OrtRunner
from tests.clirun import run

P = 512  # max_positions of every artifact here


def _spec(**fields: Any) -> RopeSpec:
    base: dict[str, Any] = {"head_dim": 32, "num_heads": 4, "num_kv_heads": 2, "max_positions": P}
    return RopeSpec(**(base | fields))


def _transformers(model_type: str, section: list[int], head_dim: int, partial: float) -> Any:
    """transformers' text rotary module of ``model_type`` for a tiny config (2 heads of ``head_dim``)."""
    from transformers.models.qwen2_5_vl import configuration_qwen2_5_vl as c25
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as m25
    from transformers.models.qwen2_vl import configuration_qwen2_vl as c2
    from transformers.models.qwen2_vl import modeling_qwen2_vl as m2
    from transformers.models.qwen3_5 import configuration_qwen3_5 as c35
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m35
    from transformers.models.qwen3_vl import configuration_qwen3_vl as c3
    from transformers.models.qwen3_vl import modeling_qwen3_vl as m3

    classes = {
        "qwen2_vl": (c2.Qwen2VLTextConfig, m2.Qwen2VLRotaryEmbedding, m2),
        "qwen2_5_vl": (c25.Qwen2_5_VLTextConfig, m25.Qwen2_5_VLRotaryEmbedding, m25),
        "qwen3_vl": (c3.Qwen3VLTextConfig, m3.Qwen3VLTextRotaryEmbedding, m3),
        "qwen3_5": (c35.Qwen3_5TextConfig, m35.Qwen3_5TextRotaryEmbedding, m35),
    }
    config_class, rotary_class, module = classes[model_type]
    params = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section}
    if partial != 1.0:
        params["partial_rotary_factor"] = partial
    config = config_class(
        hidden_size=2 * head_dim,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=head_dim,
        rope_parameters=params,
    )
    return rotary_class(config), module.apply_rotary_pos_emb


# The case table: each model type as transformers 5.23 computes it -> the spec fields that say it.
MODELS = [
    pytest.param("qwen2_vl", [4, 6, 6], 32, 1.0, {"mrope_section": (4, 6, 6)}, id="qwen2_vl-chunked"),
    pytest.param("qwen2_5_vl", [6, 5, 5], 32, 1.0, {"mrope_section": (6, 5, 5)}, id="qwen2_5_vl-chunked"),
    pytest.param(
        "qwen3_vl",
        [6, 5, 5],
        32,
        1.0,
        {"mrope_section": (6, 5, 5), "mrope_interleaved": True},
        id="qwen3_vl-interleaved",
    ),
    pytest.param(
        "qwen3_5",
        [3, 3, 2],
        64,
        0.25,
        {"mrope_section": (3, 3, 2), "mrope_interleaved": True, "head_dim": 64, "rotary_dim": 16},
        id="qwen3_5-interleaved-partial",
    ),
]


def _positions(seed: int = 0) -> np.ndarray:
    """[3, 2, s]: an image prompt in row 0, three unrelated axes in row 1 (every axis matters somewhere)."""
    image = mrope.prompt_positions([("text", 2), ("image", (1, 3, 4)), ("text", 3)])  # [3, 17]
    other = np.random.default_rng(seed).integers(0, P, image.shape)
    return np.stack([image, other], axis=1).astype(np.int64)


@pytest.mark.fast
@pytest.mark.parametrize(("model_type", "section", "head_dim", "partial", "fields"), MODELS)
def test_axes_of_every_pair_are_transformers_recomposition(
    model_type: str, section: list[int], head_dim: int, partial: float, fields: dict[str, Any]
) -> None:
    rotary, apply = _transformers(model_type, section, head_dim, partial)
    spec = _spec(**({"head_dim": head_dim} | fields))
    pos = _positions()
    inv = get_schedule("default").frequencies(spec.rotary_dim, spec.theta, {}, P).inv_freq
    every = torch.from_numpy(pos).double()[..., None] * torch.from_numpy(inv)  # [3, b, s, r/2] float64
    theirs = rotary.recomposition_frequencies(every.clone())  # [b, s, r]: the half-width angles, twice
    assert theirs.shape[-1] == spec.rotary_dim
    ours, _ = reference_module(spec).mrope_angles(torch.from_numpy(pos))
    assert torch.equal(ours, theirs[..., : spec.rotary_dim // 2]), "the eager angles are not transformers' pairs"
    # The oracle, written apart, rotates as transformers' apply_rotary_pos_emb does with those float64 angles.
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 2, pos.shape[-1], head_dim))
    k = rng.standard_normal((2, 1, pos.shape[-1], head_dim))
    q_tf, k_tf = apply(torch.from_numpy(q), torch.from_numpy(k), theirs.cos(), theirs.sin())
    np.testing.assert_allclose(rope_oracle(spec, q, pos), q_tf.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(rope_oracle(spec, k, pos), k_tf.numpy(), rtol=0, atol=1e-12)


@pytest.mark.fast
@pytest.mark.parametrize(("model_type", "section", "head_dim", "partial", "fields"), MODELS)
@pytest.mark.parametrize("graph", ["fused", "decomposed"])
def test_artifact_matches_transformers_float32_forward(
    model_type: str, section: list[int], head_dim: int, partial: float, fields: dict[str, Any], graph: str
) -> None:
    rotary, apply = _transformers(model_type, section, head_dim, partial)
    spec = _spec(**({"head_dim": head_dim, "num_heads": 2, "num_kv_heads": 1, "graph": graph} | fields))
    pos = _positions(seed=2)
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 2, pos.shape[-1], head_dim)).astype(np.float32)
    k = rng.standard_normal((2, 1, pos.shape[-1], head_dim)).astype(np.float32)
    cos, sin = rotary(torch.from_numpy(q), torch.from_numpy(pos))  # float32 angles, as transformers runs
    q_tf, k_tf = apply(torch.from_numpy(q), torch.from_numpy(k), cos, sin)
    session = ort.InferenceSession(build_rope_graph(spec).SerializeToString(), providers=["CPUExecutionProvider"])
    q_out, k_out = session.run(["query_out", "key_out"], {"query": q, "key": k, "position_ids": pos})
    # transformers' float32 angle p * inv_freq is off by up to p ulps of 1: ~3e-5 at p = 511
    np.testing.assert_allclose(q_out, q_tf.numpy(), rtol=0, atol=2e-4)
    np.testing.assert_allclose(k_out, k_tf.numpy(), rtol=0, atol=2e-4)


# Every export form M-RoPE takes, verified through the pipeline per position against eager and float64.
FORMS = [
    pytest.param({"mrope_section": (4, 6, 6)}, "fused", "fp32", ("ort", "onnx-reference"), id="chunked-fused-fp32"),
    pytest.param({"mrope_section": (6, 5, 5)}, "decomposed", "fp16", ("ort",), id="chunked-decomposed-fp16"),
    pytest.param(
        {"mrope_section": (6, 5, 5), "mrope_interleaved": True}, "fused", "fp16", ("ort",), id="interleaved-fused-fp16"
    ),
    pytest.param(
        {"mrope_section": (3, 3, 2), "mrope_interleaved": True, "rotary_dim": 16},
        "decomposed",
        "fp32",
        ("ort", "onnx-reference"),
        id="interleaved-partial-decomposed-fp32",
    ),
    pytest.param(  # bf16: verification runs it on the ONNX reference evaluator (ORT CPU has no bf16 kernels)
        {"mrope_section": (2, 3, 3), "rotary_dim": 16},
        "fused",
        "bf16",
        ("onnx-reference",),
        id="chunked-partial-fused-bf16",
    ),
]


@pytest.mark.parametrize(("fields", "graph", "dtype", "runtimes"), FORMS)
def test_every_form_verifies_per_position_over_three_axes(
    fields: dict[str, Any], graph: str, dtype: str, runtimes: tuple[str, ...], tmp_path: Path
) -> None:
    spec = _spec(graph=graph, dtype=dtype, **fields)
    result = rx.build(spec, tmp_path, runtimes=list(runtimes))
    report = result.report
    assert result.passed, [c for c in report["comparisons"] if not c["passed"]]
    probes = {p["name"] for p in report["probes"]}
    assert {"image-grid", "image-grid-at-end", "decode-after-image", f"sweep[0..{P - 1}]-axes-apart"} <= probes
    assert {r["runtime"] for r in report["comparisons"]} == set(runtimes)
    guards = [g["case"] for g in report["guards"]]
    assert all(g["passed"] for g in report["guards"]) and len(guards) == 6 * len(runtimes), guards


@pytest.mark.fast
def test_probes_reach_the_end_of_the_table_on_every_axis() -> None:
    spec = _spec(mrope_section=(4, 6, 6))
    probes, _ = rope_probes(spec)
    for axis in range(3):
        seen = np.unique(np.concatenate([p.positions["position_ids"][axis].ravel() for p in probes]))
        assert seen.tolist() == list(range(P)), f"axis {axis} misses positions"
    assert all(p.positions["position_ids"].ndim == 3 for p in probes)
    assert max(int(p.positions["position_ids"].max()) for p in probes if p.name.startswith("image")) == P - 1


# Bad input: (fields, the field named, words of the message).
BAD = [
    pytest.param(
        {"mrope_section": (16, 24, 20), "head_dim": 128},
        "mrope_section",
        "sum to rotary_dim / 2 = 64",
        id="sum-not-half",
    ),
    pytest.param(
        {"mrope_section": (4, 6, 6), "rotary_dim": 16},
        "mrope_section",
        "sum to rotary_dim / 2 = 8",
        id="sum-not-partial-half",
    ),
    pytest.param({"mrope_section": (8, 8)}, "mrope_section", "3 counts", id="two-axes"),
    pytest.param({"mrope_section": (0, 8, 8)}, "mrope_section[0]", "between 1", id="empty-axis"),
    pytest.param({"mrope_interleaved": True}, "mrope_interleaved", "needs mrope_section", id="interleaved-alone"),
    pytest.param(
        {"mrope_section": (2, 7, 7), "mrope_interleaved": True},
        "mrope_section",
        "interleaved over 16",
        id="interleaved-counts-impossible",
    ),
    pytest.param({"mrope_section": (4, 6, 6), "layout": "interleaved"}, "layout", "half-split", id="pairs-interleaved"),
    pytest.param(
        {
            "mrope_section": (4, 6, 6),
            "scaling": "dynamic",
            "scaling_params": {"factor": 4.0, "original_max_position_embeddings": 128},
        },
        "scaling",
        "static",
        id="length-dependent-schedule",
    ),
    pytest.param({"mrope_section": (4, 6, 6), "artifact": "scores"}, "artifact", "[3, batch, seq]", id="scores"),
    # a block spec is a Qwen-VL decoder's layer (its export alone refused: tests/decoder/test_qwen_vl.py)
    pytest.param({"mrope_section": (4, 6, 6), "artifact": "block", "graph": "tensorrt"}, "graph",
                 "fused or decomposed or gqa", id="block-tensorrt"),
    pytest.param({"mrope_section": (4, 6, 6), "graph": "plugin"}, "graph", "fused or decomposed", id="plugin"),
]


@pytest.mark.fast
@pytest.mark.parametrize(("fields", "field", "words"), BAD)
def test_bad_mrope_spec_names_the_field(fields: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        _spec(**fields)
    assert caught.value.field == field
    assert words in str(caught.value)


CLI_BAD = [
    pytest.param(["--mrope-section", "16,24,20"], "mrope_section: must sum to rotary_dim / 2 = 64", id="sum"),
    pytest.param(["--mrope-section", "16,24,24", "--mrope-interleaved"], "mrope_section: interleaved", id="both"),
    pytest.param(["--mrope-section", "16,x,24"], "mrope_section: must be an integer", id="not-a-number"),
]


@pytest.mark.fast
@pytest.mark.parametrize(("flags", "message"), CLI_BAD)
def test_cli_bad_mrope_is_one_line_exit_2(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, _, err = run(["build", "--encoding", "rope", "--head-dim", "128", *flags, "--out", str(out)], capsys)
    assert code == 2
    assert err.strip().splitlines() == [f"ropeexport: error: {err.strip().split('error: ', 1)[1]}"]
    assert message in err
    assert not out.exists(), "bad input wrote something"


@pytest.mark.fast
def test_one_axis_spec_keeps_its_bytes_and_keys() -> None:
    plain = _spec()
    assert "mrope_section" not in plain.to_dict() and "mrope_interleaved" not in plain.to_dict()
    assert plain.position_axes == 1 and set(plain.pair_axes()) == {0}
    assert _spec(mrope_section=(4, 6, 6)).to_dict()["mrope_section"] == [4, 6, 6]
    assert RopeSpec(**{k: v for k, v in _spec(mrope_section=[4, 6, 6]).to_dict().items() if k != "encoding"}) == _spec(
        mrope_section=(4, 6, 6)
    )


# A 3-axis model fed [batch, seq] positions at run time: (where it is fed) -> what must refuse it.
ONE_AXIS_FEEDS = ["runner", "onnxruntime", "eager"]


@pytest.mark.fast
@pytest.mark.parametrize("where", ONE_AXIS_FEEDS)
def test_three_axis_model_fed_one_axis_positions_raises(where: str, tmp_path: Path) -> None:
    spec = _spec(mrope_section=(4, 6, 6))
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 4, 5, 32)).astype(np.float32)
    k = rng.standard_normal((1, 2, 5, 32)).astype(np.float32)
    flat = np.arange(5, dtype=np.int64)[None]  # [1, 5]: what a text-only caller might send
    if where == "eager":
        with pytest.raises(RuntimeInputError, match=r"expected \[3, batch, seq\]"):
            reference_module(spec)(torch.from_numpy(q), torch.from_numpy(k), position_ids=torch.from_numpy(flat))
        return
    model = build_rope_graph(spec)
    if where == "onnxruntime":  # past every ropeexport check: ONNX Runtime itself refuses the rank
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        with pytest.raises(Exception, match="position_ids"):
            session.run(None, {"query": q, "key": k, "position_ids": flat})
        return
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    with OrtRunner(path) as runner, pytest.raises(RuntimeInputError, match=r"position_ids: expected rank 3"):
        runner.infer({"query": q, "key": k, "position_ids": flat})
