"""Sinusoidal encoding's artifact kinds: ``apply`` (x + PE[position_ids]) and ``scores`` (logits of q + PE, k + PE)."""

from __future__ import annotations

from ropeexport.families.bias.probes import query_curve
from ropeexport.families.sinusoidal import oracle as o
from ropeexport.families.sinusoidal import probes as v
from ropeexport.families.sinusoidal.export import build_apply_graph, build_scores_graph
from ropeexport.recipes import Recipe

RECIPES = {
    "apply": Recipe(
        encoding="sinusoidal",
        artifact="apply",
        summary="y = x (* sqrt(d_model) with scale_input) + PE[position_ids]",
        export=build_apply_graph,
        probes=v.apply_probes,
        feeds=v.apply_feeds,
        eager=v.apply_eager,
        oracle=o.apply_float64,
        locate=v.apply_locate,
        tables=v.check_tables,
        guards=v.apply_guards,
        curve=v.apply_curve,
    ),
    "scores": Recipe(
        encoding="sinusoidal",
        artifact="scores",
        summary="(q + PE_i) . (k + PE_j) / sqrt(head_dim), a head_dim-wide table added to every head",
        export=build_scores_graph,
        probes=v.scores_probes,
        feeds=v.scores_feeds,
        eager=v.scores_eager,
        oracle=o.scores_float64,
        locate=v.scores_locate,
        tables=v.check_tables,
        guards=v.scores_guards,
        curve=query_curve,
    ),
}
