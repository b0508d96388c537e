"""Reproduce the figures of the "every encoding" issue: each artifact's worst error, and ALiBi's size by length.

    python tools/encoding_figures.py --out tools/encoding-figures.json

Every registered encoding x artifact is built in fp32 and fp16 (fused graph) at ``--max-positions`` with 8 heads
of size 64 (d_model 512 where an encoding has one), verified on ONNX Runtime CPU, and reported as its largest absolute
error against the eager reference and against the float64 oracle. ALiBi's ``bias`` artifact is then built at 2,048
and 131,072 maximum positions and the two model sizes printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from ropeexport import build  # noqa: E402
from ropeexport.catalog import (
    encodings,  # noqa: E402
    recipes,  # noqa: E402
)

SIZES = {"num_heads": 8, "head_dim": 64, "d_model": 512, "num_kv_heads": 0}


def _spec(encoding: str, **fields: object) -> object:
    cls = encodings()[encoding]
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in SIZES.items() if k in names}, **fields)


def _worst(report: dict, reference: str) -> float:
    values = [c["max_abs"] for c in report["comparisons"] if c["reference"] == reference]
    return max(float("inf") if v is None else v for v in values)


def main() -> None:
    """Build, verify, print a Markdown table, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-positions", type=int, default=4096)
    parser.add_argument("--out", default="encoding-figures.json")
    args = parser.parse_args()
    encodings()
    work = Path(tempfile.mkdtemp(prefix="ropeexport-figures-"))
    rows = []
    print("| encoding | artifact | dtype | passed | max abs vs eager | max abs vs float64 | guards | s |")
    print("|---|---|---|---|---|---|---|---|")
    for encoding, artifact in sorted(recipes()):
        for dtype in ("fp32", "fp16"):
            spec = _spec(encoding, artifact=artifact, dtype=dtype, max_positions=args.max_positions)
            start = time.perf_counter()
            result = build(spec, work)
            report = result.report
            row = {
                "encoding": encoding,
                "artifact": artifact,
                "dtype": dtype,
                "passed": result.passed,
                "max_abs_vs_eager": _worst(report, "eager"),
                "max_abs_vs_float64": _worst(report, "float64"),
                "guards": f"{sum(g['passed'] for g in report['guards'])}/{len(report['guards'])}",
                "seconds": round(time.perf_counter() - start, 1),
            }
            rows.append(row)
            print(
                f"| {encoding} | {artifact} | {dtype} | {row['passed']} | {row['max_abs_vs_eager']:.2e} "
                f"| {row['max_abs_vs_float64']:.2e} | {row['guards']} | {row['seconds']} |",
                flush=True,
            )
            shutil.rmtree(result.path)
    sizes, stored = {}, {}
    for max_positions in (2048, 131072):
        spec = _spec("alibi", artifact="bias", name=f"alibi-{max_positions}", max_positions=max_positions)
        result = build(spec, work)
        sizes[max_positions] = (result.path / "model.onnx").stat().st_size
        model = onnx.load(str(result.path / "model.onnx"))
        stored[max_positions] = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    print(
        f"ALiBi bias artifact: model.onnx {sizes[2048]} bytes at 2048 positions, {sizes[131072]} at 131072 "
        f"(the name and max_positions digits differ); initializers {stored[2048]} and {stored[131072]} bytes"
    )
    summary = {
        "max_positions": args.max_positions,
        "artifacts": len(rows),
        "all_passed": all(r["passed"] for r in rows),
        "alibi_bias_bytes": sizes,
        "alibi_bias_initializer_bytes": stored,
    }
    Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=2) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
