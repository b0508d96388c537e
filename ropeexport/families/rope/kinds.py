"""RoPE's artifact kinds: ``rope`` (rotated query and key), ``scores`` (logits of the rotated pair), ``block``."""

from __future__ import annotations

from ropeexport.block.probes import block_curve, block_feeds, block_locate, block_probes, block_tolerance
from ropeexport.families.rope import block as b
from ropeexport.families.rope import probes as v
from ropeexport.families.rope.export import build_rope_graph, build_rope_scores_graph
from ropeexport.families.rope.plugin import build_rope_plugin_graph
from ropeexport.families.rope.properties import regime, rope_properties
from ropeexport.kinds import ArtifactKind
from ropeexport.verification.properties import shift_invariance

KINDS = {
    "rope": ArtifactKind(
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
    ),
    "block": ArtifactKind(
        "rope",
        "block",
        "an attention layer with a KV cache: hidden in, query and key rotated by the rope piece, output and present",
        b.export_block,
        block_probes,
        block_feeds,
        b.eager_block,
        b.float64_block,
        block_locate,
        b.block_tables,
        curve=block_curve,
        tolerance=block_tolerance,
        piece=b.piece,
    ),
    "scores": ArtifactKind(
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
        properties=shift_invariance(v.scores_feeds, "scores", regime),
    ),
}
