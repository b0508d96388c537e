"""Shaw et al. 2018 relative position representations: ``scores`` and ``attention`` artifacts."""

from __future__ import annotations

from ropeexport.families.bias.probes import pair_curve
from ropeexport.families.shaw import oracle as o
from ropeexport.families.shaw import probes as v
from ropeexport.families.shaw.export import build_shaw_attention_graph, build_shaw_scores_graph
from ropeexport.kinds import ArtifactKind
from ropeexport.verification.properties import shift_invariance

KINDS = {
    "scores": ArtifactKind(
        "shaw",
        "scores",
        "q . (k + a^K_clip(j-i)) / sqrt(d), a^K shared by heads",
        build_shaw_scores_graph,
        v.shaw_probes,
        v.shaw_feeds,
        v.shaw_eager,
        o.shaw_oracle,
        v.shaw_locate,
        curve=pair_curve,
        properties=shift_invariance(v.shaw_feeds, "scores"),
    ),
    "attention": ArtifactKind(
        "shaw",
        "attention",
        "softmax(scores) . (v + a^V_clip(j-i)) (fused: ONNX Attention plus the value-side term)",
        build_shaw_attention_graph,
        v.shaw_probes,
        v.shaw_feeds,
        v.shaw_eager,
        o.shaw_oracle,
        v.shaw_locate,
        curve=pair_curve,
        properties=shift_invariance(v.shaw_feeds, "output"),
    ),
}
