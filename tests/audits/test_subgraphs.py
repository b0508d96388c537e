"""Sites inside If branches and Loop bodies, at any depth: found, evaluated where their values can be, reported as a
finding where they cannot, and grafted where the graft can, refused in one line where it cannot.

Each model has an exact RotaryEmbedding in the main graph and a second rotation inside the subgraphs (the hostile
tester's models: theta-5e5 tables behind an If that is always taken made audit say "1 rotary site(s), exact" and graft
"0 table pair(s) replaced, proven").
"""  # noqa: D205

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import ropeexport as rx
from ropeexport.cli import main
from tests.audits.planted import D, P, subgraph_model, tables, write_config


@dataclass(frozen=True)
class Nested:
    """A second rotation inside ``kinds`` (outermost first) reading ``inner`` (``exact``, ``theta`` 5e5 tables, or
    ``computed`` cos/sin of theta 5e5); ``varying``: its tables change with the Loop's iteration. ``finding``: the name
    its site must carry (None: exact); ``graft``: the exit code of graft --trust config, ``phrase`` in its one line.
    """  # noqa: D205

    name: str
    kinds: tuple[str, ...]
    inner: str
    finding: str | None
    graft: int
    phrase: str = ""
    varying: bool = False


CASES = [
    Nested("if-branch-exact", ("If",), "exact", None, 0),
    Nested("if-branch-theta-5e5", ("If",), "theta", "theta", 0),
    Nested("if-31-deep-theta-5e5", ("If",) * 31, "theta", "theta", 0),
    Nested("loop-body-theta-5e5", ("Loop",), "theta", "theta", 0),
    Nested("if-inside-loop-theta-5e5", ("Loop", "If"), "theta", "theta", 0),
    Nested("if-branch-cos-sin-theta-5e5", ("If",), "computed", "theta", 2, "main graph only"),
    Nested("loop-iteration-tables", ("Loop",), "exact", "not-evaluated", 2, "changes from one iteration", True),
]


def _build(tmp: Path, case: Nested) -> tuple[Path, Path]:
    config = write_config(tmp, "default")
    exact = tables(rx.from_hf_config(config)[0], P)
    inv = 1.0 / 5e5 ** (np.arange(0, D, 2, dtype=np.float64) / D)
    angles = np.outer(np.arange(P, dtype=np.float64), inv)
    theta = (np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32))
    inner = {"exact": exact, "theta": theta, "computed": (inv,)}[case.inner]
    path = subgraph_model(tmp / "model.onnx", exact, inner, case.kinds, case.inner == "computed", case.varying)
    return path, config


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_site_inside_subgraphs_is_found_and_checked_or_reported(case: Nested, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    model, config = _build(tmp_path, case)
    code = main(["audit", str(model), "--hf-config", str(config), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == (0 if case.finding is None else 1)
    outer, inner = result["sites"]  # the main graph's first, then the one inside
    assert outer["exact"] and "graph" not in outer and outer["findings"] == []
    assert len(inner["scope"]) == len(case.kinds) and inner["graph"].startswith(f"{case.kinds[0]} ")
    names = [f["name"] for f in inner["findings"]]
    if case.finding is None:
        assert inner["exact"] and names == []
    else:
        assert not inner["exact"] and case.finding in names, names
        assert bool(inner["probes"]) == (case.finding != "not-evaluated")  # what could be evaluated was compared


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_site_line_says_its_dtype_or_why_none(case: Nested, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    # issue 43, item 11: a site that could not be evaluated printed "None" where the dtype goes
    model, config = _build(tmp_path, case)
    main(["audit", str(model), "--hf-config", str(config)])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  site ")]
    assert len(lines) == 2 and all("None" not in line for line in lines), lines
    said = "dtype not read (not evaluated)" if case.finding == "not-evaluated" else "float32"
    assert f"reader(s), {said}: " in lines[1], lines


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_graft_replaces_inside_subgraphs_or_refuses_in_one_line(case: Nested, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    model, config = _build(tmp_path, case)
    before = sorted(p.name for p in tmp_path.iterdir())
    if case.inner == "theta":  # the config's schedule differs from the branch's: never "proven" without --trust
        assert main(["graft", str(model), "--hf-config", str(config), "--out", str(tmp_path / "no.onnx")]) == 2
        assert "--trust" in capsys.readouterr().err
    out = tmp_path / "fixed" / "model.onnx"
    code = main(["graft", str(model), "--hf-config", str(config), "--out", str(out), "--trust", "config", "--json"])
    captured = capsys.readouterr()
    assert code == case.graft, captured.err
    if code == 2:
        err = captured.err.strip()
        assert err.count("\n") == 0 and err.startswith("ropeexport: error: MODEL") and case.phrase in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
        return
    result = json.loads(captured.out)
    assert result["proven"] and result["after"]["verdict"] == "exact"
    assert len(result["replaced"]) == (0 if case.finding is None else 1)
    assert all(r["cos"].startswith("deep_") for r in result["replaced"])  # the tables inside the subgraphs
    assert rx.audit(out, config).verdict == "exact"
