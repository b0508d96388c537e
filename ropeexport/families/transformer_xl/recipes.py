"""Transformer-XL's artifact kind: ``scores``, the four-term relative logit (feeds and locator of the bias methods)."""

from __future__ import annotations

from ropeexport.families.bias.probes import bias_feeds, bias_guards, bias_locate, pair_curve
from ropeexport.families.transformer_xl import oracle as o
from ropeexport.families.transformer_xl import probes as v
from ropeexport.families.transformer_xl.export import build_transformer_xl_scores_graph
from ropeexport.properties import shift_invariance
from ropeexport.recipes import Recipe

RECIPES = {
    "scores": Recipe(
        encoding="transformer-xl",
        artifact="scores",
        summary="((q + u) . k + (q + v) . W_R R_(i-j)) / sqrt(head_dim), -inf after the query when causal",
        export=build_transformer_xl_scores_graph,
        probes=v.scores_probes,
        feeds=bias_feeds,
        eager=v.scores_eager,
        oracle=o.scores_float64,
        locate=bias_locate,
        tables=v.check_tables,
        guards=bias_guards,
        curve=pair_curve,
        properties=shift_invariance(bias_feeds, "scores"),
    ),
}
