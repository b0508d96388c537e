"""Shaw et al. 2018 relative position representations: ``scores`` and ``attention`` artifacts."""

from __future__ import annotations

from ropeexport.export.shaw import build_shaw_attention_graph, build_shaw_scores_graph
from ropeexport.registry import ArtifactKind, register_kind
from ropeexport.verify import shaw as v
from ropeexport.verify.attention import pair_curve
from ropeexport.verify.properties import shift_invariance

register_kind(
    ArtifactKind(
        "shaw",
        "scores",
        "q . (k + a^K_clip(j-i)) / sqrt(d), a^K shared by heads",
        build_shaw_scores_graph,
        v.shaw_probes,
        v.shaw_feeds,
        v.shaw_eager,
        v.shaw_oracle,
        v.shaw_locate,
        curve=pair_curve,
        properties=shift_invariance(v.shaw_feeds, "scores"),
    )
)
register_kind(
    ArtifactKind(
        "shaw",
        "attention",
        "softmax(scores) . (v + a^V_clip(j-i)) (fused: ONNX Attention plus the value-side term)",
        build_shaw_attention_graph,
        v.shaw_probes,
        v.shaw_feeds,
        v.shaw_eager,
        v.shaw_oracle,
        v.shaw_locate,
        curve=pair_curve,
        properties=shift_invariance(v.shaw_feeds, "output"),
    )
)
