"""Shaw et al. 2018 relative position representations: ``scores`` and ``attention`` artifacts."""

from __future__ import annotations

from ropeexport.families.bias.probes import pair_curve
from ropeexport.families.shaw import oracle as o
from ropeexport.families.shaw import probes as v
from ropeexport.families.shaw.export import build_shaw_attention_graph, build_shaw_scores_graph
from ropeexport.properties import shift_invariance
from ropeexport.recipes import Recipe

RECIPES = {
    "scores": Recipe(
        encoding="shaw",
        artifact="scores",
        summary="q . (k + a^K_clip(j-i)) / sqrt(d), a^K shared by heads",
        export=build_shaw_scores_graph,
        probes=v.shaw_probes,
        feeds=v.shaw_feeds,
        eager=v.shaw_eager,
        oracle=o.shaw_oracle,
        locate=v.shaw_locate,
        curve=pair_curve,
        properties=shift_invariance(v.shaw_feeds, "scores"),
    ),
    "attention": Recipe(
        encoding="shaw",
        artifact="attention",
        summary="softmax(scores) . (v + a^V_clip(j-i)) (fused: ONNX Attention plus the value-side term)",
        export=build_shaw_attention_graph,
        probes=v.shaw_probes,
        feeds=v.shaw_feeds,
        eager=v.shaw_eager,
        oracle=o.shaw_oracle,
        locate=v.shaw_locate,
        curve=pair_curve,
        properties=shift_invariance(v.shaw_feeds, "output"),
    ),
}
