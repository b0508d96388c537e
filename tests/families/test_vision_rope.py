"""2-D vision RoPE: Pixtral's axial (even/odd) and Qwen2.5-VL's ViT (shared) rotary over (height, width) positions.

Against transformers 5.23's own modules (PixtralVisionRotaryEmbedding, Qwen2_5_VLVisionRotaryEmbedding with their
apply functions) on tiny configs, every form verified per position against the float64 oracle through the pipeline,
and the bad inputs refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

import ropeexport as rx
from ropeexport.errors import RuntimeInputError, SpecError
from ropeexport.families.vision_rope.export import build_vision_rope_graph
from ropeexport.families.vision_rope.oracle import pair_frequencies, vision_rope_oracle
from ropeexport.families.vision_rope.probes import vision_probes
from ropeexport.families.vision_rope.reference import VisionRotaryEmbedding
from ropeexport.families.vision_rope.spec import VisionRopeSpec
from ropeexport.requests import from_hf_config
from ropeexport.runtimes.ort import OrtRunner
from tests.clirun import run

P = 16  # patches a side of every artifact here


def _spec(**fields: Any) -> VisionRopeSpec:
    return VisionRopeSpec(**({"head_dim": 16, "num_heads": 2, "max_positions": P} | fields))


def _transformers(model: str, head_dim: int, theta: float) -> tuple[Any, Any]:
    """transformers' vision rotary module and its apply function for a tiny config (2 heads of ``head_dim``)."""
    if model == "pixtral":
        from transformers.models.pixtral import configuration_pixtral as c
        from transformers.models.pixtral import modeling_pixtral as m

        config = c.PixtralVisionConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                                       image_size=P * 4, patch_size=4,
                                       rope_parameters={"rope_type": "axial", "rope_theta": theta})  # fmt: skip
        return m.PixtralVisionRotaryEmbedding(config), m.apply_rotary_pos_emb
    from transformers.models.qwen2_5_vl import configuration_qwen2_5_vl as c
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as m

    config = c.Qwen2_5_VLVisionConfig(hidden_size=2 * head_dim, num_heads=2,
                                      rope_parameters={"rope_type": "axial", "rope_theta": theta})  # fmt: skip

    def apply(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Any:
        # [b, h, s, d] -> Qwen's [s, h, d] (one image, no batch), cos/sin [s, d]
        q2, k2 = m.apply_rotary_pos_emb_vision(q[0].transpose(0, 1), k[0].transpose(0, 1), cos, sin)
        return q2.transpose(0, 1)[None], k2.transpose(0, 1)[None]

    return m.Qwen2_5_VLVisionRotaryEmbedding(config), apply


# The case table: each model as transformers 5.23 computes it -> the spec fields that say it.
MODELS = [
    pytest.param("pixtral", 16, 10000.0, {"axis_frequencies": "even-odd"}, id="pixtral-even-odd"),
    pytest.param("qwen2_5_vl", 16, 10000.0, {"axis_frequencies": "shared"}, id="qwen2_5_vl-shared"),
    pytest.param("pixtral", 32, 500.0, {"axis_frequencies": "even-odd", "head_dim": 32, "theta": 500.0},
                 id="pixtral-head32-theta500"),  # fmt: skip
]


def _positions(seed: int) -> np.ndarray:
    """[s, 2] as transformers builds them: a 3 x 5 grid (row-major), then random patches anywhere on the table."""
    hh, ww = np.meshgrid(np.arange(3), np.arange(5), indexing="ij")
    grid = np.stack([hh.ravel(), ww.ravel()], axis=-1)
    other = np.random.default_rng(seed).integers(0, P, (9, 2))
    return np.concatenate([grid, other]).astype(np.int64)


@pytest.mark.fast
@pytest.mark.parametrize(("model", "head_dim", "theta", "fields"), MODELS)
def test_oracle_is_transformers_recomposition_in_float64(
    model: str, head_dim: int, theta: float, fields: dict[str, Any]
) -> None:
    rotary, apply = _transformers(model, head_dim, theta)
    spec = _spec(**fields)
    # transformers' inverse frequencies are float32: ours rounded to float32 are the same numbers (a 1-ulp pow).
    axis, freq = pair_frequencies(spec)
    theirs_inv = rotary.inv_freq.double().numpy()  # [d/2] (Pixtral: even then odd) or [d/4] (Qwen: one axis's)
    expected = np.concatenate([theirs_inv] * (2 if theirs_inv.size == head_dim // 4 else 1))
    np.testing.assert_allclose(freq, expected, rtol=2e-7, atol=0)
    # Their recomposition (which axis turns which pair) on float64 angles of our frequencies.
    pos = _positions(0)  # [s, 2]
    own = freq[: head_dim // 4] if theirs_inv.size == head_dim // 4 else np.concatenate(
        [freq[axis == 0], freq[axis == 1]])  # fmt: skip
    every = torch.from_numpy(pos).double()[..., None] * torch.from_numpy(own)  # [s, 2, their inv size]
    angles = rotary.recomposition_frequencies(every)  # [s, d]: the half-width angles, twice
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 2, len(pos), head_dim))
    k = rng.standard_normal((1, 2, len(pos), head_dim))
    cos, sin = angles.cos(), angles.sin()
    if model == "pixtral":
        cos, sin = cos[None], sin[None]
    if model == "pixtral":
        q_tf, k_tf = apply(torch.from_numpy(q), torch.from_numpy(k), cos, sin)
    else:  # apply_rotary_pos_emb_vision rotates in float32: its formula, in float64, with the module's rotate_half
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import rotate_half

        q_tf, k_tf = (x * cos + rotate_half(x) * sin for x in (torch.from_numpy(q), torch.from_numpy(k)))
    ours = pos.T[:, None]  # [2, 1, s]: this artifact's position_ids
    np.testing.assert_allclose(vision_rope_oracle(spec, q, ours), q_tf.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(vision_rope_oracle(spec, k, ours), k_tf.numpy(), rtol=0, atol=1e-12)


@pytest.mark.fast
@pytest.mark.parametrize(("model", "head_dim", "theta", "fields"), MODELS[:2])
@pytest.mark.parametrize("graph", ["fused", "decomposed"])
def test_artifact_matches_transformers_float32_forward(
    model: str, head_dim: int, theta: float, fields: dict[str, Any], graph: str
) -> None:
    rotary, apply = _transformers(model, head_dim, theta)
    spec = _spec(graph=graph, **fields)
    pos = _positions(2)
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 2, len(pos), head_dim)).astype(np.float32)
    k = rng.standard_normal((1, 2, len(pos), head_dim)).astype(np.float32)
    cos, sin = rotary(torch.from_numpy(q), torch.from_numpy(pos))  # float32 angles, as transformers runs
    if model == "pixtral":
        cos, sin = cos[None], sin[None]
    q_tf, k_tf = apply(torch.from_numpy(q), torch.from_numpy(k), cos, sin)
    session = ort.InferenceSession(build_vision_rope_graph(spec).SerializeToString(),
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    q_out, k_out = session.run(["query_out", "key_out"], {"query": q, "key": k, "position_ids": pos.T[:, None]})
    np.testing.assert_allclose(q_out, q_tf.numpy(), rtol=0, atol=2e-5)  # float32 angles at p < 16: ~1e-6 rad
    np.testing.assert_allclose(k_out, k_tf.numpy(), rtol=0, atol=2e-5)


# Verified through the pipeline per position against eager and float64: what tests/test_every_kind.py does not run
# (a second runtime, bf16, the shared split). fp16 and the decomposed form are test_every_kind's rows.
FORMS = [
    pytest.param("even-odd", "fused", "fp32", ("ort", "onnx-reference"), id="even-odd-fused-fp32"),
    pytest.param("shared", "fused", "bf16", ("onnx-reference",), id="shared-fused-bf16"),
]


@pytest.mark.parametrize(("frequencies", "graph", "dtype", "runtimes"), FORMS)
def test_every_form_verifies_per_patch_over_both_axes(
    frequencies: str, graph: str, dtype: str, runtimes: tuple[str, ...], tmp_path: Path
) -> None:
    spec = _spec(axis_frequencies=frequencies, graph=graph, dtype=dtype)
    result = rx.build(spec, tmp_path, runtimes=list(runtimes))
    report = result.report
    assert result.passed, [c for c in report["comparisons"] if not c["passed"]]
    probes = {p["name"] for p in report["probes"]}
    assert {"grid-at-end", "merge-order", f"sweep-height[0..{P - 1}]", f"sweep-width[0..{P - 1}]"} <= probes
    assert {t["name"] for t in report["tables"] if t["passed"]} == {
        f"{a}_{k}_table" for a in ("height", "width") for k in ("cos", "sin")}  # fmt: skip
    assert all(g["passed"] for g in report["guards"]) and len(report["guards"]) == 4 * len(runtimes)


@pytest.mark.fast
def test_probes_reach_every_position_on_each_axis_and_every_patch() -> None:
    probes, coverage = vision_probes(_spec())
    for axis in range(2):
        seen = np.unique(np.concatenate([p.positions["position_ids"][axis].ravel() for p in probes]))
        assert seen.tolist() == list(range(P)), f"axis {axis} misses positions"
    pairs = {tuple(x) for p in probes for x in p.positions["position_ids"].reshape(2, -1).T.tolist()}
    assert len(pairs) == P * P and "every (height, width) patch" in coverage["sweep"]


# Bad input: (fields, the field named, words of the message).
BAD = [
    pytest.param({"head_dim": 18}, "head_dim", "multiple of 4", id="head-dim-not-quarterable"),
    pytest.param({"axis_frequencies": "odd-even"}, "axis_frequencies", "even-odd, shared", id="unknown-split"),
    pytest.param({"theta": 1.0}, "theta", "> 1", id="theta-one"),
    pytest.param({"artifact": "scores"}, "artifact", "rope", id="scores"),
    pytest.param({"graph": "plugin"}, "graph", "fused, decomposed", id="plugin"),
    pytest.param({"max_positions": 70000}, "max_positions", "65536", id="too-many-patches"),
]


@pytest.mark.fast
@pytest.mark.parametrize(("fields", "field", "words"), BAD)
def test_bad_vision_spec_names_the_field(fields: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        _spec(**fields)
    assert caught.value.field == field
    assert words in str(caught.value)


@pytest.mark.fast
@pytest.mark.parametrize("where", ["runner", "eager"])
def test_two_axis_model_fed_one_axis_positions_raises(where: str, tmp_path: Path) -> None:
    spec = _spec()
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 5, 16)).astype(np.float32)
    flat = np.arange(5, dtype=np.int64)[None]  # [1, 5]: a flattened patch index, as Pixtral 4.x fed it
    if where == "eager":
        with pytest.raises(RuntimeInputError, match=r"expected \[2, batch, seq\]"):
            VisionRotaryEmbedding(spec)(torch.from_numpy(q), torch.from_numpy(q), position_ids=torch.from_numpy(flat))
        return
    path = tmp_path / "model.onnx"
    path.write_bytes(build_vision_rope_graph(spec).SerializeToString())
    with OrtRunner(path) as runner, pytest.raises(RuntimeInputError, match=r"position_ids: expected rank 3"):
        runner.infer({"query": q, "key": q, "position_ids": flat})


