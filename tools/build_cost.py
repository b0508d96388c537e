"""What building an artifact costs: RoPE table time, and build time and size as max_positions grows.

    python tools/build_cost.py --out tools/figures/build-cost.json
    python tools/build_cost.py --sizes 64 128 --table-positions 1024 --out /tmp/build-cost.json   # tiny (the test)

Two measurements, each the median of ``--repeats`` runs:
- ``tables``: the RoPE cos/sin tables for ``--table-positions`` positions x 64 frequencies (head_dim 128), computed
  in float64 by ``table_regimes`` and rounded once to the dtype (``round_once``), as ``rope_tables`` stores them;
  ``initializers_s`` adds turning them into ONNX initializers (``rope_tables`` itself). Target: < 0.5 s at 131072.
- ``builds``: ``kind.export(spec)`` and ``save_model`` (which writes the tables to external data past 64 MiB and
  runs ``onnx.checker`` with ``full_check``) for a Llama-style fused RoPE spec in fp16 and fp32 (32 heads, 8 key
  heads, head_dim 128, theta 500000) and for ALiBi's bias (32 heads, fp32 and fp16), at each of ``--sizes``
  max_positions; size is model.onnx plus model.onnx.data. RoPE grows as P x 64 x 2 tables x dtype bytes; ALiBi stores
  32 slopes whatever P.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import onnx  # noqa: E402

from ropeexport.catalog import (
    recipe_for,  # noqa: E402
    spec_from_dict,  # noqa: E402
)
from ropeexport.families.rope.export import rope_tables  # noqa: E402
from ropeexport.families.rope.reference import table_regimes  # noqa: E402
from ropeexport.graph.onnx_io import GraphBuilder, save_model  # noqa: E402
from ropeexport.numerics import round_once  # noqa: E402

SIZES = (4096, 32768, 131072, 1048576)
TABLE_TARGET_S = 0.5


def llama_rope(max_positions: int, dtype: str) -> Any:
    """Llama-style fused RoPE: 32 query heads, 8 key heads, head_dim 128 (64 frequencies), theta 500000."""
    return spec_from_dict(
        {
            "num_heads": 32,
            "num_kv_heads": 8,
            "head_dim": 128,
            "theta": 500000.0,
            "max_positions": max_positions,
            "dtype": dtype,
            "graph": "fused",
        }
    )


def alibi_bias(max_positions: int, dtype: str) -> Any:
    """ALiBi's bias artifact, 32 heads, causal."""
    return spec_from_dict(
        {"encoding": "alibi", "artifact": "bias", "num_heads": 32, "max_positions": max_positions, "dtype": dtype}
    )


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float]]:
    """Median seconds of ``repeats`` calls, and every call's seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def table_cost(positions: int, repeats: int) -> list[dict[str, Any]]:
    """Seconds to compute the float64 tables and round them once, per dtype; and with initializers (rope_tables)."""
    rows = []
    for dtype in ("fp32", "fp16", "bf16"):
        spec = llama_rope(positions, dtype)

        def tables(spec: Any = spec) -> None:
            for cos, sin in table_regimes(spec):  # [P, 64] float64 each
                round_once(cos, spec.dtype), round_once(sin, spec.dtype)

        median, times = timed(tables, repeats)
        with_init, _ = timed(lambda spec=spec: rope_tables(GraphBuilder(), spec), repeats)
        rows.append(
            {
                "dtype": dtype,
                "positions": positions,
                "frequencies": spec.rotary_dim // 2,
                "tables_s": round(median, 4),
                "tables_s_each": [round(t, 4) for t in times],
                "initializers_s": round(with_init, 4),
                "target_s": TABLE_TARGET_S,
                # Judged on rope_tables as a whole (float64, rounding and the initializers), the stricter reading.
                "met": with_init < TABLE_TARGET_S,
                "tables_met": median < TABLE_TARGET_S,
            }
        )
    return rows


def build_cost(make: Callable[[int, str], Any], label: str, dtype: str, positions: int, repeats: int) -> dict:
    """Median export and save seconds, and the files' total bytes, for one spec."""
    spec = make(positions, dtype)
    kind = recipe_for(spec)
    exports, saves, totals = [], [], []
    size = files = None
    for _ in range(repeats):
        work = Path(tempfile.mkdtemp(prefix="ropeexport-build-cost-"))
        try:
            start = time.perf_counter()
            model = kind.export(spec)
            exported = time.perf_counter()
            names = save_model(model, work)
            saved = time.perf_counter()
            del model
            exports.append(exported - start)
            saves.append(saved - exported)
            totals.append(saved - start)
            files = {n: (work / n).stat().st_size for n in names}
            size = sum(files.values())
            stored = onnx.load(str(work / names[0]), load_external_data=False)
            initializers = len(stored.graph.initializer)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    tables = None
    if label.startswith("rope"):  # how much of the export is the float64 table work
        start = time.perf_counter()
        table_regimes(spec)
        tables = round(time.perf_counter() - start, 4)
    return {
        "artifact": label,
        "dtype": dtype,
        "max_positions": positions,
        "table_regimes_s": tables,
        "export_s": round(statistics.median(exports), 4),
        "save_s": round(statistics.median(saves), 4),
        "total_s": round(statistics.median(totals), 4),
        "bytes": size,
        "files": files,
        "initializers": initializers,
    }


