"""Planted bugs: deliberately wrong artifacts that verification must fail, each with the checks that must catch it.

The machinery every family shares (``PlantedBug``, ``Detection``, ``detect``, ``verify_correct``, ``export`` and the
graph edits) is in ``core``; each family with planted bugs has one module holding its list (``rope``, ``alibi``,
``vision_rope``).
This package collects those lists, by name, in ``FAMILY_BUGS``: adding a family's bugs is its module and one line
there. ``BUGS`` is every bug, family by family in that order.

Used by ``tests/planted/test_planted_bugs.py`` and ``tools/planted_bugs.py`` (the docs' detection table,
docs/status/figures.md). It sits above the catalog: nothing in ``ropeexport`` below it imports this package.
"""

from __future__ import annotations

from typing import Any

from ropeexport.planted import alibi, mrope, rope, vision_rope
from ropeexport.planted.core import Detection, PlantedBug, claimed_specs, detect, export, verify_correct

__all__ = ["BUGS", "FAMILY_BUGS", "Detection", "PlantedBug", "correct_specs", "detect", "export", "verify_correct"]

# One line per family with planted bugs, in catalog order: {encoding: its bugs}. Listed here rather than registered
# on import, so that what runs is what this table says.
FAMILY_BUGS: dict[str, list[PlantedBug]] = {
    "rope": rope.BUGS + mrope.BUGS,  # M-RoPE's are RoPE specs (position_ids [3, batch, seq])
    "alibi": alibi.BUGS,
    "vision_rope": vision_rope.BUGS,
}

BUGS: list[PlantedBug] = [bug for bugs in FAMILY_BUGS.values() for bug in bugs]


def correct_specs() -> list[Any]:
    """Every spec the table's bugs claim to be, once each (their correct builds must pass)."""
    return claimed_specs(BUGS)
