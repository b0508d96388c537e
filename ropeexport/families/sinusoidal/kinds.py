"""Sinusoidal encoding's artifact kinds: ``apply`` (x + PE[position_ids]) and ``scores`` (logits of q + PE, k + PE)."""

from __future__ import annotations

from ropeexport.families.bias.probes import query_curve
from ropeexport.families.sinusoidal import oracle as o
from ropeexport.families.sinusoidal import probes as v
from ropeexport.families.sinusoidal.export import build_apply_graph, build_scores_graph
from ropeexport.kinds import ArtifactKind

KINDS = {
    "apply": ArtifactKind(
        "sinusoidal",
        "apply",
        "y = x (* sqrt(d_model) with scale_input) + PE[position_ids]",
        build_apply_graph,
        v.apply_probes,
        v.apply_feeds,
        v.apply_eager,
        o.apply_float64,
        v.apply_locate,
        v.check_tables,
        guards=v.apply_guards,
        curve=v.apply_curve,
    ),
    "scores": ArtifactKind(
        "sinusoidal",
        "scores",
        "(q + PE_i) . (k + PE_j) / sqrt(head_dim), a head_dim-wide table added to every head",
        build_scores_graph,
        v.scores_probes,
        v.scores_feeds,
        v.scores_eager,
        o.scores_float64,
        v.scores_locate,
        v.check_tables,
        guards=v.scores_guards,
        curve=query_curve,
    ),
}
