"""A built decoder's float64 truth in one process against the same truth fanned out over local Ray workers.

    python tools/bench_ray_truth.py DECODER --out tools/figures --name ray-8b-truth

DECODER: a decoder folder ``ropeexport build --artifact decoder`` wrote (issue 44's: Llama-3.1-8B int4 gqa, built
from ``tools/write_checkpoint.py llama-3.1-8b``'s random bf16 checkpoint as ``tools/bench_sizes.py``'s 8B int4 gqa
row was). Each run is a fresh process, one after the other, as users run them:

- ``serial``: ``ropeexport verify DECODER`` (every scenario on ONNX Runtime, then the float64 passes in this
  process);
- ``ray``: ``ropeexport verify DECODER --ray local`` (a Ray instance started for the run, with as many worker
  slots as Ray sees CPUs: the float64 passes split by scenario, one task each; ``decoder.truth_tasks``).

Each run's wall, exit code, and peak RSS of its whole process tree (Ray's raylet, GCS and workers included:
``bench_sizes.measure`` samples the tree every 0.1 s), ``uptime`` before and after and MemAvailable before. After each
run its report.json is kept (``reports/RUN-report.json`` under ``--work``); the figure says whether the two are the
same bytes, and the same JSON once every ``seconds`` field (the wall the runtime took: never the same twice) is
dropped, naming the paths that differ otherwise. Writes ``NAME.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from bench_sizes import PYTHON, _free, measure  # noqa: E402

RUNS = {"serial": [], "ray": ["--ray", "local"]}


def load() -> str:
    """``uptime``'s line (the load averages)."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def without_seconds(value: Any) -> Any:
    """``value`` with every ``seconds`` key dropped, at any depth."""
    if isinstance(value, dict):
        return {k: without_seconds(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [without_seconds(v) for v in value]
    return value


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """The JSON paths where ``a`` and ``b`` differ (a missing key, another value), in order."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in
                (differences(a[k], b[k], f"{path}.{k}") if k in a and k in b else [f"{path}.{k}"])]  # fmt: skip
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [path or "."]


def main(argv: list[str] | None = None) -> int:
    """Command line (module doc)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("decoder", type=Path, help="a decoder folder ropeexport build wrote")
    p.add_argument("--work", type=Path, required=True, help="logs and the reports kept")
    p.add_argument("--out", type=Path, required=True, help="folder for NAME.json")
    p.add_argument("--name", default="ray-8b-truth")
    p.add_argument("--runs", nargs="+", default=list(RUNS), choices=RUNS)
    args = p.parse_args(argv)
    if not (args.decoder / "report.json").is_file():
        print(f"decoder: {args.decoder} holds no report.json; allowed: a decoder folder ropeexport build wrote",
              file=sys.stderr)  # fmt: skip
        return 2
    kept = args.work / "reports"
    kept.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(args.decoder / "report.json", kept / "build-report.json")
    runs: dict[str, Any] = {}
    for run in args.runs:
        command = [PYTHON, "-m", "ropeexport", "verify", str(args.decoder), *RUNS[run]]
        before, available = load(), _free()["MemAvailable"]
        written = (args.decoder / "report.json").stat().st_mtime_ns
        result = measure(command, args.work / f"verify-{run}.log")
        result.update(load_before=before, load_after=load(), mem_available_before_gib=round(available / 2**30, 1),
                      log_tail=(args.work / f"verify-{run}.log").read_text()[-1500:])  # fmt: skip
        # a run that stopped before writing leaves the last run's report: never compared as its own
        result["report_written"] = (args.decoder / "report.json").stat().st_mtime_ns != written
        if result["report_written"]:
            shutil.copyfile(args.decoder / "report.json", kept / f"{run}-report.json")
        runs[run] = result
        print(f"{run}: {result['wall_s']} s, peak {result['peak_rss_gib']} GiB, exit {result['exit']}", flush=True)
    same: dict[str, Any] = {}
    texts = {run: (kept / f"{run}-report.json").read_bytes() for run, r in runs.items() if r["report_written"]}
    if len(texts) == 2:
        a, b = (json.loads(t) for t in texts.values())
        found = differences(without_seconds(a), without_seconds(b))
        same = {"bytes": len(set(texts.values())) == 1, "json_but_seconds": not found, "differences": found[:20],
                "seconds_paths": [d for d in differences(a, b) if d.endswith(".seconds")]}  # fmt: skip
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(),
               "mem_total_gib": round(_free()["MemTotal"] / 2**30, 1)}  # fmt: skip
    document = {"decoder": str(args.decoder), "machine": machine, "runs": runs, "same_report": same,
                "reproduce": f"python tools/bench_ray_truth.py {args.decoder} --work {args.work} --out {args.out} "
                             f"--name {args.name} --runs {' '.join(args.runs)}"}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(document, indent=1) + "\n")
    print(json.dumps(same))
    return 0


if __name__ == "__main__":
    sys.exit(main())
