"""Each planted fault named as what it is, and nothing else said about it (the independent check's list, issue 27):
a wrong theta, positions offset, a negated sin, a clamped table, the builder's fp16 tables (float32 frequencies seen
through fp16 rounding: a precision finding, which graft repairs without ``--trust config``).
"""  # noqa: D205

from __future__ import annotations

from pathlib import Path

import pytest

import ropeexport as rx
from tests.audits.planted import NAMED, Named, write_config


@pytest.mark.parametrize("case", NAMED, ids=[c.name for c in NAMED])
def test_a_planted_fault_is_named_as_what_it_is_and_nothing_else(case: Named, tmp_path: Path) -> None:
    config = write_config(tmp_path, case.config)
    model = case.build(tmp_path / "model.onnx", rx.from_hf_config(config)[0])
    result = rx.audit(model, config)
    (site,) = result.sites
    assert result.verdict == "findings"
    assert [f["name"] for f in site["findings"]] == [case.finding], site["findings"]
    assert case.words in site["findings"][0]["text"], site["findings"]


def test_float32_frequencies_seen_through_fp16_are_grafted_without_trusting_the_config(tmp_path: Path) -> None:
    case = next(c for c in NAMED if c.finding == "float32-through-fp16")
    config = write_config(tmp_path, case.config)
    model = case.build(tmp_path / "model.onnx", rx.from_hf_config(config)[0])
    result = rx.graft(model, config, tmp_path / "fixed.onnx")  # trust="model": precision findings only
    assert result.proven and result.changed_schedule == [] and result.after is not None
    assert result.after.verdict == "exact" and result.short_call["equal"], result.to_dict()
    assert [r["dtype"] for r in result.replaced] == ["float16"], result.replaced
