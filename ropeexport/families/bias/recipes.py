"""The ``bias``, ``scores`` and ``attention`` kinds of an additive-bias method, made from its pieces, and its
positions (what ``ropeexport.block`` makes its ``block`` kind from).
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ropeexport.families.bias.export import (
    BiasFn,
    SinglePassFn,
    build_attention_graph,
    build_bias_graph,
    build_scores_graph,
)
from ropeexport.families.bias.positions import bias_positions
from ropeexport.families.bias.probes import (
    EagerBias,
    OracleBias,
    bias_feeds,
    bias_locate,
    bias_probes,
    make_eager,
    make_oracle,
    pair_curve,
)
from ropeexport.properties import shift_invariance
from ropeexport.recipes import Feeds, Positions, Recipe

OUTPUTS = {"bias": "attention_bias", "scores": "scores", "attention": "output"}
SUMMARIES = {
    "bias": "attention_bias [b, heads, q, k] from query and key position ids",
    "scores": "q . k / sqrt(d) + bias",
    "attention": "softmax(q . k / sqrt(d) + bias) . v (fused: ONNX Attention with the bias as attn_mask)",
}


def bias_recipes(
    encoding: str,
    graph_bias: BiasFn,
    eager_bias: EagerBias,
    oracle_bias: OracleBias,
    guards: Callable[[Any], list[tuple[str, Feeds]]] | None = None,
    tables: Callable[[Any, Any], list[dict[str, Any]]] | None = None,
    single_pass: SinglePassFn | None = None,
) -> tuple[dict[str, Recipe], Positions[Any]]:
    """One method's bias subgraph, eager bias and float64 bias -> its artifact kinds by artifact, and its positions.

    ``guards(spec)`` gives out-of-range calls the graph itself must reject (for methods with a table to index).
    ``single_pass`` builds the finished bias in one pass where it can (see ``families.bias.export``).
    """
    builders = {"bias": build_bias_graph, "scores": build_scores_graph, "attention": build_attention_graph}
    eager, oracle = make_eager(eager_bias), make_oracle(oracle_bias)
    kinds = {}
    for artifact, builder in builders.items():
        export = lambda spec, b=builder: b(spec, graph_bias, single_pass)  # noqa: E731
        kinds[artifact] = Recipe(
            encoding=encoding,
            artifact=artifact,
            summary=SUMMARIES[artifact],
            export=export,
            probes=bias_probes,
            feeds=bias_feeds,
            eager=eager,
            oracle=oracle,
            locate=bias_locate,
            tables=tables,
            guards=guards,
            curve=pair_curve,
            properties=shift_invariance(bias_feeds, OUTPUTS[artifact]),
        )
    return kinds, bias_positions(graph_bias, eager_bias, oracle_bias, tables, single_pass)
