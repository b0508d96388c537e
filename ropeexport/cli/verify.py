"""``ropeexport verify DIR``: check an artifact's hashes, verify it again on this machine, write fresh reports.

DIR is one artifact folder, or a tree written by ``ropeexport build`` (every artifact in it: all manifests and hashes
are checked before anything is verified, and index.json / index.html are rewritten after).

Examples:
  ropeexport verify ropeexport-out
  ropeexport verify ropeexport-out/llama-3.1-8b-rope-fp16-fused
  ropeexport verify artifacts/mistral-7b-rope-fp16-fused --runtime ort --runtime onnx-reference --atol query_out:2e-5

Exit codes: 0 verified, 1 verification failed, 2 bad input (missing or edited files, unreadable manifest).

"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ropeexport.cli.options import add_tolerance_flags, tolerances
from ropeexport.reverify import check_folder, verify_folder
from ropeexport.tree import artifact_folders, write_index


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
    add_tolerance_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Verify and print the verdict (one line per artifact for a tree, then the index's path)."""
    from ropeexport.cli.build import summary_line

    atol, rtol = tolerances(args)
    folder = Path(args.folder)
    if (folder / "manifest.json").exists() or not artifact_folders(folder):
        result = verify_folder(folder, args.runtime, atol, rtol)
        print(summary_line(result.report, result.path, 0.0))
        return 0 if result.passed else 1
    folders = artifact_folders(folder)
    # Every artifact is checked before any is verified: a damaged tree changes nothing.
    manifests = {one: check_folder(one) for one in folders}
    passed = 0
    for one in folders:
        result = verify_folder(one, args.runtime, atol, rtol, manifest=manifests[one])
        passed += result.passed
        print(summary_line(result.report, result.path, 0.0))
    write_index(folder)
    print(f"{passed} of {len(folders)} artifacts verified")
    print(folder.resolve() / "index.html")
    return 0 if passed == len(folders) else 1
