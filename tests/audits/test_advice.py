"""Each audit finding's severity (from its measured effect against the bound the logits' dtype is verified to) and
next step (``audits.advice``): case tables over effects and findings, then the words on the command line.
"""  # noqa: D205

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ropeexport.audits.advice import graft_command, next_step, severity
from ropeexport.cli import main

# (case, effect record, level, words of its text)
SEVERITIES: list[tuple[str, dict[str, Any], str, str]] = [
    ("1-ulp float32 table", {"relative": 3.5e-5, "position": 4043, "dtype": "float32"}, "harmless",
     "3.50e-05 of the logit scale at position 4043, within the 1.00e-04 ropeexport verifies float32 logits to"),
    ("at the float32 bound", {"relative": 1e-4, "position": 7, "dtype": "float32"}, "harmless", "within the 1.00e-04"),
    ("float32 frequencies far out", {"relative": 3e-4, "position": 130890, "dtype": "float32"}, "minor",
     "above the 1.00e-04 ropeexport verifies float32 logits to, under 1.00e-02"),
    ("at 1% of the scale", {"relative": 1e-2, "position": 7, "dtype": "float32"}, "minor", "under 1.00e-02"),
    ("scaling ignored", {"relative": 0.31, "position": 13823, "dtype": "float32"}, "wrong",
     "3.10e-01 of the logit scale at position 13823: over 1.00e-02, the model computes other outputs"),
    ("fp16 rounding of fp32 tables", {"relative": 1.5e-2, "position": 9, "dtype": "float16"}, "harmless",
     "within the 2.00e-02 ropeexport verifies float16 logits to"),
    ("bf16 takes fp16's bound", {"relative": 1.5e-2, "position": 9, "dtype": "bfloat16"}, "harmless", "2.00e-02"),
    ("fp16 schedule error", {"relative": 0.05, "position": 9, "dtype": "float16"}, "wrong", "over 1.00e-02"),
    ("a part of a decoder", {"relative": 0.5, "position": 3, "dtype": "float32", "output": "attn"}, "wrong",
     "of the scale of output 'attn'"),
    ("asked not to", {"not_measured": "not asked"}, "unmeasured", "not asked"),
    ("cannot be called", {"not_measured": "ONNX Runtime refuses the call (x)"}, "unmeasured", "refuses the call"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "effect", "level", "words"), SEVERITIES, ids=[s[0] for s in SEVERITIES])
def test_the_severity_is_the_effect_against_the_dtypes_bound(case: str, effect: dict[str, Any], level: str,
                                                             words: str) -> None:  # fmt: skip
    got = severity(effect)
    assert got["level"] == level and words in got["text"], got


SITE = {"findings": []}
UNCHECKED = {"findings": [{"name": "cannot-run", "text": "ONNX Runtime will not run the GroupQueryAttention"}]}
CMD = "ropeexport graft m.onnx --hf-config c.json --out m-grafted.onnx"
# (case, finding, its severity, the sites it is found at, action, words of the text)
STEPS: list[tuple[str, dict[str, Any], str, list[dict[str, Any]], str, str]] = [
    ("harmless precision", {"name": "float32-angles"}, "harmless", [SITE], "nothing",
     f"nothing needed (`{CMD}` makes it exact)"),
    ("minor precision", {"name": "float32-frequencies"}, "minor", [SITE], "graft", f"`{CMD}`"),
    ("unmeasured precision", {"name": "float32-through-fp16"}, "unmeasured", [SITE], "graft", CMD),
    ("schedule", {"name": "scaling-ignored"}, "wrong", [SITE], "graft --trust config",
     "if the config is the one the model was exported from"),
    ("a harmless schedule is still another schedule", {"name": "switch-never-taken"}, "harmless", [SITE],
     "graft --trust config", "else audit against the right config"),
    ("alibi slopes", {"name": "alibi-slopes"}, "wrong", [SITE], "graft --trust config", CMD),
    ("no rotation where the config rotates", {"name": "not-rotated", "sites": []}, "unmeasured", [],
     "re-export", "graft replaces rotary values, it adds no rotation"),
    ("window", {"name": "window", "sites": []}, "unmeasured", [], "re-export", "--artifact decoder"),
    ("a site the audit could not check", {"name": "float32-angles"}, "unmeasured", [UNCHECKED], "re-export",
     "the audit could not check the site whole (ONNX Runtime will not run"),
    ("a repair graft does not make", {"name": "float32-angles", "effect": {"unrepairable": "dynamic NTK computed"}},
     "unmeasured", [SITE], "re-export", "dynamic NTK computed"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "found", "level", "sites", "action", "words"), STEPS, ids=[s[0] for s in STEPS])
