"""Transformer-XL's artifact kind: ``scores``, the four-term relative logit (feeds and locator of the bias methods)."""

from __future__ import annotations

from ropeexport.export.transformer_xl import build_transformer_xl_scores_graph
from ropeexport.registry import ArtifactKind, register_kind
from ropeexport.verify import transformer_xl as v
from ropeexport.verify.attention import bias_feeds, bias_locate, pair_curve
from ropeexport.verify.properties import shift_invariance

register_kind(
    ArtifactKind(
        "transformer-xl",
        "scores",
        "((q + u) . k + (q + v) . W_R R_(i-j)) / sqrt(head_dim), -inf after the query when causal",
        build_transformer_xl_scores_graph,
        v.scores_probes,
        bias_feeds,
        v.scores_eager,
        v.scores_float64,
        bias_locate,
        v.check_tables,
        guards=v.scores_guards,
        curve=pair_curve,
        properties=shift_invariance(bias_feeds, "scores"),
    )
)
