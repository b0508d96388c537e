"""``audit --fail-on {harmless,minor,wrong}``: exit codes a CI gate can use. A finding the audit itself calls
"harmless, nothing needed" exited 1; now the default (minor) fails on any finding beyond the tolerance and passes a
model whose findings are all harmless, saying so; an unmeasured finding always fails; audit.json carries each
finding's level and the gate.

The models are Gemma 3's tiny decoder with one fault planted per level (``test_audit_layers``' planted faults, and
its sliding table at theta 10100): float32 angles (harmless: ~1e-6 of the logit scale), theta 10100 (minor:
1.0e-3), the sliding layers given the global layers' table (wrong), a rotated layer left unrotated (not measured: graft
adds no rotation). The effects are measured as users run the model (``audits.runs``): theta 10003, the minor case
when they were measured after random cached entries (1.2e-3), is harmless so (2.6e-5: the sliding layers see 6
positions, over which 0.03% of theta turns no angle far).
"""  # noqa: D205

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import ropeexport as rx
from ropeexport.audits.advice import FAIL_ON, fails
from ropeexport.cli import main
from ropeexport.errors import SpecError
from tests.audits.test_audit_layers import FAULTS, _planted

# (level, --fail-on, fails): unmeasured fails at every level (its effect is not known to be harmless)
LEVELS = [(level, gate, level == "unmeasured" or FAIL_ON.index(level) >= FAIL_ON.index(gate))
          for level in ("harmless", "minor", "wrong", "unmeasured") for gate in FAIL_ON]  # fmt: skip


@pytest.mark.parametrize(("level", "gate", "expected"), LEVELS, ids=[f"{lv}-fail-on-{g}" for lv, g, _ in LEVELS])
def test_a_finding_fails_the_gate_at_or_above_its_level(level: str, gate: str, expected: bool) -> None:
    assert fails(level, gate) is expected


def _theta_10100(model: Path) -> None:
    """Gemma 3's sliding table (its layers' theta 10000) at theta 10100, rounded once: a minor effect."""
    proto = onnx.load(str(model))
    for tensor in proto.graph.initializer:
        if tensor.name in ("layers.0/rope/cos_table", "layers.0/rope/sin_table"):
            rows, width = tensor.dims
            inv = 10100.0 ** (-np.arange(width, dtype=np.float64) / width)
            angles = np.outer(np.arange(rows, dtype=np.float64), inv)
            table = np.cos(angles) if "cos" in tensor.name else np.sin(angles)
            tensor.CopyFrom(numpy_helper.from_array(table.astype(np.float32), tensor.name))
    onnx.save(proto, str(model))


FAULT = {f.case: f for f in FAULTS}
PLANTED = {"harmless": FAULT["float32-angles-sliding"],
           "minor": replace(FAULT["float32-angles-sliding"], case="theta-10100-sliding", plant=_theta_10100),
           "wrong": FAULT["sliding-given-global"], "unmeasured": FAULT["rotated-layer-unrotated"]}  # fmt: skip
# (the planted finding's level, --fail-on (None: the default), extra flags, exit code, a phrase of stdout)
GATES: list[tuple[str, str | None, list[str], int, str]] = [
    ("harmless", None, [], 0, "gate (--fail-on minor): passed, every finding below minor (harmless): exit 0"),
    ("harmless", "harmless", [], 1, "gate (--fail-on harmless): failed on float32-angles (harmless)"),
    ("harmless", None, ["--no-effects"], 1, "failed on float32-angles (unmeasured)"),
    ("minor", None, [], 1, "gate (--fail-on minor): failed on theta (minor)"),
    ("minor", "wrong", [], 0, "gate (--fail-on wrong): passed, every finding below wrong (minor): exit 0"),
    ("wrong", "wrong", [], 1, "failed on other-layers-table (wrong)"),
    ("unmeasured", "wrong", [], 1, "failed on not-rotated (unmeasured)"),
]  # fmt: skip


@pytest.mark.parametrize(("level", "gate", "flags", "code", "phrase"), GATES,
                         ids=[f"{lv}-{g or 'default'}{''.join(f)}" for lv, g, f, *_ in GATES])  # fmt: skip
def test_the_exit_code_follows_the_gate(level: str, gate: str | None, flags: list[str], code: int, phrase: str,
                                        tmp_path: Path, capsys, tiny_checkpoint) -> None:  # noqa: ANN001
    model, config, _ = _planted(PLANTED[level], tmp_path, tiny_checkpoint)
    out = tmp_path / "report"
    argv = ["audit", str(model), "--hf-config", str(config), "--out", str(out), *flags]
    capsys.readouterr()
    assert main([*argv, *(["--fail-on", gate] if gate else [])]) == code
    printed = capsys.readouterr().out
    assert phrase in printed, printed
    written = json.loads((out / "audit.json").read_text())
    assert written["verdict"] == "findings"  # the findings are said whatever the gate does
    expected = "unmeasured" if "--no-effects" in flags else level
    assert [f["severity"]["level"] for f in written["findings"]] == [expected]  # the level per finding
    said = written["gate"]
    assert said["fail_on"] == (gate or "minor") and said["passed"] is (code == 0)
    assert [f["level"] for f in said["failing" if code else "passing"]] == [expected], said
    markdown = (out / "audit.md").read_text()
    assert f"- gate (--fail-on {gate or 'minor'}): {'passed' if code == 0 else 'failed'}" in markdown


def test_an_exact_model_passes_every_gate_and_a_bad_level_is_refused(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from tests.audits.planted import CASES, write_config

    case = next(c for c in CASES if c.name == "exact-gqa-llama3")
    config = write_config(tmp_path, case.config)
    model = case.build(tmp_path / "model.onnx", rx.from_hf_config(config)[0])
    for gate in FAIL_ON:
        assert main(["audit", str(model), "--hf-config", str(config), "--fail-on", gate]) == 0
    assert rx.audit(model, config).gate == {"fail_on": "minor", "passed": True, "failing": [], "passing": []}
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:  # argparse's refusal: one line, exit 2
        main(["audit", str(model), "--hf-config", str(config), "--fail-on", "minr"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--fail-on" in err and "harmless" in err, err
    with pytest.raises(SpecError, match="fail_on: must be one of harmless, minor, wrong, got 'minr'"):
        rx.audit(model, config, fail_on="minr")
