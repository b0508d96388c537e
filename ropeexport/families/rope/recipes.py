"""RoPE's artifact kinds: ``rope`` (rotated query and key), ``scores`` (logits of the rotated pair); its positions
(``POSITIONS``: what ``ropeexport.block`` makes its ``block`` kind from).
"""  # noqa: D205

from __future__ import annotations

from ropeexport.families.rope import probes as v
from ropeexport.families.rope.export import build_rope_graph, build_rope_scores_graph
from ropeexport.families.rope.plugin import build_rope_plugin_graph
from ropeexport.families.rope.positions import POSITIONS
from ropeexport.families.rope.properties import regime, rope_properties
from ropeexport.properties import shift_invariance
from ropeexport.recipes import Recipe

RECIPES = {
    "rope": Recipe(
        encoding="rope",
        artifact="rope",
        summary="query and key rotated by position_ids",
        export=lambda spec: build_rope_plugin_graph(spec) if spec.graph == "plugin" else build_rope_graph(spec),
        probes=v.rope_probes,
        feeds=v.rope_feeds,
        eager=v.rope_eager,
        oracle=v.rope_float64,
        locate=v.rope_locate,
        tables=v.check_tables,
        guards=v.rope_guards,
        curve=v.rope_curve,
        properties=rope_properties,
    ),
    "scores": Recipe(
        encoding="rope",
        artifact="scores",
        summary="attention logits of the rotated query and key",
        export=build_rope_scores_graph,
        probes=v.scores_probes,
        feeds=v.scores_feeds,
        eager=v.scores_eager,
        oracle=v.scores_float64,
        locate=v.scores_locate,
        tables=v.check_tables,
        guards=v.scores_guards,
        curve=v.scores_curve,
        properties=shift_invariance(v.scores_feeds, "scores", regime),
    ),
}

__all__ = ["RECIPES", "POSITIONS"]
