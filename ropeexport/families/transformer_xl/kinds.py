"""Transformer-XL's artifact kind: ``scores``, the four-term relative logit (feeds and locator of the bias methods)."""

from __future__ import annotations

from ropeexport.families.bias.probes import bias_feeds, bias_locate, pair_curve
from ropeexport.families.transformer_xl import oracle as o
from ropeexport.families.transformer_xl import probes as v
from ropeexport.families.transformer_xl.export import build_transformer_xl_scores_graph
from ropeexport.kinds import ArtifactKind
from ropeexport.verification.properties import shift_invariance

KINDS = {
    "scores": ArtifactKind(
        "transformer-xl",
        "scores",
        "((q + u) . k + (q + v) . W_R R_(i-j)) / sqrt(head_dim), -inf after the query when causal",
        build_transformer_xl_scores_graph,
        v.scores_probes,
        bias_feeds,
        v.scores_eager,
        o.scores_float64,
        bias_locate,
        v.check_tables,
        guards=v.scores_guards,
        curve=pair_curve,
        properties=shift_invariance(bias_feeds, "scores"),
    ),
}
