"""The one case table over the registry: every encoding x artifact x dtype x graph style builds and verifies."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ropeexport import build
from ropeexport.catalog import encodings, recipe_for, recipes
from tests.cases import tiered

# Small sizes, applied to whichever of these fields an encoding has.
SMALL = {
    "max_positions": 96,
    "num_heads": 3,
    "head_dim": 8,
    "d_model": 16,
    "clip": 5,
    "num_buckets": 8,
    "max_distance": 32,
}
encodings()  # registers every family
CASES = [
    pytest.param(encoding, artifact, dtype, graph, id=f"{encoding}-{artifact}-{dtype}-{graph}")
    for (encoding, artifact) in sorted(recipes())
    for dtype in ("fp32", "fp16")
    for graph in ("fused", "decomposed")
]


def small(encoding: str, **fields: object) -> object:
    cls = encodings()[encoding]
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in SMALL.items() if k in names}, **fields)


# Fast tier: every kind in fp32, fused; CI builds every dtype and form.
@pytest.mark.parametrize(("encoding", "artifact", "dtype", "graph"),
                         tiered(CASES, lambda c: c[2:] == ("fp32", "fused")))  # fmt: skip
def test_every_kind_builds_and_verifies(tmp_path: Path, encoding: str, artifact: str, dtype: str, graph: str) -> None:
    spec = small(encoding, artifact=artifact, dtype=dtype, graph=graph)
    result = build(spec, tmp_path)
    report = result.encoding_report
    failing = [c.data for c in report.comparisons if not c.passed]
    assert result.passed, failing or [t.data for t in report.tables] or [g.data for g in report.guards]
    assert {c.reference for c in report.comparisons} == {"eager", "float64"}
    manifest = (result.path / "manifest.json").read_text()
    assert f'"artifact": "{artifact}"' in manifest


def test_every_encoding_lists_only_registered_artifacts() -> None:
    for name, cls in encodings().items():
        assert cls.artifacts, name
        for artifact in cls.artifacts:
            assert recipe_for(small(name, artifact=artifact)).artifact == artifact
