"""TUPE (untied positional correlation plus a T5 relative bias): the ``scores`` artifact."""

from __future__ import annotations

from ropeexport.families.bias.probes import query_curve
from ropeexport.families.tupe import oracle as o
from ropeexport.families.tupe import probes as v
from ropeexport.families.tupe.export import build_tupe_scores_graph
from ropeexport.kinds import ArtifactKind

KINDS = {
    "scores": ArtifactKind(
        "tupe",
        "scores",
        "q . k / sqrt(2d) + (p_i U^Q) . (p_j U^K) / sqrt(2d) + b(bucket(j - i))",
        build_tupe_scores_graph,
        v.tupe_probes,
        v.tupe_feeds,
        v.tupe_eager,
        o.tupe_oracle,
        v.tupe_locate,
        tables=v.tupe_check_tables,
        guards=v.tupe_guards,
        curve=query_curve,
    ),
}
