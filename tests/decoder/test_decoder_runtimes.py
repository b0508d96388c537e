"""``ropeexport verify DECODER --runtime ...``: a decoder verified on each runtime named, through the runtime registry.

The case table builds a tiny decoder of every architecture in ``tests/decoder/tiny.py`` (and the forms, dtypes and
weight formats that change which ops a model holds), then verifies it again with the CLI on the runtimes of the row.
Each runtime that runs must generate every scenario and pass the float64 truth under the decoder's own bound, on its
own device (onnx.reference computes other logits than ONNX Runtime: an independent second runtime); each runtime that
cannot run must be skipped with its reason naming every op it lacks, and the CLI must exit 3 naming it, never 0.

Then: the exit codes a skipped runtime gives (``--allow-skip``, the ORT fallback when no runtime named can run), a
decoder that computes something else failing on each runtime, ``rx.verify`` saying what the CLI says, and the runs'
bookkeeping (``decoder.runs``) on runtimes that are absent, fail part way or raise, without building anything.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

import ropeexport as rx
from ropeexport.decoder.kind import DecoderVerifyResult
from ropeexport.decoder.runs import RuntimeVerdict, by_runtime, run_on
from ropeexport.errors import RuntimeUnavailable
from ropeexport.report.views import DecoderReport, DecoderRuntimeRecord, ScenarioRecord, ScenarioRerun, read_report
from ropeexport.runtimes import RUNTIMES
from ropeexport.runtimes.base import Runner
from tests.cases import tiered
from tests.clirun import run
from tests.decoder.test_decoder_reverify import _scaled_weight
from tests.decoder.tiny import CONFIGS

BOTH = ("ort", "onnx-reference")
DEVICE = {"ort": "onnxruntime ", "onnx-reference": "onnx.reference "}  # what each runner's describe() starts with
GQA = ("com.microsoft.GroupQueryAttention", "com.microsoft.SkipSimplifiedLayerNormalization")


class Case(NamedTuple):
    config: str  # a tests/decoder/tiny.py CONFIGS name
    graph: str
    dtype: str = "fp32"
    weights: str = ""  # "" or "int4"
    runtimes: tuple[str, ...] = BOTH
    code: int = 0
    skipped: tuple[str, ...] = ()  # the runtimes that cannot run it
    ops: tuple[str, ...] = ()  # what the skipped runtime's reason names

    @property
    def id(self) -> str:
        extra = "-".join(x for x in (self.dtype if self.dtype != "fp32" else "", self.weights) if x)
        return f"{self.config}-{self.graph}{'-' + extra if extra else ''}-{'+'.join(self.runtimes)}"


# Every architecture in the fused form on both runtimes, the other forms onnx.reference runs, fp16, and the cases it
# cannot run: the gqa form (ONNX Runtime's contrib ops), int4 weights (MatMulNBits), and a runtime named alone that
# cannot run (ORT's CPU provider verifies instead: the fallback; still exit 3).
# glm4_moe_lite's layers are deepseek_v3's (latent attention, the grouped mixture), run here on both: left out (CI
# time); so are mistral4's and deepseek_v2's (the same components; their routers' Softmax and group TopK, and
# mistral4's query scale, not run on onnx.reference here). DeepSeek Sparse Attention's indexer (TopK, ScatterElements)
# on both in one row: glm_moe_dsa decomposed (its shared indexer layer; the expanded cache's decomposed form, which no
# other row builds with the indexer); deepseek_v32's fused form is the same component (CI time)
SAME_LAYERS = ("glm4_moe_lite", "mistral4", "deepseek_v2", "deepseek_v32", "glm_moe_dsa")
CASES = [Case(name, "fused") for name in CONFIGS if name not in SAME_LAYERS] + [
    Case("llama", "decomposed"),
    Case("gemma2", "decomposed"),
    Case("glm_moe_dsa", "decomposed"),
    Case("gptj", "tensorrt"),
    Case("gpt_oss", "tensorrt"),
    Case("phi3-longrope", "fused", dtype="fp16"),
    Case("llama", "gqa", code=3, skipped=("onnx-reference",), ops=GQA),
    Case("gpt_oss", "gqa", code=3, skipped=("onnx-reference",), ops=(*GQA, "com.microsoft.MoE")),
    Case("llama", "fused", weights="int4", code=3, skipped=("onnx-reference",), ops=("com.microsoft.MatMulNBits",)),
    Case("phi3-longrope", "gqa", runtimes=("onnx-reference",), code=3, skipped=("onnx-reference",), ops=GQA),
]
FAST = {("llama", "fused", "fp32", ""), ("llama", "gqa", "fp32", "")}


def _scenarios_by_runtime(report: DecoderReport) -> dict[str, list[ScenarioRecord]]:
    """``decoder.runs.by_runtime`` of the report, each scenario read through its view."""
    return {name: [ScenarioRecord(s) for s in found] for name, found in by_runtime(dict(report.data)).items()}


def _flags(runtimes: tuple[str, ...] | list[str]) -> list[str]:
    return [x for name in runtimes for x in ("--runtime", name)]


@pytest.mark.parametrize("case", tiered([(c,) for c in CASES], lambda c: c[:4] in FAST), ids=[c.id for c in CASES])
def test_verify_decoder_on_each_runtime(case: Case, tmp_path: Path, tiny_checkpoint: Any,
                                        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    built = rx.build_decoder(tmp_path / "out", checkpoint=tiny_checkpoint(case.config), graph=case.graph,
                             dtype=case.dtype, weight_format=case.weights, eager=False)  # fmt: skip
    assert built.passed
    capsys.readouterr()  # what making the checkpoint printed (transformers' progress bars)
    code, out, err = run(["verify", str(built.path), *_flags(case.runtimes)], capsys)
    assert code == case.code, (out, err)
    report = read_report(built.path, DecoderReport)
    records = {r.name: r for r in report.runtimes}
    ran = [name for name in (*case.runtimes, "ort") if name not in case.skipped]  # ort: the fallback, if it ran
    assert list(records) == list(dict.fromkeys([*case.runtimes, *ran])), records
    assert {n: r.status for n, r in records.items()} == {n: "skipped" if n in case.skipped else "verified"
                                                         for n in records}  # fmt: skip
    assert (records["ort"].fallback if "ort" in records else False) is ("ort" not in case.runtimes)
    scenarios = _scenarios_by_runtime(report)
    names = [s.name for s in report.scenarios]
    assert names and set(scenarios) == set(dict.fromkeys(ran))
    for name in dict.fromkeys(ran):  # each runtime that ran: every scenario, generated and judged on its own
        record = records[name]
        assert record.device.startswith(DEVICE[name]) and record.passed is True, record.data
        assert [s.name for s in scenarios[name]] == names
        assert all(s.passed for s in scenarios[name]) and record.worst_rel <= report.tolerance.rel
        assert record.worst_rel == max(s.summary.worst_rel for s in scenarios[name])
    if len(scenarios) == 2:  # two implementations, two sets of logits: the second runtime really ran
        worst = [[s.summary.worst_rel for s in scenarios[n]] for n in BOTH]
        assert worst[0] != worst[1]
        assert f"  onnx-reference: PASS worst {records['onnx-reference'].worst_rel:.2e}" in out
    assert report.passed is True  # the runtimes that ran passed; one that could not run is exit 3, not a pass
    for name in case.skipped:
        reason = records[name].reason
        assert reason.startswith("onnx.reference ") and all(op in reason for op in case.ops), reason
        assert f"  {name}: skipped: {reason}" in out
        assert err.count("\n") == 1 and f"could not run here: {name}: {reason}; exit 3" in err, err
    if not case.skipped:
        assert err == ""


@pytest.fixture(scope="module")
def gqa_decoder(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Any) -> Path:
    """A tiny Llama in the gqa form (GroupQueryAttention: ORT runs it, onnx.reference cannot)."""
    built = rx.build_decoder(tmp_path_factory.mktemp("gqa") / "out", checkpoint=tiny_checkpoint("llama"),
                             graph="gqa", eager=False)  # fmt: skip
    assert built.passed
    return built.path


# (flags, exit code, the runtimes report.json records with their status)
EXITS = [
    ([], 0, {"ort": "verified"}),
    (_flags(["ort"]), 0, {"ort": "verified"}),
    (_flags(BOTH), 3, {"ort": "verified", "onnx-reference": "skipped"}),
    ([*_flags(BOTH), "--allow-skip"], 0, {"ort": "verified", "onnx-reference": "skipped"}),
    (_flags(["onnx-reference"]), 3, {"onnx-reference": "skipped", "ort": "verified"}),
    (_flags(["trt"]), 3, {"trt": "skipped", "ort": "verified"}),  # no TensorRT here: skipped with its reason
]


@pytest.mark.parametrize(("flags", "code", "statuses"), EXITS, ids=[" ".join(f) or "no flags" for f, _, _ in EXITS])
def test_a_runtime_that_cannot_run_is_exit_3_unless_allowed(flags: list[str], code: int, statuses: dict[str, str],
                                                            gqa_decoder: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    if "trt" in statuses and importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("TensorRT is installed here: the row holds where it is absent")
    folder = tmp_path / gqa_decoder.name
    shutil.copytree(gqa_decoder, folder)
    got, out, err = run(["verify", str(folder), *flags], capsys)
    assert got == code, (out, err)
    report = read_report(folder, DecoderReport)
    assert {r.name: r.status for r in report.runtimes} == statuses
    assert out.startswith("  decode-64 ") and "PASS " in out  # ORT's verdict: the decoder is right where it ran
    if "--allow-skip" in flags:
        assert err.startswith("ropeexport: note: requested runtime(s) skipped (--allow-skip): onnx-reference: ")
    elif code == 3:
        skipped = next(r for r in report.runtimes if r.status == "skipped")
        assert f"could not run here: {skipped.name}: {skipped.reason}; exit 3" in err, err
    else:
        assert err == ""


def test_a_wrong_decoder_fails_on_each_runtime(seeded_decoder: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    folder = tmp_path / seeded_decoder.name
    shutil.copytree(seeded_decoder, folder)
    _scaled_weight(folder)  # a valid model computing something else, its hashes rewritten
    code, out, err = run(["verify", str(folder), *_flags(BOTH)], capsys)
    assert code == 1 and err == "", (out, err)
    report = read_report(folder, DecoderReport)
    assert report.passed is False
    assert [(r.name, r.passed) for r in report.runtimes] == [("ort", False), ("onnx-reference", False)]
    assert out.startswith("  decode-64                   FAIL") and "  [onnx-reference] decode-64" in out
    assert "\nFAIL " in out and "\n  onnx-reference: FAIL worst " in out
    for scenarios in _scenarios_by_runtime(report).values():  # each runtime judged against the truth, each failing it
        assert any(not s.passed for s in scenarios)
    assert "## decode-64 on onnx-reference: FAILED" in (folder / "report.md").read_text()


def _without_seconds(report: DecoderReport) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.data.items() if k != "seconds"} for r in report.runtimes]


@pytest.mark.parametrize("which", ["seeded fused", "gqa"])
def test_the_api_says_what_the_cli_says(which: str, seeded_decoder: Path, gqa_decoder: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    source = seeded_decoder if which == "seeded fused" else gqa_decoder
    by_cli, by_api = tmp_path / "cli" / source.name, tmp_path / "api" / source.name
    shutil.copytree(source, by_cli)
    shutil.copytree(source, by_api)
    code, out, err = run(["verify", str(by_cli), *_flags(BOTH)], capsys)
    [result] = rx.verify(by_api, runtimes=list(BOTH))
    assert isinstance(result, DecoderVerifyResult)
    cli, api = read_report(by_cli, DecoderReport), read_report(by_api, DecoderReport)
    assert result.report == api.data and result.passed is api.passed is cli.passed is True
    assert code == (3 if result.skipped else 0) and result.skipped == {
        r.name: r.reason for r in cli.runtimes if r.status == "skipped"}  # fmt: skip
    # the same runtimes, verdicts and reasons; the same numbers (ORT's CPU provider and onnx.reference are
    # deterministic on one machine: two runs of one model give the same logits)
    assert _without_seconds(api) == _without_seconds(cli)
    assert by_runtime(dict(api.data)) == by_runtime(dict(cli.data))
    verdicts = result.runtimes
    assert all(isinstance(v, RuntimeVerdict) for v in verdicts)
    assert [(v.name, v.ran, v.passed) for v in verdicts] == [
        (r.name, r.status == "verified", r.passed is True) for r in cli.runtimes]  # fmt: skip
    for v in verdicts:  # per runtime, each scenario beside what the stored report held for that same runtime
        rows = [ScenarioRerun(row) for row in v.scenarios]
        assert [row.name for row in rows] == ([s.name for s in _scenarios_by_runtime(cli)[v.name]] if v.ran else [])
        assert all(row.worst_rel == row.stored_worst_rel for row in rows) if v.name == "ort" else True
    if result.skipped:
        assert "could not run here: onnx-reference: " + result.skipped["onnx-reference"] in err


# -- decoder.runs on runtimes put in the registry for the test: nothing built, nothing run ------------------------


class _Fake(Runner):
    """A runner over no model: ``infer`` counts calls and raises ``fail`` (an exception) from call ``at`` on."""

    def __init__(self, name: str, fail: BaseException | None = None, at: int = 0) -> None:
        self.name, self.fail, self.at, self.calls = name, fail, at, 0
        self.model_path, self.checker = None, None

    def describe(self) -> str:
        return f"fake {self.name}"

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls += 1
        if self.fail is not None and self.calls > self.at:
            raise self.fail
        return {"logits": np.zeros(1)}


def _scenarios(name: str, infer: Any, release: Any) -> list[dict[str, Any]]:
    """Two scenarios of three calls each, as ``verify_decoder`` would return them (the runtime let go after them)."""
    for _ in range(6):
        infer({})
    release()
    return [{"name": f"s{k}", "passed": True, "summary": {"worst_rel": 1e-6 * (k + 1), "agreement": "3/3"}}
            for k in range(2)]  # fmt: skip


def _registered(monkeypatch: pytest.MonkeyPatch, **runners: Any) -> None:
    def opener(make: Any) -> Any:
        def open_(path: Path, cpu_only: bool) -> Runner:
            assert cpu_only  # a decoder opens every runtime on the host CPU where it has the choice
            return make()

        return open_

    for name, make in runners.items():
        monkeypatch.setitem(RUNTIMES, name, opener(make))


def _absent() -> Runner:
    raise RuntimeUnavailable("absent is not installed")


# (case, runtimes named, their runners, expected (name, status, passed or the reason's start))
RUN_CASES = [
    ("both run", ["a", "b"], {"a": lambda: _Fake("a"), "b": lambda: _Fake("b")},
     [("a", "verified", True), ("b", "verified", True)]),
    ("one absent", ["a", "gone"], {"a": lambda: _Fake("a"), "gone": _absent},
     [("a", "verified", True), ("gone", "skipped", "absent is not installed")]),
    ("none can run: ORT's CPU provider verifies instead", ["gone"], {"gone": _absent, "ort": lambda: _Fake("ort")},
     [("gone", "skipped", "absent is not installed"), ("ort", "verified", True)]),
    ("unavailable part way: skipped", ["a", "late"],
     {"a": lambda: _Fake("a"), "late": lambda: _Fake("late", RuntimeUnavailable("late: no kernel for op X"), 4)},
     [("a", "verified", True), ("late", "skipped", "late: no kernel for op X")]),
    ("raises on a valid call: fails, never skipped", ["a", "bad"],
     {"a": lambda: _Fake("a"), "bad": lambda: _Fake("bad", ValueError("bad kernel\nsecond line"), 2)},
     [("a", "verified", True), ("bad", "verified", False)]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "names", "runners", "expected"), RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_runs_record_each_runtime(case: str, names: list[str], runners: dict[str, Any],
                                  expected: list[tuple[str, str, Any]], monkeypatch: pytest.MonkeyPatch,
                                  tmp_path: Path) -> None:  # fmt: skip
    _registered(monkeypatch, **runners)
    records = [DecoderRuntimeRecord(r) for r in run_on(names, tmp_path / "model.onnx", _scenarios)]
    got = [(r.name, r.status, r.reason if r.passed is None else r.passed) for r in records]
    assert [g[:2] for g in got] == [e[:2] for e in expected]
    for (_, status, said), (_, _, want) in zip(got, expected, strict=True):
        assert said == want if status == "verified" else str(said).startswith(str(want))
    for record in records:
        if record.status == "verified" and record.passed:
            assert record.worst_rel == 2e-6 and record.agreement == "6/6" and len(record.scenarios) == 2
        if record.error:  # what the runtime raised, one line; its scenarios dropped
            assert record.error == "ValueError: bad kernel" and record.scenarios == []
    assert any(r.fallback for r in records) is ("fallback" in case or "instead" in case)


def test_a_report_from_before_several_runtimes_reads_as_orts() -> None:
    old = {"runtime": "onnxruntime 1.31.1 CPUExecutionProvider", "scenarios": [{"name": "decode-64"}]}
    assert by_runtime(old) == {"ort": [{"name": "decode-64"}]}
    now = {"runtimes": [{"name": "onnx-reference", "status": "skipped", "reason": "x"},
                        {"name": "ort", "status": "verified"},
                        {"name": "trt", "status": "verified", "scenarios": [{"name": "s"}]}],
           "scenarios": [{"name": "decode-64"}]}  # fmt: skip
    assert by_runtime(now) == {"ort": [{"name": "decode-64"}], "trt": [{"name": "s"}]}


# A build for runtimes (``build --artifact decoder --runtime``): the form is --graph, else the first runtime's own
# (``runtimes.capabilities``); every scenario runs on each runtime named; one that cannot run here is exit 3 with the
# folder written and ORT's verdict. (flags, the form built, the exit, each runtime's status)
BUILDS = [
    (["--runtime", "onnx-reference"], "fused", 0, {"onnx-reference": "verified"}),
    (["--runtime", "ort", "--runtime", "onnx-reference", "--graph", "decomposed"], "decomposed", 0,
     {"ort": "verified", "onnx-reference": "verified"}),
    (["--runtime", "trt"], "tensorrt", 3, {"trt": "skipped"}),
    (["--runtime", "trt", "--allow-skip"], "tensorrt", 0, {"trt": "skipped"}),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "form", "code", "statuses"), BUILDS, ids=[" ".join(b[0]) for b in BUILDS])
def test_a_build_for_runtimes_takes_their_form_and_runs_on_them(
    flags: list[str], form: str, code: int, statuses: dict[str, str], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
              "num_hidden_layers": 1, "intermediate_size": 48, "vocab_size": 64, "max_position_embeddings": 128}
    (tmp_path / "config.json").write_text(json.dumps(config))
    got, out, err = run(["build", "--hf-config", str(tmp_path / "config.json"), "--artifact", "decoder", "--no-eager",
                         "--out", str(tmp_path / "out"), "--quiet", *flags], capsys)  # fmt: skip
    assert got == code, err
    folder = Path(out.strip().splitlines()[-1])
    report = read_report(folder, DecoderReport)
    assert report.spec["graph"] == form and folder.name.endswith(form)
    assert {r.name: r.status for r in report.runtimes if r.name in statuses} == statuses
