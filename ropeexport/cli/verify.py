"""``ropeexport verify DIR``: check an artifact's hashes, verify it again on this machine, write fresh reports.

DIR is one artifact folder, or a tree written by ``ropeexport build`` (every artifact in it: all manifests and hashes
are checked before anything is verified, and index.json / index.html are rewritten after).

Examples:
  ropeexport verify ropeexport-out
  ropeexport verify ropeexport-out/llama-3.1-8b-rope-fp16-fused
  ropeexport verify artifacts/mistral-7b-rope-fp16-fused --runtime ort --runtime onnx-reference --atol query_out:2e-5

A folder inside a tree (its parent has a ropeexport index.json) refreshes the tree's index.json / index.html too, so
the index never shows a verdict older than the report it links to.

Exit codes: 0 verified, 1 verification failed, 2 bad input (missing or edited files, unreadable manifest), 3 verified
but a runtime named with --runtime could not run here (--allow-skip accepts that).

"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from ropeexport.cli.options import add_tolerance_flags, tolerances
from ropeexport.tree import artifact_folders, is_tree


def add_parser(sub: Any) -> None:
    """Register ``verify``."""
    p = sub.add_parser(
        "verify",
        help="re-verify an artifact folder",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("folder", metavar="DIR", help="an artifact folder or a tree written by ropeexport build")
    p.add_argument(
        "--runtime",
        action="append",
        default=None,
        metavar="NAME",
        help="runtime to verify on: ort (default) or onnx-reference (repeatable)",
    )
    p.add_argument(
        "--allow-skip",
        action="store_true",
        help="exit 0 even when a runtime named with --runtime could not run here (default: exit 3)",
    )
    add_tolerance_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Verify and print the verdict (one line per artifact for a tree, then the index's path)."""
    from ropeexport.api import verify
    from ropeexport.cli.build import skipped_exit, summary_line

    atol, rtol = tolerances(args)
    folder = Path(args.folder)
    start = time.perf_counter()

    def done(result: Any, seconds: float) -> None:
        print(summary_line(result.report, result.path, seconds))

    results = verify(args.folder, args.runtime, atol, rtol, on_done=done)  # the raw text: "" is an error, not "."
    if (folder / "manifest.json").exists() or not artifact_folders(folder, damaged=True):
        tree = folder.resolve().parent
        if is_tree(tree):
            print(tree / "index.html")
    else:
        passed = sum(r.passed for r in results)
        print(f"{passed} of {len(results)} artifacts verified in {time.perf_counter() - start:.1f}s")
        print(folder.resolve() / "index.html")
    if not all(r.passed for r in results):
        return 1
    return skipped_exit(results, args.runtime, args.allow_skip)
