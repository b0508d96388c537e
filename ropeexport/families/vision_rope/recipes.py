"""2-D vision RoPE's artifact kind: ``rope`` (query and key rotated by their patches' height and width)."""

from __future__ import annotations

from ropeexport.families.vision_rope import probes as v
from ropeexport.families.vision_rope.export import build_vision_rope_graph
from ropeexport.recipes import Recipe

RECIPES = {
    "rope": Recipe(
        encoding="vision_rope",
        artifact="rope",
        summary="query and key rotated by position_ids [2, batch, seq] (height, width)",
        export=build_vision_rope_graph,
        probes=v.vision_probes,
        feeds=v.vision_feeds,
        eager=v.vision_eager,
        oracle=v.vision_float64,
        locate=v.vision_locate,
        tables=v.check_tables,
        guards=v.vision_guards,
        curve=v.vision_curve,
    ),
}

__all__ = ["RECIPES"]
