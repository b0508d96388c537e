"""The audit of the 2026 RoPE families' exports (issue 39 item 4): each family's sites mapped per layer in
ropeexport's own decoders, and the peers' bugs planted into them (``tests/audits/families.py``), each named as what it
is with its logit effect, grafted and proven where values can repair it. One tiny decoder per family, built once for
the module; every form of these decoders auditing exact is ``test_audit_own_decoders.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import ropeexport as rx
from tests.audits.families import BUGS, FamilyBug, planted
from tests.audits.planted import graft_as_planted
from tests.audits.test_audit_own_decoders import _decoder


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Callable[..., Path]) -> Callable[[str], tuple[
        Path, Path]]:  # fmt: skip
    """``family(name)``: (its checkpoint, its fused decoder's model.onnx), built on first use."""
    root = tmp_path_factory.mktemp("families")
    made: dict[str, tuple[Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path]:
        if name not in made:
            ckpt = tiny_checkpoint(name)
            (root / name).mkdir()
            made[name] = ckpt, _decoder(root / name, ckpt, "fused")
        return made[name]

    return get


# family -> per layer (its group's label, rotated width, pairing; None: no RoPE), and the query-scale tables read
LAYERS = {
    "gemma4": ({0: ("sliding", 8, "half"), 1: ("global", 16, "half"), 2: ("sliding", 8, "half"),
                3: ("global", 16, "half")}, 0),  # per-layer head_dim, proportional global layers
    "cohere2": ({0: ("", 8, "interleaved"), 1: ("", 8, "interleaved"), 2: ("", 8, "interleaved"), 3: None}, 0),
    "exaone4": ({0: ("", 8, "half"), 1: ("", 8, "half"), 2: ("", 8, "half"), 3: None}, 0),
    "glm4": ({0: ("", 8, "interleaved"), 1: ("", 8, "interleaved")}, 0),  # partial: 8 of 16 channels
    "ministral3": ({0: ("", 16, "half"), 1: ("", 16, "half")}, 1),  # one factor table read by both layers
    "olmo3": ({0: ("sliding", 8, "half"), 1: ("sliding", 8, "half"), 2: ("sliding", 8, "half"),
               3: ("global", 8, "half")}, 0),  # YaRN on the full layer only
}  # fmt: skip


@pytest.mark.parametrize("name", list(LAYERS))
def test_each_familys_sites_are_mapped_per_layer(name: str, family) -> None:  # noqa: ANN001
    from ropeexport.audits.model import load_model
    from ropeexport.audits.query_scale import tables

    ckpt, model = family(name)
    result = rx.audit(model, ckpt / "config.json")
    assert result.verdict == "exact" and not result.findings, result.findings
    groups = {g["label"]: g["spec"] for g in result.layers["groups"]}
    expected, scale_tables = LAYERS[name]
    seen = {}
    for site in result.sites:
        (label,) = site["checked_as"]
        for layer in site["layers"]:
            seen[layer] = (label, groups[label]["rotary_dim"], groups[label]["layout"])
    assert seen == {k: v for k, v in expected.items() if v is not None}, seen
    assert len(tables(load_model(model))) == scale_tables


@pytest.mark.parametrize("bug", BUGS, ids=[b.case for b in BUGS])
def test_a_peers_bug_is_named_with_its_effect(bug: FamilyBug, family, tmp_path: Path) -> None:  # noqa: ANN001
    from ropeexport.audits.effect import between
    from ropeexport.audits.layers import encodings_for
    from ropeexport.audits.model import load_model

    ckpt, clean = family(bug.family)
    model, audited = planted(bug, tmp_path, clean, ckpt, lambda f, c: _decoder(f, c, "fused"))
    result = rx.audit(model, audited / "config.json")
    assert result.verdict == "findings"
    assert sorted(f["name"] for f in result.findings) == sorted([bug.finding, *bug.also]), result.findings
    found = next(f for f in result.findings if f["name"] == bug.finding)
    assert bug.words in found["text"], found["text"]
    if bug.effect is None:  # the audit cannot repair it, so says so; the planted model against the right one
        assert "not_measured" in found["effect"] and bug.graft in found["effect"]["not_measured"], found["effect"]
        encodings = encodings_for(audited / "config.json", None, load_model(clean))
        measured = between(clean, model, encodings)
        assert measured["relative"] > bug.between, measured
    else:
        low, high = bug.effect
        assert low < found["effect"]["relative"] <= high, found["effect"]
        assert found["severity"]["level"] == "wrong", found["severity"]




# graft of the rows whose repair is new here, or refused (the others' repairs, a table of another group's scaling,
# YaRN truncated, a no-RoPE layer's rotation undone, are proven in test_audit_layers.py on Gemma 3, Qwen3, SmolLM3)
GRAFTED = [b for b in BUGS if b.before != "named as now"]


@pytest.mark.slow  # each a graft proven against the float64 decoder (a few seconds each)
@pytest.mark.parametrize("bug", GRAFTED, ids=[b.case for b in GRAFTED])
def test_graft_repairs_what_values_can_and_proves_it(bug: FamilyBug, family, tmp_path: Path) -> None:  # noqa: ANN001
    ckpt, clean = family(bug.family)
    model, audited = planted(bug, tmp_path, clean, ckpt, lambda f, c: _decoder(f, c, "fused"))
    graft_as_planted(model, audited / "config.json", audited, tmp_path / "fixed" / "model.onnx", bug.graft)