def _tiny_config(model: str) -> dict[str, Any]:
    """transformers' own tiny vision config of ``model`` (to_dict), as a config.json holds it."""
    if model == "pixtral":
        from transformers.models.pixtral.configuration_pixtral import PixtralVisionConfig

        return PixtralVisionConfig(hidden_size=64, num_attention_heads=4, head_dim=16, image_size=96, patch_size=8,
                                   rope_parameters={"rope_type": "axial", "rope_theta": 500.0}).to_dict()  # fmt: skip
    from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig

    return Qwen2_5_VLVisionConfig(hidden_size=96, num_heads=4).to_dict()


# Config import: (the config, what it must read) -> each field with the key it came from.
IMPORTS = [
    pytest.param(lambda: _tiny_config("pixtral"), {"axis_frequencies": "even-odd", "head_dim": 16, "num_heads": 4,
                 "theta": 500.0, "max_positions": 12}, {"theta": "rope_parameters.rope_theta",
                 "max_positions": "image_size // patch_size", "head_dim": "head_dim"}, id="pixtral-5x"),
    pytest.param(lambda: {"model_type": "llava", "vision_config": {"model_type": "pixtral", "hidden_size": 1024,
                 "num_attention_heads": 16, "head_dim": 64, "image_size": 1024, "patch_size": 16,
                 "rope_theta": 10000.0}}, {"axis_frequencies": "even-odd", "head_dim": 64, "max_positions": 64},
                 {"theta": "vision_config.rope_theta", "max_positions": "vision_config.image_size // "
                  "vision_config.patch_size"}, id="llava-pixtral-4x-hub"),
    pytest.param(lambda: {"model_type": "qwen2_5_vl", "vision_config": {"hidden_size": 1280, "num_heads": 16,
                 "patch_size": 14}}, {"axis_frequencies": "shared", "head_dim": 80, "theta": 10000.0},
                 {"head_dim": "vision_config.hidden_size / vision_config.num_heads",
                  "theta": "the vision config class's default rope_theta "
                  "(10000)"}, id="qwen2_5_vl-hub-no-model-type"),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("config", "fields", "sources"), IMPORTS)
