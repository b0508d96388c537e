"""The ALiBi and additive-bias cases: the bias, the scores it is added to, and the graphs it could be built with.

- ``alibi-bias-{fp32,fp16}``: [1, 32, 512, 512] written from two position vectors (32 MiB fp32); roofline: a fill;
- ``alibi-scores-fp32``: query and key [1, 32, 512, 128] -> scores [1, 32, 512, 512] (MatMul-bound, for context);
- ``alibi-bias-*-experiments``: the shipped single pass against the general bias graph (clamp, Cast, Expand, mask)
  and that graph without its Expand, each checked bit for bit;
- ``alibi_storage``: the artifact's initializers at two max_positions (H slopes, nothing that grows).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from ropeexport.catalog import recipe_for, spec_from_dict
from ropeexport.families.alibi.export import alibi_bias_nodes
from ropeexport.families.alibi.reference import alibi_bias
from ropeexport.families.bias.export import build_bias_graph
from ropeexport.families.bias.reference import scores_with_bias

from .context import NP_DTYPES, Context
from .peers import torch_entries
from .profiles import profile, profiles
from .roofline import floor_entry, roofline_entries
from .sessions import initializer_bytes, ort_entry
from .surgery import bypass, without_boundary_guards
from .timing import run_scenario


def alibi_spec(cfg: dict, dtype: str, graph: str, artifact: str, max_positions: int | None = None) -> Any:
    """Causal ALiBi with the scenario's heads."""
    a = cfg["alibi"]
    return spec_from_dict(
        {
            "encoding": "alibi",
            "artifact": artifact,
            "num_heads": a["heads"],
            "head_dim": a["head_dim"],
            "max_positions": max_positions or cfg["max_positions"],
            "dtype": dtype,
            "graph": graph,
        }
    )


