"""TensorRT compatibility verdicts for every artifact kind, as a Markdown table (and JSON with ``--out``).

    python tools/trt_verdicts.py --out tools/trt-verdicts.json

Builds one fp32 artifact of every kind (every (encoding, artifact) in ``ropeexport.catalog.recipes()``, fused and
decomposed graph) with ``ropeexport.build`` into a temporary folder, plus the RoPE schedules whose graphs
differ (dynamic NTK's in-graph float64 branch, LongRoPE's switched tables), then runs ``check_trt`` on each
``model.onnx`` at TensorRT 8.6, 10.13, 10.15 and 11 (``--versions`` to choose others). A cell reads ``compatible``
or ``not (N): op node: first reason`` with the citations left out (the JSON keeps every reason in full).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ropeexport import build  # noqa: E402
from ropeexport.catalog import (
    recipes,  # noqa: E402
    spec_from_dict,  # noqa: E402
)
from ropeexport.trt import HEADLINE_VERSIONS, check_trt  # noqa: E402

VERSIONS = HEADLINE_VERSIONS
SMALL = {"max_positions": 256}
# RoPE schedules whose graphs differ from the static one (the rope kinds above use the default schedule).
SCHEDULES: dict[str, dict[str, Any]] = {
    "dynamic": {"scaling": "dynamic", "scaling_params": {"factor": 4.0, "original_max_position_embeddings": 128}},
    "longrope": {
        "scaling": "longrope",
        "head_dim": 16,
        "scaling_params": {
            "original_max_position_embeddings": 128,
            "short_factor": [1.0] * 8,
            "long_factor": [1.0 + 0.5 * i for i in range(8)],
        },
    },
}
CITATION = re.compile(r" \((?:onnx-tensorrt|NVIDIA|TensorRT|ONNX|policy)[^()]*(?:\([^()]*\)[^()]*)*\)")


def rows() -> list[dict[str, Any]]:
    """Every spec the table covers: {label, fields}."""
    out = []
    for encoding, artifact in sorted(recipes()):
        for graph in ("fused", "decomposed"):
            fields = {"encoding": encoding, "artifact": artifact, "graph": graph, "dtype": "fp32", **SMALL}
            name = f"{encoding}-{artifact}-{graph}"
            out.append({"label": f"{encoding} / {artifact}", "graph": graph, "fields": {"name": name, **fields}})
    for schedule, extra in SCHEDULES.items():
        for graph in ("fused", "decomposed"):
            fields = {"encoding": "rope", "artifact": "rope", "graph": graph, "dtype": "fp32", **SMALL, **extra}
            name = f"rope-rope-{schedule}-{graph}"
            out.append({"label": f"rope / rope ({schedule})", "graph": graph, "fields": {"name": name, **fields}})
    return out


def cell(verdict: dict[str, Any]) -> str:
    """``compatible`` or ``not (N): op node: first reason`` without its citations."""
    if verdict["compatible"]:
        return "compatible"
    first = verdict["reasons"][0]
    reason = CITATION.sub("", first["reason"]).replace("|", "/")
    return f"not ({len(verdict['reasons'])}): {first['op_type']} `{first['node']}`: {reason}"


def main() -> int:
    """Build, check, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write every verdict (all reasons, notes) as JSON here")
    parser.add_argument("--versions", default=",".join(VERSIONS), help="comma-separated TensorRT versions")
    args = parser.parse_args()
    versions = [v.strip() for v in args.versions.split(",") if v.strip()]
    results = []
    with tempfile.TemporaryDirectory(prefix="trt-verdicts-") as tmp:
        for row in rows():
            spec = spec_from_dict(row["fields"])
            built = build(spec, tmp)
            verdicts = {v: check_trt(built.path / "model.onnx", v).to_dict() for v in versions}
            results.append({**row, "name": spec.name, "verified": built.passed, "verdicts": verdicts})
    print(f"| artifact | graph | {' | '.join(f'TensorRT {v}' for v in versions)} |")
    print(f"|---|---|{'---|' * len(versions)}")
    for r in results:
        print(f"| {r['label']} | {r['graph']} | {' | '.join(cell(r['verdicts'][v]) for v in versions)} |")
    if args.out:
        args.out.write_text(json.dumps({"versions": versions, "artifacts": results}, indent=2) + "\n")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
