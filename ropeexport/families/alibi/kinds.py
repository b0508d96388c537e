"""ALiBi: ``bias``, ``scores``, ``attention`` and ``block`` artifacts."""

from __future__ import annotations

from ropeexport.block.probes import block_curve, block_feeds, block_locate, block_tolerance, counted_block_probes
from ropeexport.families.alibi import block as b
from ropeexport.families.alibi.export import alibi_bias_nodes, alibi_single_pass
from ropeexport.families.alibi.oracle import alibi_oracle, check_slopes
from ropeexport.families.alibi.reference import alibi_bias
from ropeexport.families.bias.kinds import bias_kinds
from ropeexport.kinds import ArtifactKind

KINDS = bias_kinds(
    "alibi", alibi_bias_nodes, alibi_bias, alibi_oracle, tables=check_slopes, single_pass=alibi_single_pass
) | {
    "block": ArtifactKind(
        "alibi",
        "block",
        "an attention layer with a KV cache: hidden in, the ALiBi bias piece on the logits, output and present",
        b.export_block,
        counted_block_probes,
        block_feeds,
        b.eager_block,
        b.float64_block,
        block_locate,
        lambda spec, path: check_slopes(spec, path, prefix="bias/"),
        curve=block_curve,
        tolerance=block_tolerance,
    )
}
