"""What runs in its own process, one job a process (``tools/bench_serving.py --worker KIND --job JOB.json``).

- ``export``: the transformers model through ``torch.onnx.export(dynamo=True)`` with its cache flattened (a
  dynamo export leaves fake tensors inside transformers' modules: nothing else ever runs in that process);
- ``truth``: the float64 recompute (``ropeexport.decoder.oracle``) of the accuracy prompts, and onnxruntime-genai's
  stored cos/sin rows against float64 cos/sin;
- ``time``: every entry loaded in one process, timed in alternating rounds beside the bytes limit, then each
  entry's logits of the accuracy prompts (after the timing: the accuracy prompts are longer than any timed one);
- ``memory``: one entry alone, prefill of the largest prompt plus decode steps: the process's peak RSS;
- ``profile``: ORT's profiler on ropeexport's sessions and the builder's, per operator type, prefill and decode.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import statistics
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from .engines import open_engine
from .limits import Limit, decode_bytes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.timing import cpu_others, cpu_snapshot  # noqa: E402


def first_line(exc: BaseException) -> str:
    """The error's type and first non-empty line (what a table cell can hold)."""
    lines = [s for s in str(exc).splitlines() if s.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def prompt(job: dict[str, Any], n: int) -> np.ndarray:
    """The first n of one seeded sequence of token ids in [3, vocab) (specials 0..2 left out): every entry's prompt."""
    rng = np.random.default_rng(job["seed"])
    return rng.integers(3, job["vocab"], job["longest"], dtype=np.int64)[:n]


def export(job: dict[str, Any]) -> dict[str, Any]:
    """The dynamo export with past/present (module doc): the ONNX path, or the one-line reason it failed."""
    import torch
    import transformers
    from transformers import DynamicCache

    torch.set_num_threads(job["threads"])
    model = transformers.AutoModelForCausalLM.from_pretrained(job["checkpoint"], dtype=torch.float32).eval()
    cfg = model.config
    layers, kv = cfg.num_hidden_layers, cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads

    class Flat(torch.nn.Module):
        """The model with its DynamicCache flattened into 2 x layers past inputs and present outputs."""

        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any, *past: Any) -> Any:
            cache = DynamicCache(config=cfg)
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=cache, use_cache=True)  # fmt: skip
            present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
            return (out.logits, *present)

    s, p = 3, 5  # example sizes only: every axis is exported dynamic
    past = [torch.zeros(1, kv, p, d) for _ in range(2 * layers)]
    example = (torch.zeros(1, s, dtype=torch.int64), torch.ones(1, p + s, dtype=torch.int64),
               torch.arange(p, p + s).reshape(1, s), *past)  # fmt: skip
    dyn = torch.export.Dim.DYNAMIC
    shapes = ({1: dyn}, {1: dyn}, {1: dyn}, tuple({2: dyn} for _ in range(2 * layers)))
    names = [f"past_key_values.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    outputs = ["logits"] + [n.replace("past_key_values", "present") for n in names]
    path = Path(job["out"]) / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        with torch.no_grad():
            torch.onnx.export(Flat(), example, str(path), dynamo=True, dynamic_shapes=shapes, external_data=True,
                              input_names=["input_ids", "attention_mask", "position_ids", *names],
                              output_names=outputs)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the table records any failure
        return {"error": f"fails to export: {first_line(exc)}", "traceback": traceback.format_exc()[-3000:]}
    return {"path": str(path), "export_s": round(time.perf_counter() - start, 1), "layers": layers,
            "how": "torch.onnx.export(dynamo=True), DynamicCache flattened to past_key_values.i.key/value inputs, "
                   "every axis Dim.DYNAMIC"}  # fmt: skip


def truth(job: dict[str, Any]) -> dict[str, Any]:
    """float64 logits [tail, vocab] of the near and far prompts (npz), and genai's cos/sin table rows' errors."""
    from ropeexport.catalog import recipe_for
    from ropeexport.decoder.checkpoint import load_checkpoint
    from ropeexport.decoder.kind import check_folder
    from ropeexport.decoder.oracle import decoder_float64, stored_float64

    _, spec = check_folder(Path(job["ours"]))
    position = spec.position_spec()
    piece = recipe_for(position).piece(position)
    weights64 = stored_float64(spec, load_checkpoint(spec, job["checkpoint"]))
    out: dict[str, Any] = {}
    arrays = {}
    for name, first, n in (("near", 0, job["near"]), ("far", job["far"] - job["tail"] + 1, job["tail"])):
        ids = prompt(job, n)[None]
        pos = np.arange(first, first + n, dtype=np.int64)[None]
        start = time.perf_counter()
        logits = decoder_float64(spec, weights64, ids, pos, np.ones_like(ids), piece.rotate64, piece.bias64)
        arrays[name] = logits[0, -job["tail"] :]
        out[f"{name}_s"] = round(time.perf_counter() - start, 1)
    np.savez(Path(job["result"]).with_suffix(".npz"), **arrays)
    out["tables"] = genai_tables(job, position)
    return out


def genai_tables(job: dict[str, Any], position: Any) -> dict[str, Any]:
    """The builder model's cos_cache / sin_cache rows at the near and far positions against float64 cos and sin.

    The builder's model takes no position_ids (GroupQueryAttention rotates at the cache length), so its logits at
    100k need 100k real tokens; its stored rows are what can be checked there.
    """
    import onnx
    from onnx import numpy_helper
    from onnx.external_data_helper import load_external_data_for_tensor

    from ropeexport.families.rope.reference import RotaryEmbedding

    model = onnx.load(Path(job["og"]) / "model.onnx", load_external_data=False)
    found = {t.name: t for t in model.graph.initializer if t.name in ("cos_cache", "sin_cache")}
    if len(found) < 2:
        return {"error": "no cos_cache / sin_cache initializers in the builder's model"}
    tables = {}
    for name, tensor in found.items():
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            load_external_data_for_tensor(tensor, job["og"])
        tables[name] = numpy_helper.to_array(tensor).astype(np.float64)
    out: dict[str, Any] = {"rows": int(tables["cos_cache"].shape[0])}
    rope = RotaryEmbedding(position)
    for label, p in (("near", job["near"] - 1), ("far", job["far"])):
        freqs = rope.frequencies(p + 1)
        angles = p * freqs.inv_freq
        exact = {"cos_cache": np.cos(angles) * freqs.attention_factor,
                 "sin_cache": np.sin(angles) * freqs.attention_factor}  # fmt: skip
        if p >= out["rows"]:
            out[label] = {"position": p, "error": f"position {p} is past the table's {out['rows']} rows"}
            continue
        err = max(float(np.abs(tables[k][p] - exact[k]).max()) for k in exact)
        out[label] = {"position": p, "max_abs": err}
    return out


def time_entries(job: dict[str, Any]) -> dict[str, Any]:
    """Alternating rounds of every entry and the limits, then each entry's accuracy logits (module doc)."""
    threads, sizes = job["threads"], job["sizes"]
    engines: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for entry in job["entries"]:
        try:
            engines[entry["name"]] = open_engine(entry, threads)
        except Exception as exc:  # noqa: BLE001 - recorded, the others still run
            errors[entry["name"]] = f"fails to load: {first_line(exc)}"
    pool = ThreadPoolExecutor(threads) if threads > 1 else None
    limits = {p: Limit(decode_bytes(job["made"], p)["total"], threads, pool) for p in sizes["past"]}
    lengths = sorted(set(sizes["prefill"]) | set(sizes["past"]))

    def unit(name: str) -> dict[str, float]:
        figures = {}
        for n in lengths:
            steps = sizes["steps"] if n in sizes["past"] else 0
            pre, dec = engines[name].generate(prompt(job, n), steps)
            if n in sizes["prefill"]:
                figures[f"prefill@{n}"] = pre
            if n in sizes["past"]:
                figures[f"decode@{n}"] = statistics.median(dec)
        return figures

    def limit_unit() -> dict[str, float]:
        figures = {}
        for p, lim in limits.items():
            for what, fn in (("copy_1t", lim.copy_1t), ("copy_mt", lim.copy_mt), ("read", lim.read)):
                times = []
                for _ in range(3):
                    start = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - start)
                figures[f"{what}@{p}"] = statistics.median(times)
        return figures

    for name in list(engines):
        try:
            for _ in range(sizes["warmup"]):
                unit(name)
        except Exception as exc:  # noqa: BLE001
            errors[name] = f"fails to run: {first_line(exc)}"
            del engines[name]
    limit_unit()
    order = [*engines, "_limit"]
    rounds: list[dict[str, dict[str, float]]] = []
    others: list[float | None] = []
    for r in range(sizes["rounds"]):
        before = cpu_snapshot()
        got = {}
        for name in order if r % 2 == 0 else order[::-1]:  # A B C, then C B A: drift hits every entry alike
            got[name] = limit_unit() if name == "_limit" else unit(name)
        rounds.append(got)
        others.append(cpu_others(before, cpu_snapshot()))
        print(f"round {r + 1}/{sizes['rounds']} done", file=sys.stderr, flush=True)
    accuracy: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    for name, engine in engines.items():
        accuracy[name] = {}
        for label, first, n in (("near", 0, sizes["near"]), ("far", sizes["far"] - sizes["tail"] + 1, sizes["tail"])):
            try:
                arrays[f"{name}|{label}"] = engine.tail(prompt(job, n), first, sizes["tail"])
            except Exception as exc:  # noqa: BLE001
                accuracy[name][label] = first_line(exc)
    np.savez(Path(job["result"]).with_suffix(".npz"), **arrays)
    if pool:
        pool.shutdown()
    return {"rounds": rounds, "others_cpu": others, "errors": errors, "accuracy_errors": accuracy,
            "limit_bytes": {str(p): lim.nbytes for p, lim in limits.items()}}  # fmt: skip


