"""The command line: flags, the scenario loop, the printed tables and the JSON report (``tools/bench.py`` runs it)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from .alibi import alibi_experiments, alibi_scenario, alibi_storage
from .context import SCENARIOS, Context
from .report import clean, config, table, targets_table
from .roofline import ROOFLINE_DOC
from .rope import rope_experiments, rope_scenario
from .sinusoidal import sinusoidal_scenario
from .targets import findings, targets
from .timing import wait_quiet


def run(ctx: Context, name: str) -> dict[str, Any]:
    """One scenario by name."""
    parts = name.split("-")
    if parts[0] == "rope":
        phase, dtype = parts[1], parts[2]
        return rope_experiments(ctx, phase, dtype) if parts[-1] == "experiments" else rope_scenario(ctx, phase, dtype)
    if parts[0] == "alibi":
        if parts[-1] == "experiments":
            return alibi_experiments(ctx, parts[2])
        return alibi_scenario(ctx, parts[1], parts[2])
    return sinusoidal_scenario(ctx, parts[2])


def main(argv: list[str] | None = None, description: str | None = None) -> int:
    """Run the selected scenarios, print the tables, write the JSON (``description``: the ``--help`` text)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench.json", help="JSON file to write (default bench.json)")
    parser.add_argument("--repeats", type=int, default=None, help="calls per timed block (default 5; tiny 2)")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 21; tiny 3)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls per entry (default 3; tiny 1)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="ORT and torch threads")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes: every code path in seconds")
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=SCENARIOS, help="scenarios to run")
    parser.add_argument("--min-block-ms", type=float, default=None, help="least time per block (default 20; tiny 0)")
    parser.add_argument("--no-compile", action="store_true", help="record torch.compile as skipped (it takes ~20 s)")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="S",
        help="before each scenario, wait up to S seconds until other jobs use under 25%% of the CPUs",
    )
    args = parser.parse_args(argv)
    # Short blocks, many rounds: an entry and the roofline it is divided by run close together in time.
    args.repeats = args.repeats or (2 if args.tiny else 5)
    args.rounds = args.rounds or (3 if args.tiny else 21)
    args.warmup = args.warmup or (1 if args.tiny else 3)
    args.min_block_s = (args.min_block_ms if args.min_block_ms is not None else (0 if args.tiny else 20)) / 1e3
    torch.set_num_threads(args.threads)
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # "torchvision is not installed" on every export
    args.pool = ThreadPoolExecutor(args.threads) if args.threads > 1 else None
    ctx = Context(args)
    load_before = os.getloadavg()
    started = time.perf_counter()
    scenarios: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    prof: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    for name in args.only or SCENARIOS:
        waited = wait_quiet(args.wait_quiet)
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        result = run(ctx, name)
        raw[name] = result
        prof[name] = result.pop("_profile", {})
        meta[name] = result.pop("_meta", {}) | {
            "basis": result.pop("_basis", None),
            "others_cpu_by_round": result.pop("_others_cpu_by_round", None),
            "seconds": round(time.perf_counter() - t0, 1),
            "load_1min": {"before": round(load, 2), "after": round(os.getloadavg()[0], 2)},
            "quiet_wait": waited,
        }
        scenarios[name] = {k: v for k, v in result.items() if k != "_rounds"}
        print(f"{name}: done in {meta[name]['seconds']} s", file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    sizes = alibi_storage(ctx.cfg)
    rows = targets(scenarios, raw, sizes)
    for row in rows:  # which rounds each figure rests on: quiet ones, or all when too few were quiet
        row["basis"] = meta.get(row["scenario"], {}).get("basis")
    report = {
        "tool": "tools/bench.py",
        "command": "python tools/bench.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "config": config(args),
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in load_after]},
        "elapsed_s": round(time.perf_counter() - started, 1),
        "roofline": ROOFLINE_DOC,
        "scenarios": scenarios,
        "scenario_meta": meta,
        "profiles": {k: v for k, v in prof.items() if v},
        "peer": ctx.notes,
        "alibi_storage": sizes,
        "targets": rows,
        "findings": findings(scenarios, raw, prof),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(clean(report), indent=2, allow_nan=False) + "\n")
    print(table(scenarios, meta))
    print()
    print(targets_table(rows))
    print()
    for line in report["findings"]:
        print(f"- {line}")
    if args.pool:
        args.pool.shutdown()
    return 0
