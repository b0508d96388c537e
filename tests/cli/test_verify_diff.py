from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ropeexport import build
from ropeexport.catalog import recipe_for
from ropeexport.families.alibi.spec import AlibiSpec
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.report.views import EncodingReport, PropertyRecord, read_report
from tests.clirun import run

SPEC = RopeSpec(head_dim=16, rotary_dim=12, num_heads=4, num_kv_heads=2, max_positions=256)




@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(SPEC, tmp_path_factory.mktemp("built")).path


@pytest.fixture
def artifact(built: Path, tmp_path: Path) -> Path:
    copy = tmp_path / built.name
    shutil.copytree(built, copy)
    return copy


def test_verify_an_untouched_artifact_passes_and_rewrites_reports(artifact: Path, capsys) -> None:
    (artifact / "report.json").write_text("{}")
    code, out, _ = run(["verify", str(artifact)], capsys)
    assert code == 0 and out.startswith("PASS")
    report = read_report(artifact, EncodingReport)
    assert report.schema == "ropeexport.report/2" and report.passed is True
    assert (artifact / "report.md").stat().st_size > 0 and (artifact / "report.html").stat().st_size > 0


def test_verify_with_a_too_tight_tolerance_fails_with_exit_1(artifact: Path, capsys) -> None:
    code, out, _ = run(["verify", str(artifact), "--atol", "query_out:0", "--rtol", "query_out:0"], capsys)
    report = read_report(artifact, EncodingReport)
    failing = {c.output for c in report.comparisons if not c.passed}
    # The fused kernel differs from eager and float64 in the last bit somewhere; key_out keeps its tolerance.
    assert code == 1 and out.startswith("FAIL") and failing == {"query_out"}


