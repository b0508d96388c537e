"""The planted-bug suite: every wrong artifact fails verification by its expected checks; correct builds pass.

The table lives in ``ropeexport/planted/``, one module per family (``tools/planted_bugs.py`` prints it as the docs'
detection table). Known gaps in verification are strict xfails with the reason: when verification is fixed they XPASS,
and the mark must go.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ropeexport.catalog import encodings
from ropeexport.planted import BUGS, FAMILY_BUGS, PlantedBug, correct_specs, detect, export, verify_correct

# Bugs that verification does not yet catch as it should: {bug name: why}. Empty: every planted bug is caught.
KNOWN_GAPS: dict[str, str] = {}
# Correct builds that verification fails: {artifact name: why}. Empty: every correct build passes.
FALSE_ALARMS: dict[str, str] = {}


def _params(items: list[Any], name: Any, known: dict[str, str]) -> list[Any]:
    params = []
    for item in items:
        reason = known.get(name(item))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(item, id=name(item), marks=marks))
    return params


@pytest.mark.parametrize("bug", _params(BUGS, lambda b: b.name, KNOWN_GAPS))
def test_planted_bug_is_caught_by_the_expected_checks(bug: PlantedBug, tmp_path: Path) -> None:
    d = detect(bug, tmp_path)
    assert d.error is None, f"verification raised instead of returning a fail: {d.error}"
    assert d.passed is False, "verification passed a wrong artifact"
    failed = {f for f in d.failed if not f.startswith("property:")}  # properties are reported, not required
    assert failed == bug.expected, (
        f"missing {sorted(bug.expected - failed)}, unexpected {sorted(failed - bug.expected)}"
    )
    assert d.located, f"worst error at {d.worst}, expected {dict(bug.where)}"


@pytest.mark.parametrize("spec", _params(correct_specs(), lambda s: s.name, FALSE_ALARMS))
def test_correct_build_of_each_claimed_spec_passes(spec: Any, tmp_path: Path) -> None:
    d = verify_correct(spec, tmp_path)
    assert d.error is None, d.error
    assert d.passed and not d.failed, f"failing checks: {d.failed}; worst {d.worst}"


def test_every_bug_changes_the_artifact_and_names_are_unique() -> None:
    assert len({b.name for b in BUGS}) == len(BUGS)
    specs = correct_specs()
    assert len({s.name for s in specs}) == len(specs), "two claimed specs share an artifact name"
    for bug in BUGS:
        assert bug.expected, f"{bug.name}: no check expected to fail"
        planted = bug.plant(bug.spec)
        assert planted.SerializeToString() != export(bug.spec).SerializeToString(), f"{bug.name} planted nothing"
        assert {p.key: p.value for p in planted.metadata_props} == {
            p.key: p.value for p in export(bug.spec).metadata_props
        }, f"{bug.name}: the wrong artifact must claim the spec it is verified as"


def test_each_family_module_holds_only_its_own_bugs_in_catalog_order() -> None:
    assert all(b.spec.encoding == family for family, bugs in FAMILY_BUGS.items() for b in bugs)
    order = list(encodings())
    assert list(FAMILY_BUGS) == sorted(FAMILY_BUGS, key=order.index), "families out of catalog order"
    assert BUGS == [b for bugs in FAMILY_BUGS.values() for b in bugs]