def hwm_mib() -> float | None:
    """VmHWM (this address space's peak RSS) in MiB; None off Linux."""
    try:
        line = next(s for s in Path("/proc/self/status").read_text().splitlines() if s.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return None
    return round(int(line.split()[1]) / 1024, 1)


def memory(job: dict[str, Any]) -> dict[str, Any]:
    """One entry alone: peak RSS of the whole process after a prefill of the largest prompt and decode steps.

    The figure is VmHWM: ``ru_maxrss`` survives exec on Linux, so a worker started by a large parent reports the
    parent's size (kept beside it as ``ru_maxrss_mib``, with its value before anything loaded).
    """
    rss_start = hwm_mib()
    maxrss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    engine = open_engine(job["entry"], job["threads"])
    rss_loaded = hwm_mib()
    n = job["length"]
    # process_time: CPU time of every thread of this process at nanosecond resolution (os.times ticks every 10 ms,
    # which reads 0 for the quick run's millisecond generations)
    wall, cpu = time.perf_counter(), time.process_time()
    pre, dec = engine.generate(prompt(job, n), job["steps"])
    used = time.process_time() - cpu
    wall = time.perf_counter() - wall
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"peak_rss_mib": hwm_mib() or round(maxrss, 1), "rss_before_load_mib": rss_start or 0.0,
            "peak_after_load_mib": rss_loaded, "ru_maxrss_mib": round(maxrss, 1),
            "ru_maxrss_at_start_mib": round(maxrss_start, 1),
            "prompt": n, "steps": job["steps"], "cpu_per_wall": round(used / wall, 2),
            "prefill_s": round(pre, 4),
            "decode_ms": round(1000 * statistics.median(dec), 3) if dec else None}  # fmt: skip


