"""TUPE (untied positional correlation plus a T5 relative bias): the ``scores`` artifact."""

from __future__ import annotations

from ropeexport.families.bias.probes import query_curve
from ropeexport.families.tupe import oracle as o
from ropeexport.families.tupe import probes as v
from ropeexport.families.tupe.export import build_tupe_scores_graph
from ropeexport.recipes import Recipe

RECIPES = {
    "scores": Recipe(
        encoding="tupe",
        artifact="scores",
        summary="q . k / sqrt(2d) + (p_i U^Q) . (p_j U^K) / sqrt(2d) + b(bucket(j - i))",
        export=build_tupe_scores_graph,
        probes=v.tupe_probes,
        feeds=v.tupe_feeds,
        eager=v.tupe_eager,
        oracle=o.tupe_oracle,
        locate=v.tupe_locate,
        tables=v.tupe_check_tables,
        guards=v.tupe_guards,
        curve=query_curve,
    ),
}
