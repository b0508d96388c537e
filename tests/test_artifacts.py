"""Every kind of artifact folder (``ropeexport.artifacts``) claimed by its manifest, listed in the index, diffed.

One row per kind: a folder of that kind is built (a small RoPE artifact, a checkpoint layer's block, the session's
seeded decoder), and the registry must hand it to that kind, the index must list it as passed, and a diff of its
report with itself must be clean. A class subclassing ``pipeline.Kind`` that ``artifacts.kinds()`` does not list, or
a listed kind without a row here, fails.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ropeexport as rx
from ropeexport import artifacts
from ropeexport.decoder.kind import DecoderKind
from ropeexport.decoder.layer import LayerBlockKind
from ropeexport.encoding import EncodingKind


def _encoding(tmp: Path, tiny_checkpoint: Any, seeded_decoder: Path) -> Path:
    return rx.build(rx.spec("rope", head_dim=16, num_heads=2, max_positions=64), tmp).path


def _layer_block(tmp: Path, tiny_checkpoint: Any, seeded_decoder: Path) -> Path:
    return rx.build_layer_block(tiny_checkpoint("llama"), tmp, layer=1).path


def _decoder(tmp: Path, tiny_checkpoint: Any, seeded_decoder: Path) -> Path:
    return seeded_decoder


ROWS: list[tuple[type, Callable[[Path, Any, Path], Path]]] = [
    (EncodingKind, _encoding),
    (LayerBlockKind, _layer_block),
    (DecoderKind, _decoder),
]


def _kind_classes() -> set[type]:
    """Every class of the package that says it is a ``pipeline.Kind`` (subclasses it), every module imported."""
    import importlib
    import pkgutil

    import ropeexport
    from ropeexport.pipeline import Kind

    for module in pkgutil.walk_packages(ropeexport.__path__, "ropeexport."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found, todo = set(), list(Kind.__subclasses__())
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo += cls.__subclasses__()
    return found


def test_every_kind_is_listed_and_has_a_row() -> None:
    # A kind written but not listed in artifacts.kinds() (its folders would be claimed by another kind, or none), or
    # listed without a row here, fails.
    listed = {type(k) for k in artifacts.kinds()}
    assert _kind_classes() == listed
    assert {kind for kind, _ in ROWS} == listed
    # the catch-all comes last: a kind listed after it would never claim a folder
    assert type(artifacts.kinds()[-1]) is EncodingKind


@pytest.mark.parametrize(("kind", "make"), ROWS, ids=[r[0].__name__ for r in ROWS])
def test_a_kind_claims_lists_and_diffs_its_folders(kind: type, make: Callable[[Path, Any, Path], Path],
                                                   tmp_path: Path, tiny_checkpoint: Any,
                                                   seeded_decoder: Path) -> None:  # fmt: skip
    folder = make(tmp_path / "out", tiny_checkpoint, seeded_decoder)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert type(artifacts.kind_of(manifest)) is kind
    line = artifacts.entry(folder, folder.parent)
    assert line["passed"] and line["status"] == "passed" and line["name"] == folder.name
    same = rx.diff(folder, folder)
    assert same.passed and same.regressions == [] and same.rows
