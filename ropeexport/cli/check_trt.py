"""``ropeexport check-trt MODEL.onnx --trt-version X.Y``: whether TensorRT's ONNX parser takes a model (no GPU).

Checks every node, If/Loop bodies included, against the TensorRT ONNX parser's operator support for that version
(operator, opset, element types: no float64 or complex; RotaryEmbedding needs 10.15 and INT64 position_ids,
Attention 10.14 with 4-D inputs and no KV cache; com.microsoft ops never) and prints one reason per offending node.
The support table and its sources: ropeexport/trt/support.py.

Examples:
  ropeexport check-trt ropeexport-out/llama-3.1-8b-rope-fp16-fused/model.onnx --trt-version 10.13
  ropeexport check-trt artifacts/mistral-7b-rope-fp16-fused/model.onnx --trt-version 10.15 --json

Exit codes: 0 compatible, 1 not compatible, 2 bad input (missing or unreadable model, unknown --trt-version).

"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ropeexport.cli import subcommand
from ropeexport.trt.compat import check_trt
from ropeexport.trt.support import VERSIONS


def add_parser(sub: Any) -> None:
    """Register ``check-trt``."""
    p = subcommand(sub, "check-trt", __doc__, run)
    p.add_argument("model", metavar="MODEL.onnx", help="an ONNX model (a ropeexport artifact's model.onnx)")
    p.add_argument(
        "--trt-version",
        required=True,
        metavar="X.Y",
        help=f"TensorRT version to check against: {', '.join(VERSIONS)}",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    """Check and print the verdict: 0 compatible, 1 not (a bad model or version raises SpecError: exit 2)."""
    result = check_trt(args.model, args.trt_version)
    if args.json:
        print(json.dumps({"model": args.model, **result.to_dict()}, indent=2))
        return 0 if result.compatible else 1
    if result.compatible:
        print(f"compatible with TensorRT {result.version}: {args.model}")
    else:
        count = len(result.reasons)
        print(f"NOT compatible with TensorRT {result.version}: {args.model} ({count} offending node(s))")
        for r in result.reasons:
            print(f"  {r['node']} [{r['op_type']}]: {r['reason']}")
    for note in result.notes:
        print(f"note: {note}")
    return 0 if result.compatible else 1
