"""The Qwen-VL text decoders (``qwen2_5_vl_text``, ``qwen3_vl_text``): position_ids [3, batch, seq] in.

Built from tiny random checkpoints transformers saves whole (a one-block vision tower beside, passed over). Two tiers:
the build's own verification (text-only scenarios: three equal rows, against the float64 recompute and transformers'
``...ForConditionalGeneration`` fed the same [3, b, s]), and image-grid prompts fed explicitly to the ONNX model, to
transformers and to the float64 recompute, then a decode step at cache position + rope_deltas.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import ropeexport as rx
from ropeexport.decoder.build import DecoderRequest
from ropeexport.decoder.checkpoint import CheckpointWeights
from ropeexport.decoder.export import prefill_and_step
from ropeexport.decoder.oracle import decoder_float64, stored_float64
from ropeexport.decoder.parts import position_pieces
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.errors import SpecError
from ropeexport.families.rope.mrope import prompt_positions, rope_deltas, text_rows
from ropeexport.positions import PositionInputs
from ropeexport.report.views import DecoderReport
from ropeexport.report.views.base import read_report

transformers = pytest.importorskip("transformers", reason="transformers (the test extra) is the reference")
torch = pytest.importorskip("torch")

# (checkpoint, model type built, graph form, dtype, weight format): every form that builds, fp32 then fp16, int4
BUILDS = [
    ("qwen2_5_vl", "qwen2_5_vl_text", "fused", "fp32", ""),
    ("qwen2_5_vl", "qwen2_5_vl_text", "decomposed", "fp32", ""),
    ("qwen2_5_vl", "qwen2_5_vl_text", "gqa", "fp32", ""),
    ("qwen2_5_vl", "qwen2_5_vl_text", "fused", "fp16", ""),
    ("qwen2_5_vl", "qwen2_5_vl_text", "decomposed", "fp16", ""),
    ("qwen2_5_vl", "qwen2_5_vl_text", "gqa", "fp32", "int4"),
    ("qwen2_vl", "qwen2_vl_text", "fused", "fp32", ""),
    ("qwen3_vl", "qwen3_vl_text", "fused", "fp32", ""),
    ("qwen3_vl", "qwen3_vl_text", "gqa", "fp16", ""),
]


@pytest.mark.parametrize(("name", "model_type", "graph", "dtype", "weights"), BUILDS,
                         ids=["-".join(filter(None, c[:1] + c[2:])) for c in BUILDS])  # fmt: skip
def test_a_qwen_vl_text_decoder_builds_and_passes_against_float64_and_transformers(
    name: str, model_type: str, graph: str, dtype: str, weights: str,
    tiny_checkpoint: Callable[..., Path], tmp_path: Path,
) -> None:  # fmt: skip
    request = DecoderRequest(checkpoint=tiny_checkpoint(name), graph=graph, dtype=dtype, weight_format=weights,
                             name=f"{name}-{graph}-{dtype}{weights}")  # fmt: skip
    result = rx.build_decoder(request, tmp_path)
    report = read_report(Path(result.path) / "report.json", DecoderReport)  # type: ignore[arg-type]
    assert report.spec["model_type"] == model_type and report.spec["text_of"] == name
    assert "ForConditionalGeneration" in report.references.transformers  # the whole VLM, not skipped
    assert result.passed, [(s.name, s.summary.worst_rel) for s in report.scenarios]
    for scenario in report.scenarios:  # every call judged against transformers too
        assert all(call.transformers is not None for call in scenario.calls), scenario.name
    session = ort.InferenceSession(str(Path(result.path) / "model.onnx"), providers=["CPUExecutionProvider"])
    shapes = {i.name: i.shape for i in session.get_inputs()}
    assert shapes["position_ids"] == [3, "batch", "seq"]
    # onnxruntime-genai's Qwen-VL pipeline type feeds [3, batch, seq] (its generic decoder feeds [batch, seq]): the
    # model is the pipeline's one stage (served: tests/decoder/test_genai.py)
    genai = json.loads((Path(result.path) / "genai_config.json").read_text())["model"]
    assert genai["type"] == {"qwen3_vl_text": "qwen3_vl"}.get(model_type, "qwen2_5_vl")
    assert genai["decoder"]["pipeline"][0]["decoder"]["filename"] == "model.onnx"


# (label, prompt segments): text around image grids of (t, h, w) merged patches
PROMPTS = [
    ("text, a 2x3 image, text", [("text", 3), ("image", (1, 2, 3)), ("text", 3)]),
    ("two images", [("text", 2), ("image", (1, 3, 2)), ("text", 1), ("image", (1, 2, 2)), ("text", 2)]),
]
FORMS = ["fused", "decomposed", "gqa"]


@pytest.mark.parametrize("name", ["qwen2_5_vl", "qwen3_vl"])
@pytest.mark.parametrize("graph", FORMS)
def test_image_grid_positions_and_rope_deltas_match_transformers_and_float64(
    name: str, graph: str, tiny_checkpoint: Callable[..., Path], tmp_path: Path
) -> None:
    folder = tiny_checkpoint(name)
    result = rx.build_decoder(DecoderRequest(checkpoint=folder, graph=graph, name=f"{name}-{graph}-img"), tmp_path)
    spec = DecoderSpec.from_dict(json.loads((Path(result.path) / "decoder.json").read_text())["spec"])
    session = ort.InferenceSession(str(Path(result.path) / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    infer = lambda feed: dict(zip(names, session.run(None, feed), strict=True))  # noqa: E731
    model = transformers.AutoModelForImageTextToText.from_pretrained(folder, attn_implementation="eager").eval()
    weights64 = stored_float64(spec, CheckpointWeights(spec, folder))
    pieces = position_pieces(spec)
    rng = np.random.default_rng(0)
    for label, segments in PROMPTS:
        pos = prompt_positions(segments)[:, None]  # [3, 1, s]
        s = pos.shape[-1]
        ids = rng.integers(0, spec.vocab_size, (1, s)).astype(np.int64)
        # decode after the image: its cache position plus rope_deltas on every axis
        step = np.full((3, 1, 1), s + rope_deltas(pos[:, 0]), np.int64)
        ours, nxt = prefill_and_step(infer, spec, ids, pos, step)
        full_ids = np.concatenate([ids, nxt], axis=1)
        full_pos = np.concatenate([pos, step], axis=2)
        mask = np.ones((1, s + 1), np.int64)
        truth = decoder_float64(spec, weights64, full_ids, full_pos, mask, pieces=pieces)
        with torch.no_grad():
            theirs = model(input_ids=torch.from_numpy(full_ids), position_ids=torch.from_numpy(full_pos),
                           attention_mask=torch.from_numpy(mask)).logits.double().numpy()  # fmt: skip
        scale = np.abs(truth).max()
        assert np.abs(ours - truth).max() / scale < 1e-4, (label, "onnx vs float64")
        assert np.abs(theirs - truth).max() / scale < 1e-4, (label, "transformers vs float64")
        # the positions matter: the same tokens at text rows give other logits (an axis ignored would not)
        plain = decoder_float64(spec, weights64, full_ids, text_rows(np.arange(s + 1)[None]), mask, pieces=pieces)
        assert np.abs(plain - truth).max() / scale > 1e-2, (label, "image positions changed nothing")


# (label, request fields, the field named, words of the reason)
REFUSED = [
    ("tensorrt form", {"graph": "tensorrt"}, "graph", "M-RoPE"),
]


@pytest.mark.parametrize(("label", "fields", "field", "words"), REFUSED, ids=[c[0] for c in REFUSED])
def test_what_a_qwen_vl_decoder_cannot_be_is_refused_by_name(
    label: str, fields: dict[str, str], field: str, words: str, tiny_checkpoint: Callable[..., Path]
) -> None:
    with pytest.raises(SpecError) as refused:
        rx.resolve_decoder(DecoderRequest(checkpoint=tiny_checkpoint("qwen2_5_vl"), **fields))  # type: ignore[arg-type]
    assert field in refused.value.field and words in refused.value.message, label


def test_the_block_artifact_refuses_mrope_and_text_rows_fill_three_axes() -> None:
    with pytest.raises(SpecError) as refused:
        rx.export(rx.spec(encoding="rope", artifact="block", num_heads=4, head_dim=16, mrope_section=[2, 3, 3],
                          max_positions=64))  # fmt: skip
    assert refused.value.field == "artifact" and "[batch, seq]" in refused.value.message
    rows = np.array([[0, 1, 5]], np.int64)
    three = PositionInputs(axes=3).text(rows)
    assert three.shape == (3, 1, 3) and all(np.array_equal(three[a], rows) for a in range(3))
    assert PositionInputs().text(rows) is not None and PositionInputs().text(rows).shape == (1, 3)


def test_generate_serves_a_qwen_vl_decoder_on_text_rows_and_says_so(
    tiny_checkpoint: Callable[..., Path], tmp_path: Path
) -> None:
    folder = tiny_checkpoint("qwen2_5_vl")
    built = rx.build_decoder(DecoderRequest(checkpoint=folder, name="qwen2_5_vl-serve"), tmp_path)
    spec = DecoderSpec.from_dict(json.loads((Path(built.path) / "decoder.json").read_text())["spec"])
    prompt, new = [5, 17, 42, 8], 6
    served = rx.generate(built.path, prompt_ids=prompt, max_new_tokens=new)
    assert "all 3 axes (time, height, width)" in served.positions and "image positions are not fed" in served.positions
    assert served.to_dict()["positions"] == served.positions
    # the float64 recompute's greedy picks, fed the same three equal rows
    weights64, pieces = stored_float64(spec, CheckpointWeights(spec, folder)), position_pieces(spec)
    ids = list(prompt)
    for _ in range(new):
        t = len(ids)
        logits = decoder_float64(spec, weights64, np.array([ids], np.int64), text_rows(np.arange(t)[None]),
                                 np.ones((1, t), np.int64), pieces=pieces)  # fmt: skip
        ids.append(int(logits[0, -1].argmax()))
    assert served.tokens == ids[len(prompt) :]


def test_audit_of_its_own_qwen_vl_build_is_exact_pair_by_pair(
    tiny_checkpoint: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.clirun import run

    folder = tiny_checkpoint("qwen2_5_vl")
    built = rx.build_decoder(DecoderRequest(checkpoint=folder, name="qwen2_5_vl-audit"), tmp_path / "built")
    capsys.readouterr()
    out = tmp_path / "audit"
    code, _, err = run(["audit", str(Path(built.path) / "model.onnx"), "--hf-config", str(folder / "config.json"),
                        "--out", str(out)], capsys)  # fmt: skip
    assert code == 0, err
    audit = json.loads((out / "audit.json").read_text())
    assert audit["verdict"] == "exact" and audit["sites"]
    # every pair turns by its axis of mrope_section [2, 3, 3] (tests/audits/test_audit_mrope.py: the faults)
    read = [s["pair_axes"] for s in audit["sites"]]
    assert read and all(axes == [0, 0, 1, 1, 1, 2, 2, 2] for axes in read), read


# (label, position_ids fed for a 3-token call, the error's words): never broadcast, never read past the table
BAD_FEEDS = [
    ("one axis", np.zeros((1, 3), np.int64), "position_ids: expected rank 3"),
    ("height past the table", np.array([[[0, 1, 2]], [[0, 1, 256]], [[0, 1, 2]]], np.int64),
     "value 256 at index [1, 0, 2] is outside the table [0, 256)"),
]


def test_a_qwen_vl_decoder_refuses_one_axis_positions_and_out_of_range_axes(
    tiny_checkpoint: Callable[..., Path], tmp_path: Path
) -> None:
    from ropeexport.errors import RuntimeInputError
    from ropeexport.runtimes.ort import OrtRunner

    built = rx.build_decoder(DecoderRequest(checkpoint=tiny_checkpoint("qwen2_5_vl"), name="qwen2_5_vl-feeds",
                                            eager=False), tmp_path)  # fmt: skip
    runner = OrtRunner(Path(built.path) / "model.onnx", providers=["CPUExecutionProvider"])
    for label, positions, words in BAD_FEEDS:
        feeds = {"input_ids": np.ones((1, 3), np.int64), "attention_mask": np.ones((1, 3), np.int64),
                 "position_ids": positions}  # fmt: skip
        for i in range(2):
            feeds |= {f"past_key_values.{i}.{n}": np.zeros((1, 2, 0, 16), np.float32) for n in ("key", "value")}
        with pytest.raises(RuntimeInputError) as refused:  # the runner's feed check, before ONNX Runtime runs
            runner.infer(feeds)
        assert words in str(refused.value), (label, str(refused.value))
