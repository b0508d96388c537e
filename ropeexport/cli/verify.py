"""``ropeexport verify DIR``: check an artifact's hashes, verify it again on this machine, write fresh reports.

DIR is one artifact folder, or a tree written by ``ropeexport build`` (every artifact in it, decoders included: all
manifests and hashes are checked before anything is verified, and index.json / index.html are rewritten after).

Examples:
  ropeexport verify ropeexport-out
  ropeexport verify ropeexport-out/llama-3.1-8b-rope-fp16-fused
  ropeexport verify artifacts/mistral-7b-rope-fp16-fused --runtime ort --runtime onnx-reference --atol query_out:2e-5

A folder inside a tree (its parent has a ropeexport index.json) refreshes the tree's index.json / index.html too, so
the index never shows a verdict older than the report it links to.

A decoder folder (written by build --artifact decoder) is checked against the sha256 its manifest lists, then
every scenario runs again on each --runtime (default ort: ONNX Runtime's CPU provider), each judged against the
float64 truth with the same bound; each scenario's worst error is shown beside the one stored for that runtime
(--atol / --rtol do not apply: a decoder's tolerance is fixed per dtype). onnx-reference, the ONNX spec's own
evaluator, is an independent second runtime for small decoders; it has no kernel for ONNX Runtime's contrib ops
(the gqa form, int4 weights): the verdict names each such op, and the exit is 3.

  ropeexport verify ropeexport-out/my-llama-decoder-fp32-fused --runtime ort --runtime onnx-reference

Every artifact's line is followed by one saying what ONNX Runtime's optimizer (level all, its default, on the CPU
provider) did to its rotations: nothing, a new form for the same rotation (a fusion, tables folded), or another
rotation (channels paired otherwise, another width, other table values, a layer left unrotated); the probes ran that
optimized graph, as every ONNX Runtime session does. report.json keeps it (optimizer); it does not change the
verdict. A model whose folder holds over 1 GiB is not optimized here: `ropeexport audit --optimized` checks it.

--ray ADDRESS verifies each artifact of a tree as a Ray task (local: a Ray instance started for the run and stopped
after; auto: the cluster running here; HOST:PORT or ray://HOST:PORT), the reports written here as each comes back:
the same report.json bytes as without it. The tree must be on storage every worker reads at the same path. Needs
the cluster extra (pip install -e ".[cluster]").

  ropeexport verify ropeexport-out --ray local

A tree's run that stops before the end (killed, with --ray or without) leaves DIR/.verify-run.json: a rerun with the
same runtimes, tolerances and versions keeps each artifact that run verified (its report.json unchanged since) and
verifies the rest; a run that finishes removes it, so the next verify runs every artifact again.

Exit codes: 0 verified, 1 verification failed, 2 bad input (missing or edited files, unreadable manifest), 3 verified
but a runtime named with --runtime could not run here (--allow-skip accepts that).

"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from ropeexport.cli import subcommand
from ropeexport.cli.options import add_tolerance_flags, tolerances
from ropeexport.decoder.kind import DecoderVerifyResult
from ropeexport.decoder.runs import RuntimeVerdict
from ropeexport.report.words import error
from ropeexport.tree import artifact_folders, is_tree


def is_package(folder: Path) -> bool:
    """True for a folder whose manifest says it is a package ``ropeexport package`` wrote."""
    from ropeexport.decoder.transformersjs import ARTIFACT
    from ropeexport.manifest import read_object

    manifest = read_object(folder / "manifest.json", "manifest.json")
    return manifest is not None and manifest.get("artifact") == ARTIFACT


def add_parser(sub: Any) -> None:
    """Register ``verify``."""
    p = subcommand(sub, "verify", __doc__, run)
    p.add_argument("folder", metavar="DIR", help="an artifact folder or a tree written by ropeexport build")
    p.add_argument(
        "--runtime",
        action="append",
        default=None,
        metavar="NAME",
        help="runtime to verify on (repeatable): ort (default), onnx-reference or trt; every kind of artifact, "
        "decoders included",
    )
    p.add_argument(
        "--allow-skip",
        action="store_true",
        help="exit 0 even when a runtime named with --runtime could not run here (default: exit 3)",
    )
    p.add_argument("--ray", metavar="ADDRESS", help="verify each artifact as a Ray task on the cluster at ADDRESS "
                   "(local, auto, HOST:PORT or ray://HOST:PORT); needs the cluster extra")  # fmt: skip
    add_tolerance_flags(p)


def run(args: argparse.Namespace) -> int:
    """Verify and print the verdict (one line per artifact for a tree, then the index's path)."""
    from ropeexport.api import verify
    from ropeexport.cli.build import summary_line
    from ropeexport.cli.options import skipped_exit

    atol, rtol = tolerances(args)
    folder = Path(args.folder)
    if is_package(folder):  # a transformers.js package: its own check (``ropeexport package``)
        from ropeexport.api.packages import verify_package
        from ropeexport.cli.package import print_result

        return print_result(verify_package(folder))
    start = time.perf_counter()

    def done(result: Any, seconds: float) -> None:
        if isinstance(result, DecoderVerifyResult):
            print(decoder_summary_line(result, seconds))
        else:
            print(summary_line(result.report, result.path, seconds))
        if getattr(result, "resumed", False):
            print("  verified by a run of this tree that stopped before the end (.verify-run.json): kept, not run "
                  "again")  # fmt: skip
        optimizer = result.report.get("optimizer")
        if isinstance(optimizer, dict) and optimizer.get("text"):
            print(f"  {optimizer['text']}")

    # the raw text: "" is an error, not "."
    results = verify(args.folder, args.runtime, atol, rtol, on_done=done, on_scenario=scenario_line, ray=args.ray)
    if (folder / "manifest.json").exists() or (folder / "decoder.json").exists() or not artifact_folders(
        folder, damaged=True
    ):
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


def _e(x: Any) -> str:
    return "none" if x is None else error(x)


def scenario_line(result: dict[str, Any]) -> None:
    """One re-verified decoder scenario: verdict, worst error and agreement now (and stored), positions."""
    s, stored = result["summary"], result.get("stored")
    rel, agreement, new = _e(s["worst_rel"]), s["agreement"], ""
    if stored is None:
        new = " (new: not in the stored report)"
    else:
        rel += f" (stored {_e(stored.get('worst_rel'))})"
        agreement += f" (stored {stored.get('agreement')})"
    runtime = result.get("runtime")
    prefix = "" if runtime in (None, "ort") else f"[{runtime}] "
    print(
        f"  {prefix}{result['name']:<27} {'ok  ' if result['passed'] else 'FAIL'} worst {rel} of the logit scale, "
        f"agreement {agreement}, positions {s['positions'][0]}-{s['positions'][1]}{new}",
        flush=True,
    )


def decoder_summary_line(result: DecoderVerifyResult, seconds: float) -> str:
    """A re-verified decoder's verdict: worst error now and stored, agreement, where it ran; a line per further runtime
    (its verdict, or why it did not run); then its path.
    """  # noqa: D205
    report, verdicts = result.report, result.runtimes
    ran = [v for v in verdicts if v.ran]
    first = ran[0] if ran else None
    rows = first.scenarios if first else []
    head = (f"{'PASS' if result.passed else 'FAIL'} {report['name']}: {_figures(rows, str(report['runtime']))}; "
            f"transformers: {report['references']['transformers']}" + _failed(first))  # fmt: skip
    if result.dropped:
        head += f"; stored but no longer run: {', '.join(result.dropped)}"
    lines = [f"{head} ({seconds:.1f}s)"]
    for verdict in verdicts:
        if verdict is first:
            continue
        said = f"{'PASS' if verdict.passed else 'FAIL'} {_figures(verdict.scenarios, verdict.device)}{_failed(verdict)}"
        lines.append(f"  {verdict.name}: " + (said if verdict.ran else f"skipped: {verdict.reason}"))
    return "\n".join([*lines, f"  -> {result.path}"])


def _figures(rows: list[dict[str, Any]], device: str) -> str:
    """One runtime's worst error (and the stored one), scenario count and agreement, and where it ran."""
    worst = max((r["worst_rel"] for r in rows), default=0.0)
    stored = [r["stored_worst_rel"] for r in rows if r["stored_worst_rel"] is not None]
    agree = [tuple(int(x) for x in r["agreement"].split("/")) for r in rows]
    return (f"worst {_e(worst)} of the logit scale vs float64" + (f" (stored {_e(max(stored))})" if stored else "")
            + f" over {len(rows)} scenarios, agreement {sum(a for a, _ in agree)}/{sum(b for _, b in agree)} on "
            + device)  # fmt: skip


def _failed(verdict: RuntimeVerdict | None) -> str:
    """``; failed: ...`` naming a runtime's failed scenarios, ``; raised: ...`` when it raised on a valid call."""
    if verdict is None:
        return ""
    failed = [r["name"] for r in verdict.scenarios if not r["passed"]]
    return (f"; failed: {', '.join(failed)}" if failed else "") + (f"; raised: {verdict.reason}" if verdict.reason
                                                                    else "")  # fmt: skip
