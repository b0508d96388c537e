"""audit on foreign-style models with planted RoPE faults: each found and named, none on exact models."""

from __future__ import annotations

from pathlib import Path

import pytest

import ropeexport as rx
from tests.audits.planted import CASES, Planted, write_config


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_planted_fault_is_named_and_exact_models_pass(case: Planted, tmp_path: Path) -> None:
    config = write_config(tmp_path, case.config)
    spec = rx.from_hf_config(config)[0]
    model = case.build(tmp_path / "model.onnx", spec)
    result = rx.audit(model, config)
    findings = [f["text"] for site in result.sites for f in site["findings"]]
    assert len(result.sites) == 1, result.sites
    if case.expected is None:
        assert result.verdict == "exact" and not findings, findings
        assert all(p["rows"] == p["length"] for p in result.sites[0]["probes"])
    else:
        assert result.verdict == "findings"
        assert any(case.expected in f for f in findings), findings


# ropeexport's own rope artifacts (fused: RotaryEmbedding reading rows the graph computes, a second regime's rows
# offset past the first; dynamic NTK: an If computing cos/sin past the original length) are exact at every position.
OWN = ["llama3", "yarn", "longrope", "dynamic", "default"]


@pytest.mark.parametrize("config_name", OWN)
def test_ropeexports_own_artifacts_are_exact(config_name: str, tmp_path: Path) -> None:
    import onnx

    config = write_config(tmp_path, config_name)
    spec = rx.from_hf_config(config)[0]
    onnx.save(rx.export(spec), str(tmp_path / "rope.onnx"))
    result = rx.audit(tmp_path / "rope.onnx", config)
    assert result.verdict == "exact", [f for s in result.sites for f in s["findings"]]
    assert [s["kind"] for s in result.sites] == ["RotaryEmbedding (opset 23)"]


@pytest.mark.parametrize("config_name", OWN)
def test_ropeexports_own_decomposed_artifacts_are_exact(config_name: str, tmp_path: Path) -> None:
    """The decomposed form: tables gathered by rows (a gathered site), dynamic NTK's If around them (computed)."""
    import onnx

    config = write_config(tmp_path, config_name)
    spec = rx.from_hf_config(config, graphs=["decomposed"])[0]
    onnx.save(rx.export(spec), str(tmp_path / "rope.onnx"))
    result = rx.audit(tmp_path / "rope.onnx", config)
    assert result.verdict == "exact", [f for s in result.sites for f in s["findings"]]
    expected = "computed cos/sin" if config_name == "dynamic" else "gathered table"
    assert [s["kind"] for s in result.sites] == [expected]