def test_vision_config_import_reads_each_key_with_its_source(
    config: Any, fields: dict[str, Any], sources: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config()))
    [spec] = rx.from_hf_config(path, encoding="vision_rope")
    assert {k: getattr(spec, k) for k in fields} == fields
    requests = from_hf_config(path, vision=True)
    assert {k: requests[0].sources[k] for k in sources} == sources


@pytest.mark.fast
@pytest.mark.parametrize("model", ["pixtral", "qwen2_5_vl"])
def test_imported_spec_turns_by_transformers_own_frequencies(model: str, tmp_path: Path) -> None:
    config = _tiny_config(model)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    [spec] = rx.from_hf_config(path)  # a vision config alone: its 2-D RoPE without --encoding
    rotary = _transformers(model, spec.head_dim, spec.theta)[0] if model == "qwen2_5_vl" else None
    if rotary is None:
        from transformers.models.pixtral import configuration_pixtral as c
        from transformers.models.pixtral import modeling_pixtral as m

        rotary = m.PixtralVisionRotaryEmbedding(c.PixtralVisionConfig(**config))
    axis, freq = pair_frequencies(spec)
    theirs = rotary.inv_freq.double().numpy()
    theirs = np.concatenate([theirs, theirs]) if theirs.size == spec.head_dim // 4 else theirs
    np.testing.assert_allclose(freq, theirs, rtol=2e-7, atol=0)


