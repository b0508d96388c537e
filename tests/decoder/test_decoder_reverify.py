"""``ropeexport verify`` and ``ropeexport diff`` on decoder folders (``decoder.kind``, ``decoder.diff``).

verify: each row damages a copy of one tiny seeded decoder and runs the real CLI: an untouched folder passes (exit 0,
fresh reports, each scenario shown beside its stored numbers); a file whose bytes no longer match the manifest, or,
with its hash rewritten to match, a decoder.json or genai_config.json that no longer describes the (hashed) model, is
bad input (exit 2, one line naming it); a model that is a valid ONNX decoder but computes something else, its hashes
rewritten to match, fails verification (exit 1).
diff: each row edits a copy of the decoder's report.json and compares it with the original.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import ropeexport as rx
from ropeexport.decoder.export import build_decoder_graph
from ropeexport.decoder.kind import DecoderVerifyResult, rebuild_spec
from ropeexport.decoder.weights import seeded_weights
from ropeexport.graph.onnx_io import save_model, sha256
from ropeexport.report.views import DecoderReport, ScenarioRecord, ScenarioRerun, read_report
from tests.clirun import run
from tests.report.sample_report import minimal_report


@pytest.fixture
def built(seeded_decoder: Path) -> Path:
    return seeded_decoder


@pytest.fixture
def decoder(built: Path, tmp_path: Path) -> Path:
    copy_ = tmp_path / built.name
    shutil.copytree(built, copy_)
    return copy_


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _edit_json(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = _json(path)
    change(data)
    path.write_text(json.dumps(data, indent=2))


def _rehash(folder: Path) -> None:
    """The manifest's sha256 rewritten to the files as they are now: the hashes no longer catch the change."""
    _edit_json(folder / "manifest.json", lambda r: r.update(files={f: sha256(folder / f) for f in r["files"]}))


def _rehashed(change: Callable[[Path], None]) -> Callable[[Path], None]:
    def both(folder: Path) -> None:
        change(folder)
        _rehash(folder)

    return both


def _flip_byte(folder: Path) -> None:
    data = bytearray((folder / "model.onnx").read_bytes())
    data[len(data) // 2] ^= 0x01
    (folder / "model.onnx").write_bytes(bytes(data))


def _scaled_weight(folder: Path) -> None:
    """The largest initializer (an MLP projection) x 1.01, saved as a valid model, hashes rewritten."""
    model = onnx.load(str(folder / "model.onnx"))
    tensor = max(model.graph.initializer, key=lambda t: int(np.prod(t.dims)))
    tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) * np.float32(1.01), tensor.name))
    onnx.save(model, str(folder / "model.onnx"))
    _rehash(folder)


def _other_theta(folder: Path) -> None:
    """The same weights built with theta / 4, the stored spec in its metadata, hashes rewritten."""
    spec = rebuild_spec(_json(folder / "decoder.json"))
    other = spec.replace(position=dict(spec.position) | {"theta": spec.position["theta"] / 4})
    model = build_decoder_graph(other, seeded_weights(spec), "seeded (numpy default_rng(0))")
    for prop in model.metadata_props:
        if prop.key == "ropeexport.spec":
            prop.value = spec.digest_text()
    for name in _json(folder / "manifest.json")["files"]:
        if name.startswith("model.onnx"):  # the model's files; the genai package stays
            (folder / name).unlink()
    assert save_model(model, folder) == ["model.onnx"]
    _rehash(folder)


def _theta_in_decoder_json(folder: Path) -> None:
    _edit_json(folder / "decoder.json", lambda d: d["spec"]["position"].update(theta=20000.0))


def _weights_in_decoder_json(folder: Path) -> None:
    _edit_json(folder / "decoder.json", lambda d: d.update(weights=f"checkpoint {str(folder)!r}"))


def _unknown_spec_field(folder: Path) -> None:
    _edit_json(folder / "decoder.json", lambda d: d["spec"].update(heads=3))


