"""Writing the report: the Markdown tables printed at the end, the ``config`` block, and JSON-ready values."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch

from .context import FULL, TINY
from .timing import MIN_QUIET, QUIET


def table(scenarios: dict, meta: dict) -> str:
    """Markdown: one row per scenario entry; the scenario cell says which rounds the figures use."""
    lines = [
        "| scenario (rounds used) | entry | median us | x roofline (median of rounds) | IQR over rounds | note |",
        "|---|---|---:|---:|---|---|",
    ]
    for name, entries in scenarios.items():
        basis = meta.get(name, {}).get("basis") or {}
        label = f"{name} ({basis.get('used')}/{basis.get('of')} {basis.get('rounds')})" if basis else name
        for entry, item in entries.items():
            if entry.startswith("_"):
                continue
            if "error" in item:
                lines.append(f"| {label} | {entry} | - | - | - | {item['error']} |")
                continue
            lo, hi = item.get("ratio_iqr", [float("nan"), float("nan")])
            note = ""
            for key in ("max_abs_vs_fused", "compile_s", "initializer_bytes"):
                if key in item:
                    note += f"{key} {item[key]}; "
            lines.append(
                f"| {label} | {entry} | {item['median_us']:.1f} | {item.get('ratio', float('nan')):.3f} | "
                f"{lo:.3f}-{hi:.3f} | {note.rstrip('; ')} |"
            )
    return "\n".join(lines)


def targets_table(rows: list[dict]) -> str:
    """Markdown: target, value, met."""
    lines = ["| target | value | met | rounds | detail |", "|---|---:|---|---|---|"]
    for r in rows:
        met = {True: "met", False: "NOT met", None: "not measured"}[r["met"]]
        b = r.get("basis") or {}
        rounds = f"{b['used']}/{b['of']} {b['rounds']}" if b else "-"
        lines.append(f"| {r['target']} | {r['value']} | {met} | {rounds} | {r['detail']} |")
    return "\n".join(lines)


def config(args: argparse.Namespace) -> dict[str, Any]:
    """Everything a reader needs to reproduce or discount the figures."""
    cpu = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "onnxruntime": ort.__version__,
        "providers": ["CPUExecutionProvider"],
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu": cpu,
        "threads": {
            "ort_intra_op_num_threads": args.threads,
            "ort_inter_op_num_threads": 1,
            "ort_execution_mode": "ORT_SEQUENTIAL",
            "torch_num_threads": torch.get_num_threads(),
            "roofline_copy_mt_threads": args.threads,
        },
        "allow_spinning": {"session.intra_op.allow_spinning": "0", "session.inter_op.allow_spinning": "0"},
        "graph_optimization_level": "ORT_ENABLE_ALL (experiments: ORT_DISABLE_ALL)",
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
        "wait_quiet_s": args.wait_quiet,
        "repeats": args.repeats,
        "min_block_ms": args.min_block_s * 1e3,
        "rounds": args.rounds,
        "quiet_round": f"other processes under {QUIET:.0%} of all CPU time; figures use quiet rounds when >= "
        f"{MIN_QUIET}, else every round (per scenario: scenario_meta[...].basis)",
        "warmup": args.warmup,
        "tiny": args.tiny,
        "shapes": TINY if args.tiny else FULL,
    }


def clean(value: Any) -> Any:
    """JSON-ready: numpy scalars as Python numbers, a non-finite float as null, tuples as lists, keys as strings."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
