"""``ropeexport diff OLD NEW``: compare two reports comparison by comparison; exit 1 on a regression.

OLD and NEW are report.json files or artifact folders. A regression: a check that passed and now fails, a comparison
missing from NEW, a metric that became null, or an error metric (max_abs, p99_abs, mean_abs, max_ulp) that grew by
more than --max-growth times (default 2.0) and by more than its atol. A changed tolerance is always said: loosened is
a regression, tightened a note, and a verdict that flipped only because the tolerance was tightened says so.

Reports of different specs are a regression, unless --across names the fields that may differ: compare a fused with
a decomposed artifact of the same model with --across graph (repeatable or comma-separated: --across graph,dtype).

Two decoder reports (or folders, written by build --artifact decoder) are compared scenario by scenario: worst error
over the logit scale (a regression past --max-growth times and one ulp of the dtype), greedy agreement, first
divergence, near ties, verdicts; --across takes the decoder's spec fields, position.FIELD and weights. A decoder
report against another artifact's is bad input.

Examples:
  ropeexport diff baseline/report.json ropeexport-out/llama-3.1-8b-rope-fp16-fused
  ropeexport diff old.json new.json --max-growth 1.5 --json
  ropeexport diff ropeexport-out/llama-3.1-8b-rope-fp16-fused ropeexport-out/llama-3.1-8b-rope-fp16-decomposed \
      --across graph

"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from ropeexport.api import diff
from ropeexport.cli import in_flags, subcommand
from ropeexport.errors import SpecError
from ropeexport.report.diff import DEFAULT_MAX_GROWTH
from ropeexport.report.words import error


def add_parser(sub: Any) -> None:
    """Register ``diff``."""
    p = subcommand(sub, "diff", __doc__, run)
    p.add_argument("old", metavar="OLD")
    p.add_argument("new", metavar="NEW")
    p.add_argument(
        "--max-growth",
        type=str,
        default=str(DEFAULT_MAX_GROWTH),
        metavar="X",
        help=f"largest allowed growth factor of an error metric (default {DEFAULT_MAX_GROWTH})",
    )
    p.add_argument(
        "--across",
        action="append",
        default=[],
        metavar="FIELD[,FIELD]",
        help="spec fields OLD and NEW may differ in, compared on purpose (e.g. graph, dtype); repeatable",
    )
    p.add_argument("--json", action="store_true", help="print the diff as JSON")


def run(args: argparse.Namespace) -> int:
    """Load, compare, print; 1 when anything regressed."""
    try:
        growth = float(args.max_growth)
    except ValueError:
        raise SpecError("--max-growth", f"must be a number >= 1, got {args.max_growth!r}") from None
    if not (1 <= growth < float("inf")):
        raise SpecError("--max-growth", f"must be a finite number >= 1, got {args.max_growth!r}")
    across = [f.strip().replace("-", "_") for item in args.across for f in item.split(",") if f.strip()]
    result = diff(args.old, args.new, growth, across)
    notes, regressions = [in_flags(n) for n in result.notes], [in_flags(r) for r in result.regressions]
    if args.json:
        print(json.dumps(result.to_dict() | {"notes": notes, "regressions": regressions}, indent=2))
    else:
        width = max([9, *(len(row["metric"]) for row in result.rows)])
        print(f"{'comparison':40s} {'metric':{width}s} {'old':>10s} {'new':>10s} {'growth':>8s}")
        for row in result.rows:
            old, new, grown = _figure(row["old"], error), _figure(row["new"], error), _figure(row["growth"], _growth)
            print(f"{row['comparison']:40s} {row['metric']:{width}s} {old:>10s} {new:>10s} {grown:>8s}")
        for note in notes:
            print(f"note: {note}")
        for regression in regressions:
            print(f"REGRESSION: {regression}")
        print(f"{len(result.regressions)} regression(s)")
    return 1 if result.regressed else 0


def _growth(factor: float) -> str:
    """A growth factor, new over old, in fixed notation (``1.00`` unchanged, ``2.50`` grown)."""
    return f"{factor:,.2f}"


def _figure(value: Any, shown: Callable[[float], str]) -> str:
    """A cell of the diff table: ``null`` for a runtime that raised, a text metric as it is, else ``shown``."""
    return "null" if value is None else value if isinstance(value, str) else shown(value)