def _not_a_decoder_manifest(folder: Path) -> None:
    _edit_json(folder / "manifest.json", lambda r: r.update(artifact="block"))


def _eos_in_decoder_json(folder: Path) -> None:
    _edit_json(folder / "decoder.json", lambda d: d["config"].update(eos_token_id=5))


def _theta_in_decoder_json_config(folder: Path) -> None:  # the config the transformers reference is made from
    _edit_json(folder / "decoder.json",
               lambda d: d["config"].update(rope_parameters={"rope_type": "default", "rope_theta": 20000.0}))


def _genai(**model: Any) -> Callable[[Path], None]:
    return lambda folder: _edit_json(folder / "genai_config.json", lambda g: g["model"].update(model))


def _session_options(options: dict[str, Any]) -> Callable[[Path], None]:
    return lambda folder: _edit_json(folder / "genai_config.json",
                                     lambda g: g["model"]["decoder"].update(session_options=options))


def _unchanged(folder: Path) -> None:
    pass


# (case, damage, extra flags, exit code, text the output or the error must hold)
VERIFY_CASES: list[tuple[str, Callable[[Path], None], list[str], int, str]] = [
    ("untouched", _unchanged, [], 0, "PASS "),
    ("model.onnx bytes changed", _flip_byte, [], 2,
     "error: files.model.onnx: sha256 differs from the manifest"),
    ("model.onnx missing", lambda f: (f / "model.onnx").unlink(), [], 2, "error: files.model.onnx: "),
    ("manifest.json missing", lambda f: (f / "manifest.json").unlink(), [], 2, "no readable manifest.json"),
    ("report.json missing: not part of what was built, written again", lambda f: (f / "report.json").unlink(), [],
     0, "PASS "),
    ("manifest.json of another artifact", _not_a_decoder_manifest, [], 2,
     "error: manifest.json artifact: is 'block' but the model is a 'decoder' artifact"),
    ("decoder.json edited", _theta_in_decoder_json, [], 2,
     "error: files.decoder.json: sha256 differs from the manifest"),
    ("decoder.json spec edited, hashes rewritten", _rehashed(_theta_in_decoder_json), [], 2,
     "error: decoder.json spec.position.theta: is 20000.0 but the model was built with 10000.0"),
    ("decoder.json weights edited, hashes rewritten", _rehashed(_weights_in_decoder_json), [], 2,
     "error: decoder.json weights: "),
    ("decoder.json spec with an unknown field, hashes rewritten", _rehashed(_unknown_spec_field), [], 2,
     "error: decoder.json spec.heads: is not a decoder field"),
    ("decoder.json eos_token_id edited, hashes rewritten", _rehashed(_eos_in_decoder_json), [], 2,
     "error: genai_config.json model.eos_token_id: "),
    ("decoder.json config rope_theta edited, hashes rewritten", _rehashed(_theta_in_decoder_json_config), [], 2,
     "error: decoder.json config: makes position.theta 20000.0 but the model was built with 10000.0"),
    ("genai_config.json context_length 1e6, hashes rewritten", _rehashed(_genai(context_length=10**6)), [], 2,
     "error: genai_config.json model.context_length: is 1000000 but this decoder's is 4096"),
    ("genai_config.json a JSON list, hashes rewritten",
     _rehashed(lambda f: (f / "genai_config.json").write_text("[1, 2]")), [], 2,
     "error: genai_config.json: must be a JSON object (onnxruntime-genai's config), got a list"),
    ("genai_config.json vocab_size 5, hashes rewritten", _rehashed(_genai(vocab_size=5)), [], 2,
     "error: genai_config.json model.vocab_size: is 5 but this decoder's is 128"),
    ("genai_config.json session_options of a build before the thread count, hashes rewritten",
     _rehashed(_session_options({"log_id": "onnxruntime-genai", "provider_options": []})), [], 0, "PASS "),
    ("genai_config.json model a list, hashes rewritten", _rehashed(lambda f: _edit_json(f / "genai_config.json",
     lambda g: g.update(model=[]))), [], 2, "error: genai_config.json model: is [] but this decoder's is "),
    ("tolerance flags", _unchanged, ["--atol", "1e-3"], 2, "error: --atol/--rtol: "),
    ("an unknown runtime", _unchanged, ["--runtime", "tensorrt"], 2,
     "error: --runtime: unknown runtime 'tensorrt'; allowed: ort, onnx-reference, trt"),
    ("a weight scaled, hashes rewritten", _scaled_weight, [], 1, "FAIL "),
    ("built with another theta, hashes rewritten", _other_theta, [], 1, "FAIL "),
]  # fmt: skip