def profile(job: dict[str, Any]) -> dict[str, Any]:
    """ORT's profiler on one session (ours or onnxruntime-genai's): median per-call microseconds by operator type,
    prefill and decode.
    """  # noqa: D205
    prefix = str(Path(job["result"]).with_suffix("")) + "-ort"
    engine = open_engine(job["entry"], job["threads"], profile_prefix=prefix)
    n, steps = job["length"], job["steps"]
    engine.generate(prompt(job, n), steps)  # warm-up
    engine.generate(prompt(job, n), steps)
    if hasattr(engine, "session"):
        events = json.loads(Path(engine.session.session.end_profiling()).read_text())
    else:  # onnxruntime-genai writes its session's profile when the model goes
        del engine.model
        gc.collect()
        events = json.loads(max(Path(prefix).parent.glob(Path(prefix).name + "*.json"), key=os.path.getmtime)
                            .read_text())  # fmt: skip
    runs = sorted((e["ts"], e["dur"]) for e in events if e.get("name") == "model_run")[-(steps + 1) :]
    per_run: list[dict[str, float]] = [{} for _ in runs]
    nodes = [0 for _ in runs]
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        for i, (ts, dur) in enumerate(runs):
            if ts <= e["ts"] <= ts + dur:
                op = e["args"]["op_name"]
                per_run[i][op] = per_run[i].get(op, 0.0) + e["dur"]
                nodes[i] += 1
    out: dict[str, Any] = {}
    for phase, chosen in (("prefill", [0]), ("decode", list(range(1, len(runs))))):
        ops = sorted({op for i in chosen for op in per_run[i]})
        by_op = {op: round(statistics.median(per_run[i].get(op, 0.0) for i in chosen), 1) for op in ops}
        out[phase] = {"model_run_us": round(statistics.median(runs[i][1] for i in chosen), 1),
                      "kernels_us": round(statistics.median(sum(per_run[i].values()) for i in chosen), 1),
                      "nodes_run": int(statistics.median(nodes[i] for i in chosen)),
                      "by_op_us": dict(sorted(by_op.items(), key=lambda kv: -kv[1])[:8])}  # fmt: skip
    out["prompt"], out["steps"] = n, steps
    return out


JOBS = {"export": export, "truth": truth, "time": time_entries, "memory": memory, "profile": profile}


def main(kind: str, job_path: str) -> int:
    """Run one job, write its JSON result (``job["result"]``)."""
    job = json.loads(Path(job_path).read_text())
    result = JOBS[kind](job)
    Path(job["result"]).write_text(json.dumps(result, indent=1))
    return 0
