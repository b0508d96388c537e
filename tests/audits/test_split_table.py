"""GPT-J's one sin|cos table, gathered per token and split (optimum's TorchScript export; hand-built here: no optimum
needed): read per layer by use, judged, grafted and proven; a planted swap of its halves named; a rotation no pattern
reads refused naming its place, never "no rotary position encoding".
"""  # noqa: D205

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ropeexport as rx
from ropeexport.errors import SpecError
from tests.audits.split_table import CASES, R, SplitCase, sincos, split_table_model, write_config


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_split_table_is_read_by_use_and_judged(case: SplitCase, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    result = rx.audit(case.build(tmp_path / "model.onnx"), config)
    findings = [f["text"] for site in result.sites for f in site["findings"]]
    assert [s["kind"] for s in result.sites] == ["split sincos table"]
    assert result.sites[0]["interleaved"] is True  # read from its rotations (GPT-J pairs 2i with 2i + 1)
    if case.expected is None:
        assert result.verdict == "exact" and not findings, findings
    else:
        assert result.verdict == "findings" and any(case.expected in f for f in findings), findings


# (name, the table stored, the words the refusal must carry): a sin|cos table whose row 0 does not say which half
# is sin (positions offset by one: both halves nonzero) is no form a pattern reads
UNREAD = [
    ("offset table, Split", sincos(offset=1), False, ["GatherElements making 'gathered'", "Add making 'q_turned'"]),
    ("offset table, two Slice", sincos(offset=1), True, ["GatherElements making 'gathered'", "no verdict"]),
    ("zero table", np.zeros_like(sincos()), False, ["GatherElements making 'gathered'"]),
]


@pytest.mark.parametrize(("name", "table", "slices", "words"), UNREAD, ids=[u[0] for u in UNREAD])
def test_a_rotation_no_pattern_reads_is_refused_naming_its_place(name: str, table: np.ndarray, slices: bool,
                                                                 words: list[str], tmp_path: Path) -> None:  # fmt: skip
    model = split_table_model(tmp_path / "model.onnx", table, slices=slices)
    with pytest.raises(SpecError) as refused:
        rx.audit(model, write_config(tmp_path))
    text = str(refused.value)
    assert "no rotary position encoding" not in text
    assert all(w in text for w in words), text


def test_the_cli_refuses_an_unread_rotation_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.clirun import run

    model = split_table_model(tmp_path / "model.onnx", sincos(offset=1))
    code, _, err = run(["audit", str(model), "--hf-config", str(write_config(tmp_path)), "--out",
                        str(tmp_path / "a")], capsys)  # fmt: skip
    assert code == 2, err
    assert "GatherElements making 'gathered'" in err and not (tmp_path / "a").exists()


# (name, table, the finding graft repairs, trust): the site's values replaced by the rope family's rows; a swap
# implies another schedule than the config's, which graft replaces only when told to trust the config
GRAFTS = [
    ("float32 angles", sincos(f32=True), "float32-angles", "model"),
    ("halves swapped", np.roll(sincos(), R // 2, axis=1), "cos-sin-exchanged", "config"),
]


@pytest.mark.parametrize(("name", "table", "finding", "trust"), GRAFTS, ids=[g[0] for g in GRAFTS])
def test_graft_replaces_the_split_table_and_the_audit_after_is_exact(name: str, table: np.ndarray, finding: str,
                                                                      trust: str, tmp_path: Path) -> None:  # fmt: skip
    config = write_config(tmp_path)
    model = split_table_model(tmp_path / "model.onnx", table)
    before = rx.audit(model, config)
    assert finding in [f["name"] for s in before.sites for f in s["findings"]]
    grafted = rx.graft(model, config, out=tmp_path / "grafted.onnx", trust=trust)
    assert grafted.after is not None and grafted.after.verdict == "exact", grafted.after
    assert grafted.proven, grafted.text  # a swap repaired on purpose is not expected to agree with the original


def _tool() -> object:
    """tools/audit_peers.py as a module (it plants the swap in optimum's real GPT-J export there)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "tools" / "audit_peers.py"
    spec = importlib.util.spec_from_file_location("audit_peers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# (name, the table the model stores, what the planted copy's audit says: a finding's words, or the tool's refusal)
PLANTS = [
    ("exact table: swapped and named", sincos(), "cos and sin exchanged"),
    ("float32 table: swapped and named", sincos(f32=True), "cos and sin exchanged"),
    ("no sin|cos table: the tool refuses", sincos(offset=1), "no sin | cos table"),
]


@pytest.mark.parametrize(("name", "table", "expected"), PLANTS, ids=[p[0] for p in PLANTS])
def test_the_peers_tool_plants_the_halves_swap_and_the_audit_names_it(name: str, table: np.ndarray, expected: str,
                                                                       tmp_path: Path) -> None:  # fmt: skip
    plant = _tool().plant_sincos_swap  # type: ignore[attr-defined]
    model = split_table_model(tmp_path / "model.onnx", table)
    if expected.startswith("no "):
        with pytest.raises(ValueError, match=expected):
            plant(model, tmp_path / "planted")
        return
    result = rx.audit(plant(model, tmp_path / "planted"), write_config(tmp_path))
    findings = [f["text"] for site in result.sites for f in site["findings"]]
    assert result.verdict == "findings" and any(expected in f for f in findings), findings
