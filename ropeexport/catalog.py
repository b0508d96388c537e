"""Every encoding family, listed once: the only module that knows them all.

A family is a package ``ropeexport/families/<name>/`` with one module per stage: ``spec.py`` (the spec class as
``SPEC``; torch-free), ``reference.py`` (eager PyTorch), ``export.py`` (the ONNX graph and the piece a bigger graph
calls), ``oracle.py`` (float64, never importing the exporter), ``probes.py`` (the positions verification feeds) and
``recipes.py`` (``RECIPES = {artifact: Recipe}``, the wiring). Adding a family is its folder, one line in
``FAMILIES``, its tests and its docs.

Specs load on import (they need only numpy); a family's recipes, which pull in torch and onnx, load the first time
any kind is asked for. Everything below this module (pipeline, verification, runtimes, report) is handed a kind and
never looks one up, so no import points upward.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import Any

from ropeexport.errors import SpecError
from ropeexport.recipes import Recipe
from ropeexport.specs import SpecBase

# One line per family: its package. The order is the order of `ropeexport list` and of the build's flags.
FAMILIES: tuple[str, ...] = (
    "ropeexport.families.rope",
    "ropeexport.families.alibi",
    "ropeexport.families.kerple",
    "ropeexport.families.sandwich",
    "ropeexport.families.shaw",
    "ropeexport.families.sinusoidal",
    "ropeexport.families.t5",
    "ropeexport.families.transformer_xl",
    "ropeexport.families.tupe",
    "ropeexport.families.vision_rope",
)

_SPECS: dict[str, type[SpecBase]] = {}
_RECIPES: dict[tuple[str, str], Recipe] = {}


def encodings() -> dict[str, type[SpecBase]]:
    """Every encoding's spec class, by encoding name, in catalog order (loads no torch)."""
    if not _SPECS:
        for package in FAMILIES:
            cls = importlib.import_module(f"{package}.spec").SPEC
            if cls.encoding in _SPECS:
                raise ValueError(f"encoding {cls.encoding!r} is listed twice in the catalog")
            _SPECS[cls.encoding] = cls
    return _SPECS


def recipes() -> dict[tuple[str, str], Recipe]:
    """Every recipe by (encoding, artifact); each must be an artifact the family's spec class lists."""
    if not _RECIPES:
        specs = encodings()
        for package in FAMILIES:
            cls = importlib.import_module(f"{package}.spec").SPEC
            module = importlib.import_module(f"{package}.recipes")
            table: dict[str, Recipe] = dict(module.RECIPES)
            positions = getattr(module, "POSITIONS", None)
            if positions is not None:  # the family offers its positions: the block's recipe is the block's to make
                block = importlib.import_module("ropeexport.block.recipe")
                table["block"] = block.block_recipe(cls.encoding, positions)
            if set(table) != set(cls.artifacts):
                raise ValueError(f"{package}.recipes has {sorted(table)}, its spec lists {sorted(cls.artifacts)}")
            for artifact in cls.artifacts:  # the spec's order: its first artifact is the default
                recipe = table[artifact]
                if (recipe.encoding, recipe.artifact) != (cls.encoding, artifact):
                    raise ValueError(f"{package}.recipes[{artifact!r}] is {recipe.encoding}/{recipe.artifact}")
                _RECIPES[(cls.encoding, artifact)] = recipe
        assert set(e for e, _ in _RECIPES) == set(specs)
    return _RECIPES


def recipe_for(spec: Any) -> Recipe:
    """The recipe of what a spec builds; an artifact its encoding lacks is a SpecError listing the ones it has."""
    table = recipes()
    try:
        return table[(spec.encoding, spec.artifact)]
    except KeyError:
        have = [a for (e, a) in table if e == spec.encoding]
        raise SpecError(
            "artifact", f"{spec.encoding} has no {spec.artifact!r} artifact; allowed: {', '.join(have)}"
        ) from None


def spec_from_dict(data: Mapping[str, Any], where: str = "spec") -> Any:
    """Build a spec from a plain mapping (a spec file's contents, or the manifest's ``spec``).

    ``encoding`` picks the family (rope when absent). Unknown keys are errors: a misspelt key must not silently fall
    back to a default.
    """
    if not isinstance(data, Mapping):
        raise SpecError(where, "must be a table of fields")
    data = dict(data)
    encoding = data.pop("encoding", "rope")
    specs = encodings()
    if not isinstance(encoding, str) or encoding not in specs:
        raise SpecError("encoding", f"unknown encoding {encoding!r}; allowed: {', '.join(specs)}")
    cls = specs[encoding]
    allowed = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise SpecError(
            unknown[0], f"unknown field for encoding '{encoding}'; allowed: {', '.join(['encoding', *allowed])}"
        )
    return cls(**data)
