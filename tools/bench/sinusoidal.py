"""The sinusoidal case: ``apply`` (y = x + PE[position_ids]) on x [1, 2048, 4096] against a copy of x -> y.

``sinusoidal-apply-{fp32,fp16}``: roofline, ORT floor, ropeexport's fused and decomposed artifacts (Gather + Add),
and ropeexport's eager ``SinusoidalEmbedding`` reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from ropeexport.catalog import recipe_for, spec_from_dict
from ropeexport.families.sinusoidal.reference import SinusoidalEmbedding

from .context import NP_DTYPES, Context
from .peers import torch_entries
from .profiles import profiles
from .roofline import floor_entry, roofline_entries, same_shapes
from .sessions import initializer_bytes, ort_entry
from .timing import run_scenario


def sinusoidal_scenario(ctx: Context, dtype: str) -> dict[str, Any]:
    """y = x + PE[position_ids]: roofline (x -> y), ORT floor, fused and decomposed artifacts, eager reference."""
    args, cfg = ctx.args, ctx.cfg
    s = cfg["sinusoidal"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((s["batch"], s["seq"], s["d_model"]), dtype=np.float32).astype(NP_DTYPES[dtype])
    pos = np.array(np.broadcast_to(np.arange(s["seq"], dtype=np.int64), (s["batch"], s["seq"])))
    feeds = {"x": x, "position_ids": pos}
    outputs = same_shapes(feeds, {"y": "x"})
    entries = roofline_entries(feeds, outputs, args) + [floor_entry(feeds, outputs, args)]
    spec = None
    models = {}
    for graph in ("fused", "decomposed"):
        spec = spec_from_dict(
            {
                "encoding": "sinusoidal",
                "artifact": "apply",
                "d_model": s["d_model"],
                "max_positions": cfg["max_positions"],
                "dtype": dtype,
                "graph": graph,
            }
        )
        model = models[graph] = recipe_for(spec).export(spec)
        info = {"initializer_bytes": initializer_bytes(model), "nodes": len(model.graph.node)}
        what = f"ropeexport sinusoidal apply ({graph}; Gather + Add; ORT, IO binding)"
        entries.append(ort_entry(graph, what, model, feeds, args, info=info))
    module = SinusoidalEmbedding(spec).eval()

    class Eager(nn.Module):
        def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
            return module(x, position_ids=position_ids)

    entries += torch_entries(args, Eager(), feeds, compile_too=False)
    entries[-1].what = "PyTorch eager, ropeexport's SinusoidalEmbedding reference"
    result = run_scenario(entries, "fused", args)
    result["_profile"] = profiles({"fused": models["fused"]}, feeds, args)
    result["_meta"] = {"shapes": {k: list(v.shape) for k, v in feeds.items()}}
    return result