def test_the_next_step_follows_the_finding_and_its_severity(case: str, found: dict[str, Any], level: str,
                                                            sites: list[dict[str, Any]], action: str,
                                                            words: str) -> None:  # fmt: skip
    got = next_step({"sites": list(range(len(sites))), **found}, level, CMD, sites)
    assert got["action"] == action and words in got["text"], got


def test_the_graft_command_writes_beside_the_model(tmp_path: Path) -> None:
    assert graft_command("a/m.onnx", "c.json", "hf_config", False) == "ropeexport graft a/m.onnx --hf-config c.json " \
        "--out a/m-grafted.onnx"  # fmt: skip
    assert graft_command("a/m.onnx", "s.toml", "spec_file", True).endswith("--spec s.toml --out a/m-grafted.onnx "
                                                                           "--trust config")  # fmt: skip
    genai = tmp_path / "og model"
    genai.mkdir()
    (genai / "genai_config.json").write_text("{}")
    line = graft_command(str(genai / "model.onnx"), "c.json", "hf_config", False)
    assert line.endswith(f"--out '{tmp_path}/og model-grafted'"), line  # a folder: graft writes the genai folder
    # issue 43, item 11: the suggested --out must be a name graft can write (it named a folder that existed)
    (tmp_path / "og model-grafted").mkdir()
    line = graft_command(str(genai / "model.onnx"), "c.json", "hf_config", False)
    assert line.endswith(f"--out '{tmp_path}/og model-grafted-2'"), line
    (tmp_path / "m-grafted.onnx").write_text("")
    line = graft_command(str(tmp_path / "m.onnx"), "c.json", "hf_config", False)
    assert line.endswith(f"--out {tmp_path}/m-grafted-2.onnx"), line


# (planted layer fault of test_audit_layers, the severity and next step of its finding on the command line, the exit
# code: a harmless finding passes the default gate, --fail-on minor: test_fail_on.py)
PLANTED = [
    ("sliding-given-global", "wrong", "next: if the config is the one the model was exported from: `ropeexport graft",
     1),
    ("float32-angles-sliding", "harmless", "next: nothing needed (`ropeexport graft", 0),
]


@pytest.mark.slow  # a decoder built and audited per case (test_audit_layers checks the levels in the fast tier)
@pytest.mark.parametrize(("case", "level", "step", "code"), PLANTED, ids=[p[0] for p in PLANTED])
def test_audit_prints_and_writes_each_findings_severity_and_next_step(case: str, level: str, step: str, code: int,
                                                                      tmp_path: Path, capsys,
                                                                      tiny_checkpoint) -> None:  # noqa: ANN001
    from tests.audits.test_audit_layers import FAULTS, _planted

    fault = next(f for f in FAULTS if f.case == case)
    model, config, _ = _planted(fault, tmp_path, tiny_checkpoint)
    out = tmp_path / "report"
    capsys.readouterr()
    assert main(["audit", str(model), "--hf-config", str(config), "--out", str(out)]) == code
    printed = capsys.readouterr().out
    assert f"\n      {level}: " in printed and step in printed, printed
    (found,) = json.loads((out / "audit.json").read_text())["findings"]
    assert found["severity"]["level"] == level and step.removeprefix("next: ") in found["next"]["text"], found
    assert f"| **{level}** | " in (out / "audit.md").read_text()
