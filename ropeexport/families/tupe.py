"""TUPE (untied positional correlation plus a T5 relative bias): the ``scores`` artifact."""

from __future__ import annotations

from ropeexport.export.tupe import build_tupe_scores_graph
from ropeexport.registry import ArtifactKind, register_kind
from ropeexport.verify import tupe as v
from ropeexport.verify.attention import query_curve

register_kind(
    ArtifactKind(
        "tupe",
        "scores",
        "q . k / sqrt(2d) + (p_i U^Q) . (p_j U^K) / sqrt(2d) + b(bucket(j - i))",
        build_tupe_scores_graph,
        v.tupe_probes,
        v.tupe_feeds,
        v.tupe_eager,
        v.tupe_oracle,
        v.tupe_locate,
        tables=v.tupe_check_tables,
        guards=v.tupe_guards,
        curve=query_curve,
    )
)
