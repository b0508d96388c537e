"""The Python API (``import ropeexport as rx``): what it returns, that the CLI's default writes the bytes pinned here,
and that the Python API tutorial's examples (docs/tutorials/python-api.md) run as written."""  # noqa: D205

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import onnx
import pytest

import ropeexport as rx
from ropeexport.catalog import spec_from_dict
from ropeexport.defaults import DEFAULT_PRESETS, FEATURE_SPECS
from ropeexport.errors import ArtifactError, SpecError

ROOT = Path(__file__).resolve().parents[1]

# sha256 of each model.onnx that `ropeexport build` (the embedded default) and the feature set write, measured
# before the move to one package per family and again after it: the move changed no byte. The model records
# ropeexport's version (producer_version), so a version bump changes these on purpose; re-pin them then.
DEFAULT_MODEL_SHA256 = {
    "bloom-560m-bias-fp16-fused": "e63ca21c88a64cb886a9073d6194d67a90c992e22181e0e1a7dc01a4856bbb46",
    "kerple-log-162m-bias-fp32-fused": "ce55304d945b7cb1f4297bdfcbcd654d89afc0d8e0bb90a6453352c2264c06ee",
    "llama-3.1-8b-rope-fp16-fused": "8fc845a9e9b73876271022713eb6f303ff067a17e5dd974daedcc09d0fbd4c41",
    "pixtral-12b-vision-rope-fp32-fused": "a9500ed51c9c86d8b927e14870cd8cae729d09959483fe43f34d39e87f82e7e9",
    "sandwich-bias-fp32-fused": "4f806c69dd45f2e6cfc342cf915d6ffd3e7bc22a48b9845b94dff1d8477aec7d",
    "shaw-transformer-base-attention-fp32-fused": "24ef49812a159be24366dc73ab2462b0560510cca732c533a77c8a6f77600da1",
    "t5-base-bias-fp32-fused": "cf34b817c912e376bef683129edb69b6c7fa9e83f21ceeea6e52448eeba2ef95",
    "transformer-base-apply-fp32-fused": "4c6999903efbd736638d54b666091c56ee2dec66ed5dc18613b20b959811430d",
    "transformer-xl-wt103-scores-fp32-fused": "e9051cc438d4c67e6b7099f11e034716f73a2f17618f72bd218c0b89feb2ce1d",
    "tupe-base-scores-fp32-fused": "d0f69cf3d13fab94661c48947cdc7995e16e74a83989dc3674521ade94cec482",
}
FEATURE_MODEL_SHA256 = {
    "alibi12-attention-fp32-fused": "9aaf24db4e7555af3e27bd3f499d15ed0fce7057698be417e6e2e8d73efb7005",
    "complex-fp32-decomposed": "a51cf3e843d6bf37a17cb7943112a390dc711ee2401b2ec1ffa8334ed3bf1a95",
    "dynamic-half-fp16-fused": "97159cc908760b0bcde771f0ca3d90e32f0cf7c369f5a092f3e1c00842dd411c",
    "gptj-interleaved-fp16-decomposed": "84591509c32e97ca1df35cd5e9cebafb87be121595c813b07b317bd5c00e2047",
    "kerple-log-scores-fp32-fused": "d56c58c2ffe03483038af434e41732e29bcc34af31264bbd920708c2c2db9f35",
    "llama3-half-fp32-fused": "cb4cde1d80d83646472d8a462f9839ea3f6970cc5439ed98e8703c6d11582b4b",
    "longrope-half-fp32-decomposed": "8ad06486142f4d0fd86328d3fb5558a830daaf4728bf13b9c6be957b700cbacd",
    "sandwich-bias-fp32-fused": "6effa769cf45318332559918685ddb77f07d70fd0f5a761b8fda01b425fe5a1b",
    "shaw-attention-fp16-decomposed": "244d7d07c19c3ecae9d93e46f48b789ceeec39f58012a0d3efb355bb87f329c8",
    "sinusoidal-apply-fp32-fused": "98334729e4477d8ebb1620c05f4d955f345f742f13542d59f983bd9b801885b1",
    "t5-bias-fp32-fused": "1696602896cb52c69a8caefc5b4d21bcf43e19f669c3becca91e314ae1bfd398",
    "transformer-xl-scores-fp32-fused": "80825ea48071788c030eafc6d876ee1e796723fece4f281c9b4c6bc9f7811ddf",
    "tupe-scores-fp32-fused": "554607fde41cd7a652b2af25a222a13e7a625bf5566c6f844d7520bf5e49cf20",
    "yarn-half-bf16-fused": "98abd4768cf1237187629efc7c761671506049b852bc28a3ca2004bcc2783100",
    "vision-rope-shared-fp32-fused": "040e08dc080108d12873e39d2923d7c46e50fe7ddeb3d728e0818975d1b1c672",
}


