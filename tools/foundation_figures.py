"""Reproduce the foundation figures: table error against float64, and ORT fp32 output error at 131072 positions.

    python tools/foundation_figures.py --out figures.json         # every layout x schedule x graph (a few minutes)
    python tools/foundation_figures.py --max-positions 4096       # quicker

Geometry is Llama's (head_dim 128, 32 query heads, 8 key heads); length-dependent schedules switch at 8192.
Figures: ``table_max_ulp`` is the largest error of any stored cos/sin entry in ulps of the table dtype (float64
reference); ``max_abs_vs_float64`` is the largest |ORT output - float64 oracle| over the verification probes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ropeexport import build  # noqa: E402
from ropeexport.families.rope.spec import RopeSpec  # noqa: E402

ORIGINAL = 8192
PARAMS = {
    "default": {},
    "linear": {"factor": 4.0},
    "ntk": {"factor": 4.0},
    "dynamic": {"factor": 4.0, "original_max_position_embeddings": ORIGINAL},
    "yarn": {"factor": 16.0, "original_max_position_embeddings": ORIGINAL, "mscale": 0.707, "mscale_all_dim": 0.707},
    "llama3": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": ORIGINAL,
    },
    "longrope": {
        "original_max_position_embeddings": ORIGINAL,
        "short_factor": [1.0 + 0.02 * i for i in range(64)],
        "long_factor": [1.0 + 0.5 * i for i in range(64)],
    },
}


def main() -> None:
    """Build every case, print a Markdown table, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-positions", type=int, default=131072)
    parser.add_argument("--out", default="foundation-figures.json")
    parser.add_argument("--dtypes", default="fp32,fp16,bf16")
    args = parser.parse_args()
    rows = []
    work = Path(tempfile.mkdtemp(prefix="ropeexport-figures-"))
    print("| layout | scaling | graph | dtype | table max ulp | max abs vs float64 | max abs vs eager | runtime | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for layout, scaling, graph, dtype in itertools.product(
        ("half", "interleaved", "complex"), PARAMS, ("fused", "decomposed"), args.dtypes.split(",")
    ):
        if dtype != "fp32" and graph == "decomposed":
            continue  # the table error does not depend on the graph style; ORT output error is asked for fp32
        spec = RopeSpec(
            layout=layout,
            head_dim=128,
            num_heads=32,
            num_kv_heads=8,
            theta=500000.0,
            max_positions=args.max_positions,
            scaling=scaling,
            scaling_params=PARAMS[scaling],
            dtype=dtype,
            graph=graph,
        )
        start = time.perf_counter()
        result = build(spec, work)
        report = result.report
        worst = {
            ref: max(
                float("inf") if c["max_abs"] is None else c["max_abs"]
                for c in report["comparisons"]
                if c["reference"] == ref
            )
            for ref in ("eager", "float64")
        }
        row = {
            "layout": layout,
            "scaling": scaling,
            "graph": graph,
            "dtype": dtype,
            "passed": result.passed,
            "table_max_ulp": max(t["max_ulp"] for t in report["tables"]),
            "max_abs_vs_float64": worst["float64"],
            "max_abs_vs_eager": worst["eager"],
            "runtime": ",".join(r["name"] for r in report["runtimes"] if r["status"] == "verified"),
            "sweep": report["coverage"]["sweep"],
            "seconds": round(time.perf_counter() - start, 1),
        }
        rows.append(row)
        print(
            f"| {layout} | {scaling} | {graph} | {dtype} | {row['table_max_ulp']:.4f} "
            f"| {row['max_abs_vs_float64']:.2e} | {row['max_abs_vs_eager']:.2e} "
            f"| {row['runtime']} | {row['seconds']} |",
            flush=True,
        )
        shutil.rmtree(result.path)
    summary = {
        "max_positions": args.max_positions,
        "cases": len(rows),
        "all_passed": all(r["passed"] for r in rows),
        "table_max_ulp": max(r["table_max_ulp"] for r in rows),
        "fp32_max_abs_vs_float64": max(r["max_abs_vs_float64"] for r in rows if r["dtype"] == "fp32"),
    }
    Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=2) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
