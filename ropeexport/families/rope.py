"""RoPE's artifact kinds: ``rope`` (rotated query and key) and ``scores`` (logits of the rotated pair)."""

from __future__ import annotations

from ropeexport.export.plugin import build_rope_plugin_graph
from ropeexport.export.rope import build_rope_graph, build_rope_scores_graph
from ropeexport.registry import ArtifactKind, register_kind
from ropeexport.verify import rope as v
from ropeexport.verify.properties import rope_properties, shift_invariance

register_kind(
    ArtifactKind(
        "rope",
        "rope",
        "query and key rotated by position_ids",
        lambda spec: build_rope_plugin_graph(spec) if spec.graph == "plugin" else build_rope_graph(spec),
        v.rope_probes,
        v.rope_feeds,
        v.rope_eager,
        v.rope_float64,
        v.rope_locate,
        v.check_tables,
        v.rope_guards,
        curve=v.rope_curve,
        properties=rope_properties,
    )
)
register_kind(
    ArtifactKind(
        "rope",
        "scores",
        "attention logits of the rotated query and key",
        build_rope_scores_graph,
        v.scores_probes,
        v.scores_feeds,
        v.scores_eager,
        v.scores_float64,
        v.scores_locate,
        v.check_tables,
        v.scores_guards,
        curve=v.scores_curve,
        properties=shift_invariance(v.scores_feeds, "scores"),
    )
)