def alibi_feeds(cfg: dict, artifact: str, dtype: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Positions 0..q-1 and 0..k-1 (plus query/key [b, H, len, d] for scores)."""
    a = cfg["alibi"]
    b = a["batch"]
    feeds = {}
    if artifact == "scores":
        for name, length in (("query", a["q"]), ("key", a["k"])):
            x = rng.standard_normal((b, a["heads"], length, a["head_dim"]), dtype=np.float32)
            feeds[name] = x.astype(NP_DTYPES[dtype])
    feeds["query_position_ids"] = np.array(np.broadcast_to(np.arange(a["q"], dtype=np.int64), (b, a["q"])))
    feeds["key_position_ids"] = np.array(np.broadcast_to(np.arange(a["k"], dtype=np.int64), (b, a["k"])))
    return feeds


def alibi_scenario(ctx: Context, artifact: str, dtype: str) -> dict[str, Any]:
    """Roofline (write the output; read q and k for scores), fused and decomposed artifacts, eager reference."""
    args, cfg = ctx.args, ctx.cfg
    a = cfg["alibi"]
    feeds = alibi_feeds(cfg, artifact, dtype, np.random.default_rng(0))
    out_name = {"bias": "attention_bias", "scores": "scores"}[artifact]
    outputs = {out_name: ((a["batch"], a["heads"], a["q"], a["k"]), np.dtype(NP_DTYPES[dtype]))}
    entries = roofline_entries(feeds, outputs, args)
    if artifact == "bias":
        entries.append(floor_entry(feeds, outputs, args))
    models = {}
    for graph in ("fused", "decomposed"):
        spec = alibi_spec(cfg, dtype, graph, artifact)
        model = models[graph] = recipe_for(spec).export(spec)
        info = {
            "initializer_bytes": initializer_bytes(model),
            "initializers": {t.name: list(t.dims) for t in model.graph.initializer},
            "nodes": len(model.graph.node),
        }
        what = f"ropeexport alibi {artifact} ({graph}, opset {model.opset_import[0].version}; ORT, IO binding)"
        entries.append(ort_entry(graph, what, model, feeds, args, info=info))
    spec = alibi_spec(cfg, dtype, "fused", artifact)

    class Eager(nn.Module):
        def forward(self, *xs: torch.Tensor) -> torch.Tensor:
            bias = alibi_bias(spec, xs[-2], xs[-1])
            return bias if artifact == "bias" else scores_with_bias(xs[0], xs[1], bias)

    entries += torch_entries(args, Eager(), feeds, compile_too=False)
    entries[-1].what = "PyTorch eager, ropeexport's alibi_bias reference (float32, clamp, cast, mask)"
    result = run_scenario(entries, "fused", args)
    result["_profile"] = profiles({"fused": models["fused"]}, feeds, args)
    result["_meta"] = {"shapes": {k: list(v.shape) for k, v in feeds.items()} | {out_name: list(outputs[out_name][0])}}
    return result


def alibi_experiments(ctx: Context, dtype: str) -> dict[str, Any]:
    """The shipped ALiBi bias against graphs with fewer full-size passes, each checked bit for bit; ORT profiles."""
    args, cfg = ctx.args, ctx.cfg
    a = cfg["alibi"]
    feeds = alibi_feeds(cfg, "bias", dtype, np.random.default_rng(0))
    outputs = {"attention_bias": ((a["batch"], a["heads"], a["q"], a["k"]), np.dtype(NP_DTYPES[dtype]))}
    spec = alibi_spec(cfg, dtype, "fused", "bias")
    model = recipe_for(spec).export(spec)
    # The general path every additive-bias method takes (clamp, Cast, Expand, mask: four full-size passes); the ALiBi
    # bias artifact ships its single pass instead wherever the clamp cannot act.
    general = build_bias_graph(spec, alibi_bias_nodes)
    no_expand = bypass(general, "Expand")  # causal: the mask's Where broadcasts to [b, H, q, k] by itself
    entries = roofline_entries(feeds, outputs, args) + [floor_entry(feeds, outputs, args)]
    entries.append(ort_entry("fused", "shipped bias artifact", model, feeds, args))
    variants = {"fused": model}
    what = "the shipped artifact without its in-graph range guards (positions unchecked in plain ORT)"
    entries.append(ort_entry("fused_no_guard", what, without_boundary_guards(model), feeds, args))
    what = "the general bias graph (clamp, Cast, Expand, mask: what shipped before the single pass)"
    entries.append(ort_entry("general", what, general, feeds, args))
    variants["general"] = general
    what = "the general graph without its Expand (the Where broadcasts)"
    entries.append(ort_entry("no_expand", what, no_expand, feeds, args))
    variants["no_expand"] = no_expand
    result = run_scenario(entries, "fused", args)
    result["_profile"] = {name: profile(m, feeds, args) for name, m in variants.items()}
    result["_meta"] = {
        "shapes": {k: list(v.shape) for k, v in feeds.items()},
        "shipped_nodes": [n.op_type for n in model.graph.node],
    }
    return result


def alibi_storage(cfg: dict) -> dict[str, Any]:
    """ALiBi bias initializers at two max_positions: the artifact must hold H float32 slopes and nothing that grows."""
    sizes = {}
    slopes = {}
    for p in (cfg["max_positions"], 32 * cfg["max_positions"]):
        spec = alibi_spec(cfg, "fp32", "fused", "bias", p)
        model = recipe_for(spec).export(spec)
        sizes[p] = initializer_bytes(model)
        slopes[p] = [list(t.dims) for t in model.graph.initializer if t.name == "neg_slopes"]
    heads = cfg["alibi"]["heads"]
    first, last = sizes.values()
    ok = first == last and all(s == [[1, heads, 1, 1]] for s in slopes.values())
    detail = (
        f"initializer bytes {sizes} by max_positions; neg_slopes {slopes[cfg['max_positions']]} "
        f"= {heads} float32 slopes ({4 * heads} bytes); the rest are axes/constants"
    )
    return {"initializer_bytes": first, "by_max_positions": sizes, "slopes_only": ok, "detail": detail}