def _sha256_of_export(spec: object) -> str:
    return hashlib.sha256(rx.export(spec).SerializeToString()).hexdigest()


@pytest.mark.parametrize("name", sorted(DEFAULT_MODEL_SHA256))
def test_the_embedded_default_writes_the_pinned_bytes(name: str, tmp_path: Path) -> None:
    from ropeexport.graph.onnx_io import save_model, sha256

    specs = {s.name: s for preset in DEFAULT_PRESETS for s in rx.from_preset(preset)}
    assert sorted(specs) == sorted(DEFAULT_MODEL_SHA256)  # the default still builds exactly these artifacts
    assert save_model(rx.export(specs[name]), tmp_path) == ["model.onnx"]
    assert sha256(tmp_path / "model.onnx") == DEFAULT_MODEL_SHA256[name]


@pytest.mark.parametrize("fields", FEATURE_SPECS, ids=[f["name"] for f in FEATURE_SPECS])
def test_the_feature_set_writes_the_pinned_bytes(fields: dict, tmp_path: Path) -> None:
    from ropeexport.graph.onnx_io import save_model, sha256

    save_model(rx.export(spec_from_dict(fields)), tmp_path)
    assert sha256(tmp_path / "model.onnx") == FEATURE_MODEL_SHA256[fields["name"]]


def test_api_names_are_functions_and_not_shadowed_by_modules() -> None:
    # `import ropeexport.pipeline` (or any submodule) must not replace rx.build with a module: no submodule is named
    # after an API function.
    import ropeexport.pipeline  # noqa: F401
    import ropeexport.verification.core  # noqa: F401

    for name in rx.__all__:
        if name != "__version__":
            assert callable(getattr(rx, name)), name
            assert not (ROOT / "ropeexport" / f"{name}.py").exists() and not (ROOT / "ropeexport" / name).is_dir()
            # nor a module of the api package (``import ropeexport.api.build`` would replace ropeexport.api.build)
            assert not (ROOT / "ropeexport" / "api" / f"{name}.py").exists(), name


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: rx.spec("rope", theta=0.5), "theta"),
        (lambda: rx.spec("rope", layout="diagonal"), "layout"),
        (lambda: rx.spec("nope"), "encoding"),
        (lambda: rx.spec("alibi", layout="half"), "layout"),
        (lambda: rx.from_preset("llama-9"), "preset"),
        (lambda: rx.from_preset("llama-3.1-8b", max_positions=0), "max_positions"),
        (lambda: rx.load_specs("spec.yaml"), "spec_file"),
        (lambda: rx.check_trt(onnx.ModelProto(), "9.9"), "trt_version"),
        (lambda: rx.build_all([], "out", jobs=0), "jobs"),
        (lambda: rx.diff("a", "b", max_growth=0.5), "max_growth"),
    ],
)
def test_library_errors_name_fields_not_flags(call: object, field: str) -> None:
    with pytest.raises(SpecError) as info:
        call()  # type: ignore[operator]
    assert info.value.field == field
    assert "--" not in str(info.value)


def test_build_verify_diff_round_trip(tmp_path: Path) -> None:
    spec = rx.spec("rope", head_dim=32, num_heads=2, max_positions=256, scaling="linear", scaling_params={"factor": 2})
    result = rx.build(spec, tmp_path / "out", atol=1e-5)
    assert result.passed and result.path == tmp_path / "out" / spec.name
    assert result.encoding_report.spec["scaling_params"] == {"factor": 2.0}
    again = rx.verify(result.path)
    assert [r.passed for r in again] == [True]
    diff = rx.diff(result.path, again[0].path)
    assert not diff.regressed
    with pytest.raises(SpecError, match="atol"):
        rx.build(spec, tmp_path / "out", atol=-1.0)