@pytest.mark.parametrize(("case", "damage", "flags", "code", "text"), VERIFY_CASES, ids=[c[0] for c in VERIFY_CASES])
def test_verify_decoder_folder(case: str, damage: Callable[[Path], None], flags: list[str], code: int, text: str,
                               decoder: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    stored = read_report(decoder, DecoderReport)
    damage(decoder)
    had_report = (decoder / "report.json").exists()
    manifest = decoder / "manifest.json"
    files = {k: v for k, v in _json(manifest)["files"].items() if k != "decoder.json"} if manifest.exists() else {}
    (decoder / "report.md").write_text("")
    got, out, err = run(["verify", str(decoder), *flags], capsys)
    assert got == code, (out, err)
    if code == 2:
        assert out == "" and err.count("\n") == 1 and text in err, err
        assert "Traceback" not in err
        assert (decoder / "report.md").read_text() == ""  # nothing re-verified, nothing rewritten
        return
    assert err == "" and text in out
    report = read_report(decoder, DecoderReport)
    assert report.passed is (code == 0) and report.files == files
    assert (decoder / "report.md").read_text().startswith("# ")
    names = [s.name for s in stored.scenarios]
    assert [s.name for s in report.scenarios] == names
    for scenario in stored.scenarios:  # every scenario's line shows its stored worst error and agreement
        line = next(x for x in out.splitlines() if x.strip().startswith(scenario.name + " "))
        if not had_report:  # nothing stored to show beside it
            assert "(new: not in the stored report)" in line, line
            continue
        assert f"(stored {scenario.summary.worst_rel:.2e})" in line, line
        assert f"(stored {scenario.summary.agreement})" in line, line
    now = {s.name: s.summary.worst_rel for s in report.scenarios}
    if code == 0:
        assert now == pytest.approx({s.name: s.summary.worst_rel for s in stored.scenarios}, rel=0.1)
    else:  # the failing scenarios say FAIL on their line, and their error is far past the stored one
        failed = [s.name for s in report.scenarios if not s.passed]
        assert failed and all(f"  {name}" in out and max(now[name], 1e-4) == now[name] for name in failed), out
        assert any(line.split()[1] == "FAIL" for line in out.splitlines() if line.startswith("  "))


def test_verify_api_compares_with_the_stored_report(decoder: Path) -> None:
    # A scenario renamed in the stored report: the fresh one has no stored numbers and the renamed one is listed as
    # no longer run.
    _edit_json(decoder / "report.json", lambda r: r["scenarios"][0].update(name="retired"))
    seen: list[dict[str, Any]] = []
    (result,) = rx.verify(decoder, on_scenario=seen.append)
    assert isinstance(result, DecoderVerifyResult) and result.passed and result.skipped == {}
    assert result.dropped == ["retired"]
    first, *rest = [ScenarioRerun(row) for row in result.scenarios]
    assert first.stored_worst_rel is None and seen[0]["stored"] is None  # on_scenario's own key: the stored summary
    assert all(r.stored_passed is True and r.stored_worst_rel > 0 for r in rest)
    assert [ScenarioRecord(s).name for s in seen] == [ScenarioRerun(r).name for r in result.scenarios]
    assert DecoderReport(result.stored).scenarios[0].name == "retired"  # the report it replaced, as it was
    assert read_report(decoder, DecoderReport).scenarios[0].name != "retired"


def test_verify_a_checkpoint_decoder_needs_its_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tiny = pytest.importorskip("tests.decoder.tiny")
    ckpt = tiny.checkpoint(tmp_path / "ckpt", "llama")
    folder = rx.build_decoder(tmp_path / "out", checkpoint=ckpt, eager=False).path
    code, out, err = run(["verify", str(folder)], capsys)
    lines = [line for line in out.splitlines() if line.startswith("  ") and "(stored " in line]
    assert code == 0 and len(lines) == len(read_report(folder, DecoderReport).scenarios), (out, err)
    ckpt.rename(tmp_path / "moved")
    code, out, err = run(["verify", str(folder)], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"decoder.json weights: {str(ckpt.resolve())!r}" in err and "no longer exists" in err


Change = Callable[[dict[str, Any], dict[str, Any]], None]  # (OLD, NEW) -> None


def _new(change: Callable[[dict[str, Any]], Any]) -> Change:
    return lambda old, new: change(new)


def _summary(i: int, **summary: Any) -> Change:
    return _new(lambda r: r["scenarios"][i]["summary"].update(summary))


def _worst(factor: float) -> Change:
    return _new(
        lambda r: r["scenarios"][0]["summary"].update(worst_rel=r["scenarios"][0]["summary"]["worst_rel"] * factor)
    )


def _fail(old: dict[str, Any], new: dict[str, Any]) -> None:
    new["scenarios"][1]["passed"] = False
    new["passed"] = False


def _theta(old: dict[str, Any], new: dict[str, Any]) -> None:
    new["spec"]["position"]["theta"] = 20000.0


def _below_ulp(old: dict[str, Any], new: dict[str, Any]) -> None:
    old["scenarios"][0]["summary"]["worst_rel"] = 1e-9
    new["scenarios"][0]["summary"]["worst_rel"] = 1e-8  # x10, but by less than 2^-23 of the logit scale


# (case, change to OLD and NEW, extra flags, exit code, text the output must hold, text it must not)
DIFF_CASES: list[tuple[str, Change, list[str], int, str, str]] = [
    ("itself", _new(lambda r: None), [], 0, "0 regression(s)", "REGRESSION"),
    ("worst_rel x100", _worst(100), [], 1, "worst_rel: ", "note:"),
    ("worst_rel x1.5 (within --max-growth)", _worst(1.5), [], 0, "0 regression(s)", "REGRESSION"),
    ("worst_rel x100 with --max-growth 200", _worst(100), ["--max-growth", "200"], 0, "0 regression(s)", "REGRESSION"),
    ("worst_rel x10 below one fp32 ulp", _below_ulp, [], 0, "0 regression(s)", "REGRESSION"),
    ("agreement dropped", _summary(0, agreement="64/65"), [], 1, "greedy agreement with float64 65/65 -> 64/65", ""),
    ("first divergence appears", _summary(2, first_divergence=3), [], 1, "tokens diverge from float64 at call 3", ""),
    ("near ties changed", _summary(1, near_ties=[4]), [], 0, "near ties (listed, not counted) at calls none -> [4]",
     "REGRESSION"),
    ("scenario failed", _fail, [], 1, "chunked-prefill: passed before, fails now", ""),
    ("scenario missing", _new(lambda r: r["scenarios"].pop()), [], 1, "far-positions: missing from NEW", ""),
    ("scenario new", lambda o, n: o["scenarios"].pop(), [], 0, "note: far-positions: new in NEW", "REGRESSION"),
    ("tolerance loosened", _new(lambda r: r["tolerance"].update(rel=1e-3)), [], 1, "tolerance loosened from 0.0001",
     ""),
    ("another theta", _theta, [], 1, "different specs: spec.position.theta is 10000.0 in OLD, 20000.0 in NEW", ""),
    ("another theta, across it", _theta, ["--across", "position.theta"], 0, "compared across it on purpose",
     "REGRESSION"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "change", "flags", "code", "text", "absent"), DIFF_CASES,
                         ids=[c[0] for c in DIFF_CASES])  # fmt: skip
def test_diff_decoder_reports(case: str, change: Change, flags: list[str], code: int, text: str, absent: str,
                              built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    old, new = _json(built / "report.json"), _json(built / "report.json")
    change(old, new)
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    got, out, err = run(["diff", str(tmp_path / "old.json"), str(tmp_path / "new.json"), *flags], capsys)
    assert got == code and err == "", (out, err)
    assert text in out, out
    assert not absent or absent not in out, out
    regressions = sum(line.startswith("REGRESSION: ") for line in out.splitlines())
    assert out.rstrip().endswith(f"\n{regressions} regression(s)") and (regressions > 0) == (code == 1)


def test_diff_decoder_reports_as_json_and_through_the_api(built: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    new = _json(built / "report.json")
    _worst(100)({}, new)
    (tmp_path / "new.json").write_text(json.dumps(new))
    code, out, _ = run(["diff", str(built / "report.json"), str(tmp_path / "new.json"), "--json"], capsys)
    data = json.loads(out)
    first = DecoderReport(new).scenarios[0].name
    assert code == 1 and data["regressed"] is True and len(data["regressions"]) == 1
    assert data["regressions"][0].startswith(f"{first} worst_rel: ")
    row = next(r for r in data["rows"] if r["comparison"] == first and r["metric"] == "worst_rel")
    assert row["growth"] == pytest.approx(100)
    same = rx.diff(built, built)
    assert not same.regressed and {r["metric"] for r in same.rows} >= {"worst_rel", "agreement", "first_divergence"}


DIFF_BAD: list[tuple[str, Callable[[Path, Path], tuple[Path, Path]], str]] = [
    ("decoder against an artifact report", lambda b, t: (b, t / "block.json"), "but OLD is a decoder report"),
    (
        "artifact report against a decoder",
        lambda b, t: (t / "block.json", b),
        "error: NEW: is a decoder report but OLD is a ",
    ),
    ("damaged decoder report", lambda b, t: (b, t / "damaged.json"), "error: NEW: scenarios[0].summary.worst_rel"),
    ("unknown --across field", lambda b, t: (b, b), "error: --across: 'theta' is not a spec field"),
]


@pytest.mark.parametrize(("case", "pick", "text"), DIFF_BAD, ids=[c[0] for c in DIFF_BAD])
def test_diff_bad_decoder_input(case: str, pick: Callable[[Path, Path], tuple[Path, Path]], text: str, built: Path,
                                tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    (tmp_path / "block.json").write_text(json.dumps(minimal_report()))
    damaged = _json(built / "report.json")
    damaged["scenarios"][0]["summary"]["worst_rel"] = "small"
    (tmp_path / "damaged.json").write_text(json.dumps(damaged))
    old, new = pick(built, tmp_path)
    flags = ["--across", "theta"] if "across" in case else []
    code, out, err = run(["diff", str(old), str(new), *flags], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and text in err, err


@pytest.mark.parametrize(("across", "regressed"), [((), True), (("dtype",), False)])
def test_a_dtype_compared_across_on_purpose_brings_its_own_bound(
    built: Path, tmp_path: Path, across: tuple[str, ...], regressed: bool
) -> None:
    new = json.loads((built / "report.json").read_text())
    new["spec"]["dtype"], new["tolerance"]["rel"] = "fp16", 2e-2  # the fp16 build's bound
    (tmp_path / "report.json").write_text(json.dumps(new))
    result = rx.diff(built, tmp_path, across=across)
    assert any("tolerance loosened" in r for r in result.regressions) is regressed
    assert any("the bound of NEW's dtype" in n for n in result.notes) is not regressed