def markdown(tables: list[dict], builds: list[dict]) -> str:
    """The two tables as Markdown."""
    lines = [
        "| tables | positions x frequencies | float64 + round once (s) | rope_tables (s) | < 0.5 s |",
        "|---|---|---:|---:|---|",
    ]
    for r in tables:
        lines.append(
            f"| {r['dtype']} | {r['positions']} x {r['frequencies']} | {r['tables_s']:.3f} | "
            f"{r['initializers_s']:.3f} | {'met' if r['met'] else 'NOT met'} |"
        )
    lines += [
        "",
        "| artifact | dtype | max_positions | export (s) | of which table_regimes (s) | save + check (s) | total (s) "
        "| size (MiB) | files |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in builds:
        regimes = "-" if r["table_regimes_s"] is None else f"{r['table_regimes_s']:.3f}"
        lines.append(
            f"| {r['artifact']} | {r['dtype']} | {r['max_positions']} | {r['export_s']:.3f} | {regimes} | "
            f"{r['save_s']:.3f} | {r['total_s']:.3f} | {r['bytes'] / 2**20:.3f} | {', '.join(r['files'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure, print Markdown, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="build-cost.json", help="JSON file to write (default build-cost.json)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="max_positions to build at")
    parser.add_argument("--table-positions", type=int, default=131072, help="positions of the table timing")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (median)")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    started = time.perf_counter()
    tables = table_cost(args.table_positions, args.repeats)
    builds = []
    for make, label in ((llama_rope, "rope fused"), (alibi_bias, "alibi bias")):
        for dtype in ("fp16", "fp32"):
            for positions in args.sizes:
                # The largest RoPE build takes seconds and GiB: once is enough to see the trend.
                repeats = 1 if positions >= 2**20 and label.startswith("rope") else args.repeats
                builds.append(build_cost(make, label, dtype, positions, repeats))
                print(f"{label} {dtype} {positions}: {builds[-1]['total_s']} s", file=sys.stderr, flush=True)
    report = {
        "tool": "tools/build_cost.py",
        "command": "python tools/build_cost.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "config": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "onnx": onnx.__version__,
            "cpu_count": os.cpu_count(),
            "repeats": args.repeats,
            "note": "export = kind.export(spec); save = save_model (writes, external data past 64 MiB, "
            "onnx.checker full_check)",
        },
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
        "elapsed_s": round(time.perf_counter() - started, 1),
        "tables": tables,
        "builds": builds,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(tables, builds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