def _truncate(folder: Path) -> None:
    data = (folder / "model.onnx").read_bytes()
    (folder / "model.onnx").write_bytes(data[: len(data) // 2])


def _edit_table(folder: Path) -> None:
    data = bytearray((folder / "model.onnx").read_bytes())
    data[-100] ^= 0xFF
    (folder / "model.onnx").write_bytes(bytes(data))


def _drop_field(folder: Path) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["files"]
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _other_schema(folder: Path) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["schema"] = "ropeexport.manifest/0"
    (folder / "manifest.json").write_text(json.dumps(manifest))


BROKEN = [
    (_truncate, "files.model.onnx"),
    (_edit_table, "files.model.onnx"),
    (lambda f: (f / "model.onnx").unlink(), "files.model.onnx"),
    (lambda f: (f / "manifest.json").unlink(), "manifest.json"),
    (lambda f: (f / "manifest.json").write_text("{not json"), "manifest.json"),
    (_drop_field, "files"),
    (_other_schema, "schema"),
]


@pytest.mark.parametrize(
    ("damage", "message"),
    BROKEN,
    ids=["truncated", "edited", "no-model", "no-manifest", "bad-json", "missing-field", "other-schema"],
)
def test_verify_rejects_damaged_artifacts_with_exit_2(artifact: Path, capsys, damage, message: str) -> None:
    damage(artifact)
    code, _, err = run(["verify", str(artifact)], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("flag", [["--atol", "logits:1e-3"], ["--rtol", "x"], ["--atol", "-1"]])
def test_bad_tolerance_overrides_exit_2(artifact: Path, capsys, flag: list[str]) -> None:
    code, _, err = run(["verify", str(artifact), *flag], capsys)
    assert code == 2 and ("--atol" in err or "--rtol" in err)


def test_diff_of_a_report_with_itself_is_clean(built: Path, capsys) -> None:
    code, out, _ = run(["diff", str(built), str(built / "report.json")], capsys)
    assert code == 0 and "0 regression(s)" in out


def _worse(report: dict, factor: float, output: str = "query_out") -> dict:
    worse = json.loads(json.dumps(report))
    for c in worse["comparisons"]:
        if c["output"] == output:
            c["max_abs"] = c["max_abs"] * factor + c["atol"] * factor
    return worse


def test_diff_flags_growth_past_the_threshold(built: Path, tmp_path: Path, capsys) -> None:
    report = json.loads((built / "report.json").read_text())
    (tmp_path / "new.json").write_text(json.dumps(_worse(report, 5.0)))
    code, out, _ = run(["diff", str(built / "report.json"), str(tmp_path / "new.json")], capsys)
    assert code == 1 and "REGRESSION" in out and "query_out max_abs" in out
    code, _, _ = run(["diff", str(built / "report.json"), str(tmp_path / "new.json"), "--max-growth", "1000"], capsys)
    assert code == 0


def test_diff_flags_pass_to_fail_and_missing_comparisons_as_json(built: Path, tmp_path: Path, capsys) -> None:
    report = json.loads((built / "report.json").read_text())
    new = json.loads(json.dumps(report))
    new["comparisons"][0]["passed"] = False
    new["comparisons"].pop()
    new["properties"][0]["passed"] = False
    (tmp_path / "new.json").write_text(json.dumps(new))
    code, out, _ = run(["diff", str(built / "report.json"), str(tmp_path / "new.json"), "--json"], capsys)
    data = json.loads(out)
    assert code == 1 and data["regressed"]
    text = "\n".join(data["regressions"])
    assert "passed before, fails now" in text and "missing from NEW" in text and "property" in text


@pytest.mark.parametrize("content", ['{"schema": "ropeexport.report/1", "comparisons": []}', "[1]", "nope"])
def test_diff_rejects_other_schemas_and_non_reports(built: Path, tmp_path: Path, capsys, content: str) -> None:
    (tmp_path / "old.json").write_text(content)
    code, _, err = run(["diff", str(tmp_path / "old.json"), str(built)], capsys)
    assert code == 2 and "OLD" in err and len(err.strip().splitlines()) == 1


def test_report_carries_metrics_curves_properties_and_environment(built: Path) -> None:
    report = read_report(built, EncodingReport)
    for c in report.comparisons:
        assert c.p99_abs <= c.max_abs * 1.26 + 1e-30 and c.mean_abs <= c.max_abs
        assert c.cosine > 0.999999 and sum(c.histogram.counts) + c.histogram.zeros == c.elements
    curves = report.positions
    assert len(curves) == 4 and all(cv.axis == "position" for cv in curves)
    assert curves[0].x[0] == 0 and curves[0].x[-1] == SPEC.max_positions - 1
    names = {p.name: p for p in report.properties}
    assert {"relative invariance", "norm preservation", "partial rotation tail untouched", "long-term decay"} <= set(
        names
    )
    assert all(p.passed for p in names.values())
    decay = names["long-term decay"].curve
    assert decay.y[0] == pytest.approx(1.0, abs=1e-5) and max(decay.x) == SPEC.max_positions - 1
    env = report.environment
    assert {"python", "torch", "onnx", "onnxruntime", "tensorrt", "cpu", "gpu"} <= set(env)
    assert len(report.spec_sha256) == 64


def test_polygraphy_reference_loads_with_polygraphy(built: Path) -> None:
    from polygraphy.comparator import RunResults
    from polygraphy.json import load_json

    feeds = load_json(str(built / "polygraphy" / "inputs.json"))
    results = RunResults.load(str(built / "polygraphy" / "reference.json"))
    ((runner, iterations),) = results.items()
    assert runner == "ropeexport-eager" and set(feeds[0]) == {"query", "key", "position_ids"}
    outputs = iterations[0]
    assert outputs["query_out"].shape == feeds[0]["query"].shape and outputs["key_out"].dtype == np.float32


def test_properties_catch_a_broken_norm(tmp_path: Path) -> None:
    # Tables scaled by 1.01: every comparison fails, and norm preservation must say so too.
    import onnx
    from onnx import numpy_helper

    from ropeexport.families.rope.export import build_rope_graph
    from ropeexport.graph.onnx_io import save_model
    from ropeexport.verification.core import verify_artifact

    model = build_rope_graph(SPEC)
    for t in model.graph.initializer:
        if t.name in ("cos_table", "sin_table"):
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(1.01), t.name))
    save_model(model, tmp_path)
    result = verify_artifact(SPEC, recipe_for(SPEC), tmp_path / "model.onnx", ["ort"])
    names = {p.name: p.passed for p in map(PropertyRecord, result.properties)}
    assert names["norm preservation"] is False and names["long-term decay"] is False
    assert onnx.load(str(tmp_path / "model.onnx")) is not None


def test_bias_artifacts_report_distance_curves_and_shift_invariance(tmp_path: Path) -> None:
    result = build(AlibiSpec(artifact="scores", num_heads=4, head_dim=8, max_positions=512), tmp_path)
    assert {c.axis for c in result.encoding_report.positions} == {"distance i-j"}
    shift = [p for p in result.encoding_report.properties if p.name == "shift invariance"]
    assert shift and shift[0].passed is True


def test_verify_refuses_a_manifest_spec_that_is_not_the_models(artifact: Path, capsys) -> None:
    manifest = json.loads((artifact / "manifest.json").read_text())
    manifest["spec"]["max_positions"] = 128  # the manifest is not hashed; the model (and its embedded spec) is
    (artifact / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = run(["verify", str(artifact)], capsys)
    assert code == 2 and "spec.max_positions" in err and "built with 256" in err


def test_verify_refuses_edited_polygraphy_reference(artifact: Path, capsys) -> None:
    path = artifact / "polygraphy" / "reference.json"
    path.write_text(path.read_text().replace("ropeexport-eager", "ropeexport-eagr"))
    code, _, err = run(["verify", str(artifact)], capsys)
    assert code == 2 and "polygraphy/reference.json" in err


def test_diff_counts_loosened_tolerances_lost_checks_and_other_specs(built: Path, tmp_path: Path, capsys) -> None:
    report = json.loads((built / "report.json").read_text())
    new = json.loads(json.dumps(report))
    new["comparisons"][0]["atol"] = 1.0
    new["tables"] = []
    new["spec_sha256"] = "0" * 64
    (tmp_path / "new.json").write_text(json.dumps(new))
    code, out, _ = run(["diff", str(built / "report.json"), str(tmp_path / "new.json"), "--json"], capsys)
    text = "\n".join(json.loads(out)["regressions"])
    assert code == 1 and "atol loosened" in text and "not checked in NEW" in text and "different specs" in text


@pytest.mark.parametrize(
    "damage",
    [
        lambda r: r.pop("comparisons"),
        lambda r: r["comparisons"].append({}),
        lambda r: r["comparisons"][0].update(max_abs="big"),
    ],
)
def test_diff_rejects_damaged_reports_with_exit_2(built: Path, tmp_path: Path, capsys, damage) -> None:
    report = json.loads((built / "report.json").read_text())
    damage(report)
    (tmp_path / "new.json").write_text(json.dumps(report))
    code, _, err = run(["diff", str(built / "report.json"), str(tmp_path / "new.json")], capsys)
    assert code == 2 and "NEW" in err and len(err.strip().splitlines()) == 1


def test_verify_of_one_artifact_in_a_tree_refreshes_the_trees_index(built: Path, tmp_path: Path, capsys) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(built.parent, tree)
    assert run(["verify", str(tree)], capsys)[0] == 0  # writes index.json over the copied tree
    one = tree / built.name
    code, out, _ = run(["verify", str(one), "--atol", "query_out:0", "--rtol", "query_out:0"], capsys)
    assert code == 1 and out.strip().endswith("index.html")
    index = json.loads((tree / "index.json").read_text())
    assert [a["status"] for a in index["artifacts"] if a["name"] == built.name] == ["failed"]
    assert "(0.0s)" not in out  # real times


def test_diff_says_a_verdict_flipped_only_because_the_tolerance_was_tightened(
    artifact: Path, tmp_path: Path, capsys
) -> None:
    old = tmp_path / "old.json"
    shutil.copy(artifact / "report.json", old)
    assert run(["verify", str(artifact), "--atol", "1e-9", "--rtol", "0"], capsys)[0] == 1
    code, out, _ = run(["diff", str(old), str(artifact), "--json"], capsys)
    result = json.loads(out)
    assert code == 1
    assert any("atol tightened from" in n for n in result["notes"])
    flipped = [r for r in result["regressions"] if "passed before, fails now" in r and "/" in r.split(":")[0]]
    assert flipped and all("the tolerance changed, not the artifact" in r for r in flipped)


def test_diff_across_graph_compares_fused_with_decomposed_on_purpose(tmp_path: Path, capsys) -> None:
    fused = build(SPEC.replace(name="m-fused"), tmp_path).path
    decomposed = build(SPEC.replace(name="m-decomposed", graph="decomposed"), tmp_path).path
    code, out, _ = run(["diff", str(fused), str(decomposed), "--json"], capsys)
    assert code == 1 and any("--across graph" in r for r in json.loads(out)["regressions"])
    code, out, _ = run(["diff", str(fused), str(decomposed), "--across", "graph", "--json"], capsys)
    result = json.loads(out)
    assert not any("different specs" in r for r in result["regressions"])
    assert any("spec.graph" in n for n in result["notes"]) and result["rows"]
    code, _, err = run(["diff", str(fused), str(decomposed), "--across", "grpah"], capsys)
    assert code == 2 and "--across" in err


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"a": NaN}', "NaN is not a JSON number"),
        ("[" * 5000 + "]" * 5000, "nested deeper"),
        ('{"a": ' + "9" * 400 + "}", "out of range"),
    ],
)
def test_diff_refuses_reports_json_cannot_hold(tmp_path: Path, built: Path, capsys, text: str, fragment: str) -> None:
    (tmp_path / "new.json").write_text(text)
    code, _, err = run(["diff", str(built / "report.json"), str(tmp_path / "new.json")], capsys)
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1
