"""``ropeexport verify DIR``: check an artifact's hashes, verify it again on this machine, write fresh reports.

Examples:
  ropeexport verify ropeexport-out/llama3-half-fp32-fused
  ropeexport verify artifacts/rope --runtime ort --runtime onnx-reference --atol query_out:2e-5

Exit codes: 0 verified, 1 verification failed, 2 bad input (missing or edited files, unreadable manifest).

"""

from __future__ import annotations

import argparse
from typing import Any

from ropeexport.cli.options import add_tolerance_flags, tolerances
from ropeexport.reverify import verify_folder


def add_parser(sub: Any) -> None:
    """Register ``verify``."""
    p = sub.add_parser(
        "verify",
        help="re-verify an artifact folder",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("folder", metavar="DIR", help="an artifact folder written by ropeexport build")
    p.add_argument(
        "--runtime",
        action="append",
        default=None,
        metavar="NAME",
        help="runtime to verify on: ort (default) or onnx-reference (repeatable)",
    )
    add_tolerance_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Verify and print the verdict."""
    atol, rtol = tolerances(args)
    result = verify_folder(args.folder, args.runtime, atol, rtol)
    from ropeexport.cli.build import summary_line

    print(summary_line(result.report, result.path, 0.0))
    return 0 if result.passed else 1