BAD_CONFIGS = [
    pytest.param({"model_type": "pixtral", "num_attention_heads": 4, "head_dim": 16, "image_size": 64,
                  "patch_size": 8, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}},
                 "rope_parameters.rope_type: must be 'axial'", id="rope-type-not-axial"),
    pytest.param({"model_type": "pixtral", "num_attention_heads": 4, "head_dim": 16, "image_size": 64,
                  "patch_size": 8, "rope_parameters": {"rope_type": "axial", "factor": 2.0}},
                 "rope_parameters.factor: unknown key", id="unknown-rope-key"),
    pytest.param({"model_type": "pixtral", "num_attention_heads": 4, "head_dim": 16, "patch_size": 8},
                 "image_size: missing", id="no-image-size"),
    pytest.param({"model_type": "llava", "vision_config": {"model_type": "clip_vision_model"}},
                 "vision_config.model_type: 'clip_vision_model' has no 2-D RoPE", id="clip-tower"),
    pytest.param({"model_type": "qwen2_5_vl", "vision_config": {"hidden_size": 90, "num_heads": 4}},
                 "hidden_size: must be divisible by num_heads", id="heads-not-dividing"),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("config", "message"), BAD_CONFIGS)
def test_bad_vision_config_is_one_line_exit_2(
    config: dict[str, Any], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, out = tmp_path / "config.json", tmp_path / "out"
    path.write_text(json.dumps(config))
    code, _, err = run(["build", "--hf-config", str(path), "--encoding", "vision_rope", "--out", str(out)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert message in err
    assert not out.exists(), "bad input wrote something"
