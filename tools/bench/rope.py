"""The RoPE cases: Llama-style prefill and decode, ropeexport's fused and decomposed artifacts against the peers.

- ``rope-prefill-{fp32,fp16}``: query [1, 32, 2048, 128], key [1, 8, 2048, 128], positions 0..2047;
- ``rope-decode-{fp32,fp16}``: query [16, 32, 1, 128], key [16, 8, 1, 128], position 3990 + row;
- ``rope-*-experiments``: the fused artifact without its guard, via ``session.run``, on one thread, without graph
  optimizations, and fp16 computed in fp32, each isolating one cost, with the ORT profiler's per-operator time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ropeexport.catalog import recipe_for, spec_from_dict

from .context import NP_DTYPES, Context
from .peers import HFRotary, torch_entries
from .profiles import profile, profiles
from .roofline import floor_entry, floor_feeds, floor_model, roofline_entries, same_shapes
from .sessions import initializer_bytes, ort_entry
from .surgery import fp16_via_fp32, guard_nodes, without_guards
from .timing import failed, run_scenario


def rope_spec(cfg: dict, dtype: str, graph: str) -> Any:
    """Llama-style fused or decomposed RoPE (half layout, default schedule)."""
    r = cfg["rope"]
    return spec_from_dict(
        {
            "num_heads": r["heads"],
            "num_kv_heads": r["kv_heads"],
            "head_dim": r["head_dim"],
            "max_positions": cfg["max_positions"],
            "theta": cfg["theta"],
            "dtype": dtype,
            "graph": graph,
        }
    )


def rope_feeds(cfg: dict, phase: str, dtype: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """query [b, H, s, d], key [b, KV, s, d], position_ids [b, s] for prefill (0..s-1) or decode (first + row)."""
    p, r = cfg[phase], cfg["rope"]
    b, s = p["batch"], p["seq"]
    q = rng.standard_normal((b, r["heads"], s, r["head_dim"]), dtype=np.float32).astype(NP_DTYPES[dtype])
    k = rng.standard_normal((b, r["kv_heads"], s, r["head_dim"]), dtype=np.float32).astype(NP_DTYPES[dtype])
    if phase == "prefill":
        pos = np.broadcast_to(np.arange(s, dtype=np.int64), (b, s))
    else:
        pos = (p["first"] + np.arange(b, dtype=np.int64))[:, None] + np.arange(s, dtype=np.int64)
    return {"query": q, "key": k, "position_ids": np.array(pos)}  # a writable copy: torch refuses read-only


def rope_scenario(ctx: Context, phase: str, dtype: str) -> dict[str, Any]:
    """Roofline, ORT floor, fused, decomposed, peer, eager, torch.compile on one RoPE shape."""
    args, cfg = ctx.args, ctx.cfg
    feeds = rope_feeds(cfg, phase, dtype, np.random.default_rng(0))
    outputs = same_shapes(feeds, {"query_out": "query", "key_out": "key"})
    entries = roofline_entries(feeds, outputs, args) + [floor_entry(feeds, outputs, args)]
    models: dict[str, onnx.ModelProto | bytes] = {}
    for graph in ("fused", "decomposed"):
        spec = rope_spec(cfg, dtype, graph)
        model = models[graph] = recipe_for(spec).export(spec)
        what = {"fused": "opset-23 RotaryEmbedding + range guard", "decomposed": "opset-17 primitives"}[graph]
        info = {"initializer_bytes": initializer_bytes(model), "nodes": len(model.graph.node)}
        entries.append(ort_entry(graph, f"ropeexport {what} (ORT, IO binding)", model, feeds, args, info=info))
    peer_what = "torch.onnx.export(HFRotary) in ORT (IO binding)"
    try:
        models["peer"] = ctx.peer_model(dtype, feeds)
        entries.append(ort_entry("peer", peer_what, models["peer"], feeds, args))
    except Exception as exc:
        entries.append(failed("peer", peer_what, exc))
    module = HFRotary(cfg["rope"]["head_dim"], cfg["max_positions"], cfg["theta"]).eval()
    entries += torch_entries(args, module, feeds, compile_too=True)
    result = run_scenario(entries, "fused", args)
    result["_profile"] = profiles(models, feeds, args)
    result["_meta"] = {
        "shapes": {k: list(v.shape) for k, v in feeds.items()},
        "positions": [int(feeds["position_ids"].min()), int(feeds["position_ids"].max())],
        "dtype": dtype,
    }
    return result


def rope_experiments(ctx: Context, phase: str, dtype: str) -> dict[str, Any]:
    """Variants of the fused artifact that isolate one cost each, timed against the roofline; ORT profiles."""
    args, cfg = ctx.args, ctx.cfg
    feeds = rope_feeds(cfg, phase, dtype, np.random.default_rng(0))
    outputs = same_shapes(feeds, {"query_out": "query", "key_out": "key"})
    spec = rope_spec(cfg, dtype, "fused")
    model = recipe_for(spec).export(spec)
    bare = without_guards(model)
    entries = roofline_entries(feeds, outputs, args) + [floor_entry(feeds, outputs, args)]
    entries.append(ort_entry("fused", "shipped fused artifact (IO binding)", model, feeds, args))
    entries.append(ort_entry("fused_no_guard", "the same without the range-guard nodes", bare, feeds, args))
    what = "shipped artifact via session.run (ORT allocates outputs)"
    entries.append(ort_entry("fused_run", what, model, feeds, args, binding=False))
    if args.threads > 1:
        what = "shipped artifact, intra_op_num_threads=1"
        entries.append(ort_entry("fused_1_thread", what, model, feeds, args, threads=1))
        what = "no guard and one thread: the least ORT work per call"
        entries.append(ort_entry("fused_no_guard_1_thread", what, bare, feeds, args, threads=1))
    entries.append(
        ort_entry(
            "fused_no_opt",
            "shipped artifact, ORT_DISABLE_ALL",
            model,
            feeds,
            args,
            opt_level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        )
    )
    if dtype == "fp16":
        model32 = recipe_for(rope_spec(cfg, "fp32", "fused")).export(rope_spec(cfg, "fp32", "fused"))
        what = "fp16 in/out, Cast -> fp32 RotaryEmbedding (fp32 tables) -> Cast (not the shipped numerics)"
        entries.append(ort_entry("fp32_compute", what, fp16_via_fp32(model32), feeds, args))
        bare32 = fp16_via_fp32(without_guards(model32))
        entries.append(ort_entry("fp32_compute_no_guard", what + ", no guard", bare32, feeds, args))
    result = run_scenario(entries, "fused", args)
    floor = floor_model(feeds, outputs)
    result["_profile"] = {
        "fused": profile(model, feeds, args),
        "fused_no_guard": profile(bare, feeds, args),
        "ort_floor": profile(floor, floor_feeds(floor, feeds), args),
    }
    result["_meta"] = {"shapes": {k: list(v.shape) for k, v in feeds.items()}, "guard_nodes": guard_nodes(model)}
    return result
