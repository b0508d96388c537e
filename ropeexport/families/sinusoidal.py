"""Sinusoidal encoding's artifact kinds: ``apply`` (x + PE[position_ids]) and ``scores`` (logits of q + PE, k + PE)."""

from __future__ import annotations

from ropeexport.export.sinusoidal import build_apply_graph, build_scores_graph
from ropeexport.registry import ArtifactKind, register_kind
from ropeexport.verify import sinusoidal as v
from ropeexport.verify.attention import query_curve

register_kind(
    ArtifactKind(
        "sinusoidal",
        "apply",
        "y = x (* sqrt(d_model) with scale_input) + PE[position_ids]",
        build_apply_graph,
        v.apply_probes,
        v.apply_feeds,
        v.apply_eager,
        v.apply_float64,
        v.apply_locate,
        v.check_tables,
        guards=v.apply_guards,
        curve=v.apply_curve,
    )
)
register_kind(
    ArtifactKind(
        "sinusoidal",
        "scores",
        "(q + PE_i) . (k + PE_j) / sqrt(head_dim), a head_dim-wide table added to every head",
        build_scores_graph,
        v.scores_probes,
        v.scores_feeds,
        v.scores_eager,
        v.scores_float64,
        v.scores_locate,
        v.check_tables,
        guards=v.scores_guards,
        curve=query_curve,
    )
)