def test_build_all_writes_the_index_and_refuses_duplicates(tmp_path: Path) -> None:
    a = rx.spec("alibi", num_heads=4, head_dim=8, max_positions=64)
    b = rx.spec("sinusoidal", d_model=16, max_positions=64)
    with pytest.raises(SpecError, match="name"):
        rx.build_all([a, a], tmp_path)
    assert not any(tmp_path.iterdir())  # refused before anything was written
    results = rx.build_all([a, b], tmp_path)
    assert [r.name for r in results] == [a.name, b.name] and all(r.passed for r in results)
    index = json.loads((tmp_path / "index.json").read_text())
    assert sorted(e["name"] for e in index["artifacts"]) == sorted([a.name, b.name])


def test_export_is_the_cli_artifacts_model(tmp_path: Path) -> None:
    spec = rx.spec("t5", num_heads=4, max_positions=128)
    built = rx.build(spec, tmp_path)
    on_disk = onnx.load(str(built.path / "model.onnx"))
    assert on_disk.SerializeToString() == rx.export(spec).SerializeToString()


def _tutorial_api_examples() -> list[str]:
    text = (ROOT / "docs" / "tutorials" / "python-api.md").read_text()
    section = text.split("\n## Specs, export, build\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_tutorial_has_python_api_examples() -> None:
    assert len(_tutorial_api_examples()) >= 2


@pytest.mark.parametrize("index", range(len(_tutorial_api_examples())))
def test_tutorial_python_api_example_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples write relative paths (out/, ...)
    code = _tutorial_api_examples()[index]
    exec(compile(code, f"python-api.md example {index + 1}", "exec"), {"__name__": "__docs__"})


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda tmp: rx.build(rx.spec("alibi", num_heads=2), ""), "out_dir"),
        (lambda tmp: rx.build_all([rx.spec("alibi", num_heads=2)], "  "), "out_dir"),
        (lambda tmp: rx.verify(""), "path"),
        (lambda tmp: rx.diff("", tmp), "old"),
        (lambda tmp: rx.export(None), "spec"),
        (lambda tmp: rx.export({"encoding": "rope"}), "spec"),
        (lambda tmp: rx.check_trt(123, "10.15"), "model"),
        (lambda tmp: rx.check_trt(rx.export(rx.spec("alibi", num_heads=2)), 10.1), "trt_version"),
        (lambda tmp: rx.from_preset("llama-3.1-8b", dtypes=[1]), "dtypes"),
        (lambda tmp: rx.from_preset("deepseek-v2-lite", artifacts="block"), "artifact"),
    ],
)
def test_api_refuses_what_it_cannot_mean(call: object, field: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        call(tmp_path)  # type: ignore[operator]
    assert info.value.field == field, str(info.value)


def test_one_name_is_a_list_of_one() -> None:
    specs = rx.from_preset("mistral-7b", dtypes="fp32", graphs="decomposed", max_positions=512)
    assert [(s.dtype, s.graph) for s in specs] == [("fp32", "decomposed")]


def test_build_refuses_a_folder_that_is_not_a_tree(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SpecError, match="not a ropeexport tree"):
        rx.build(rx.spec("alibi", num_heads=2, max_positions=32), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_verify_refuses_a_tree_with_a_damaged_manifest(tmp_path: Path) -> None:
    specs = [rx.spec("alibi", num_heads=2, max_positions=32), rx.spec("t5", num_heads=2, max_positions=32)]
    results = rx.build_all(specs, tmp_path)
    (results[1].path / "manifest.json").write_text('{"broken": ')
    with pytest.raises(ArtifactError) as info:
        rx.verify(tmp_path)
    assert info.value.field.startswith(f"{results[1].name}/")  # names the damaged artifact, verifies nothing


def test_a_skipped_runtime_is_visible_on_the_result(tmp_path: Path) -> None:
    result = rx.build(rx.spec("alibi", num_heads=2, max_positions=32), tmp_path, runtimes=["ort", "trt"])
    assert "trt" in result.skipped and result.skipped["trt"]  # with the reason; passed covers the others


# One value per DecoderRequest field, each not its default: every field must reach ``decoder.build.resolve`` through
# every form of the API, with nothing else changed, so that adding a field to the request is all the API needs. A
# field added without a line here fails test_every_request_field_has_a_sample.
SAMPLES: dict[str, object] = {
    "hf_config": Path("config.json"),
    "checkpoint": Path("ckpt"),
    "preset": "llama-2-7b",
    "config": {"model_type": "llama"},
    "dtype": "fp16",
    "graph": "decomposed",
    "num_layers": 2,
    "hidden_size": 64,
    "vocab_size": 100,
    "max_positions": 512,
    "name": "mine",
    "weight_format": "int4",
    "block_size": 64,
    "accuracy_level": 4,
    "symmetric": False,
    "eager": False,
    "latent_cache": True,
    "runtimes": ("onnx-reference",),
}
CALLS = {
    "build_decoder(request, out_dir)": lambda fields, out: rx.build_decoder(rx.DecoderRequest(**fields), out),
    "build_decoder(out_dir, **fields)": lambda fields, out: rx.build_decoder(out, **fields),
    "build_decoder(out_dir=, **fields)": lambda fields, out: rx.build_decoder(out_dir=out, **fields),
    "resolve_decoder(request)": lambda fields, out: rx.resolve_decoder(rx.DecoderRequest(**fields)),
    "resolve_decoder(**fields)": lambda fields, out: rx.resolve_decoder(**fields),
}


class _Reached(Exception):
    """Raised by the stand-in for ``resolve``: the request got there, and nothing is built."""


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The requests ``decoder.build.resolve`` is handed (each call then stops with ``_Reached``)."""
    import ropeexport.decoder.build

    seen: list[object] = []

    def stand_in(request: object) -> None:
        seen.append(request)
        raise _Reached

    monkeypatch.setattr(ropeexport.decoder.build, "resolve", stand_in)
    return seen


def test_every_request_field_has_a_sample() -> None:
    fields = {f.name: f.default for f in dataclasses.fields(rx.DecoderRequest)}
    assert sorted(SAMPLES) == sorted(fields)
    assert all(SAMPLES[name] != default for name, default in fields.items())


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("field", sorted(SAMPLES))
def test_every_request_field_reaches_resolve(field: str, call: str, resolved: list[object], tmp_path: Path) -> None:
    with pytest.raises(_Reached):
        CALLS[call]({field: SAMPLES[field]}, tmp_path / "out")
    assert resolved == [rx.DecoderRequest(**{field: SAMPLES[field]})]  # that field, and every other at its default
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda tmp: rx.build_decoder(rx.DecoderRequest(preset="llama-2-7b"), tmp, eager=False), "eager"),
        (lambda tmp: rx.resolve_decoder(rx.DecoderRequest(preset="llama-2-7b"), dtype="fp16"), "dtype"),
        (lambda tmp: rx.build_decoder(rx.DecoderRequest(preset="llama-2-7b")), "out_dir"),
        (lambda tmp: rx.build_decoder(tmp, tmp / "config.json"), "request"),  # the older form's rest by keyword
        (lambda tmp: rx.build_decoder({"preset": "llama-2-7b"}, tmp), "request"),
        (lambda tmp: rx.resolve_decoder("config.json"), "request"),
        (lambda tmp: rx.build_decoder(tmp, presets="llama-2-7b"), "presets"),
        (lambda tmp: rx.resolve_decoder(preset="llama-2-7b", num_layers="two"), "num_layers"),
    ],
)
def test_decoder_calls_refuse_what_they_cannot_mean(call: object, field: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        call(tmp_path / "out")  # type: ignore[operator]
    assert info.value.field == field, str(info.value)
    assert not (tmp_path / "out").exists()


def test_the_older_keyword_form_resolves_the_same_spec() -> None:
    fields: dict[str, object] = {"preset": "llama-2-7b", "num_layers": 1, "hidden_size": 256, "vocab_size": 128,
                                 "dtype": "fp16", "graph": "gqa", "eager": False}  # fmt: skip
    spec = rx.resolve_decoder(rx.DecoderRequest(**fields))  # type: ignore[arg-type]
    assert spec == rx.resolve_decoder(**fields)
    assert spec.name == "llama-2-7b-decoder-l1-h256-v128-fp16-gqa"
