"""ORT's profiler on an artifact: per-call microseconds by operator type, the run, and the nodes executed.

The ``*-experiments`` scenarios profile every variant they time, the others their fused artifact; ``findings``
quotes these figures to say what limits each one.
"""

from __future__ import annotations

import argparse
import bisect
import json
import shutil
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from .sessions import bound_runner, session_options
from .timing import failed


def profile(model: onnx.ModelProto | bytes, feeds: dict[str, np.ndarray], args: argparse.Namespace) -> dict:
    """ORT profiler: per-call microseconds by operator type (median over calls after warm-up) and of the run.

    ``model_run_us`` is the whole ``run_with_iobinding``; ``kernels_us`` the sum of kernel times; the difference is
    ORT's own per-call work (binding, allocation, scheduling).
    """
    work = Path(tempfile.mkdtemp(prefix="ropeexport-profile-"))
    try:
        data = model if isinstance(model, bytes) else model.SerializeToString()
        runner = bound_runner(data, feeds, session_options(args, profile_prefix=str(work / "ort")))
        calls = max(5, args.repeats)
        for _ in range(args.warmup + calls):
            runner.run()
        events = json.loads(Path(runner.session.end_profiling()).read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    runs = sorted((e["ts"], e["dur"]) for e in events if e.get("name") == "model_run")[-calls:]
    starts = [ts for ts, _ in runs]
    per_run: list[dict[str, float]] = [defaultdict(float) for _ in runs]
    nodes_per_run = defaultdict(set)
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        i = bisect.bisect_right(starts, e["ts"]) - 1
        if 0 <= i < len(runs) and e["ts"] <= runs[i][0] + runs[i][1]:
            per_run[i][e["args"]["op_name"]] += e["dur"]
            nodes_per_run[i].add(e["name"])
    ops = sorted({op for r in per_run for op in r})
    by_op = {op: round(statistics.median(r.get(op, 0.0) for r in per_run), 2) for op in ops}
    kernels = statistics.median(sum(r.values()) for r in per_run)
    return {
        "calls": len(runs),
        "model_run_us": round(statistics.median(d for _, d in runs), 2),
        "kernels_us": round(kernels, 2),
        "nodes_executed": max((len(n) for n in nodes_per_run.values()), default=0),
        "by_op_us": dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
    }


def profiles(models: dict[str, Any], feeds: dict[str, np.ndarray], args: argparse.Namespace) -> dict[str, Any]:
    """``profile`` of each model; a model the profiler cannot run records its error instead."""
    out = {}
    for name, model in models.items():
        try:
            out[name] = profile(model, feeds, args)
        except Exception as exc:
            out[name] = {"error": failed(name, "", exc).error}
    return out
