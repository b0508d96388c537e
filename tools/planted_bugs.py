"""Run the planted-bug suite: print the detection table (Markdown; the docs render the JSON) and write it as JSON.

    python tools/planted_bugs.py --out planted.json          # every bug and every correct build (~10 s)
    python tools/planted_bugs.py --only fp16-angles --keep artifacts/   # one bug, keeping the wrong model.onnx

Each planted bug (``ropeexport/planted/``, one module per family) is a wrong artifact made from the correct export of
the spec it claims to be; verification (``verify_artifact``, ONNX Runtime) must fail it by the expected comparisons,
tables and guards. The correct export of every such spec, verified the same way, must pass. Columns: *caught by* lists
the failing checks (comparisons as OUTPUT (REFERENCES), stored tables, in-graph guards, measured properties); *worst
error* is the largest |runtime - reference| of a failing comparison (or a table's ulps); *where* is the probe,
position(s) and head of that element, or the error when the runtime raised. A bug counts as caught only when exactly
its expected checks fail and its worst error sits where the table says; a fail made only of checks that also fail the
correct build tells nothing about the bug and counts as not caught. Exit status: 0 when every bug is caught and every
correct build passes, 1 otherwise, 2 for an unknown ``--only`` name.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ropeexport.pipeline import versions  # noqa: E402
from ropeexport.planted import BUGS, Detection, correct_specs, detect, verify_correct  # noqa: E402

SCHEMA = "ropeexport.planted/1"
VERDICTS = {
    "caught": "yes",
    "caught-by-other-checks": "yes, by other checks than expected",
    "caught-elsewhere": "yes, worst error elsewhere than expected",
    "false-alarm-only": "**NO**: only checks that fail the correct build too",
    "missed": "**NO**: passed",
    "raised": "**NO**: verification raised",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def caught_by(failed: tuple[str, ...], also_correct: tuple[str, ...] = ()) -> str:
    """Failing checks, grouped: ``query_out, key_out (eager, float64); tables cos, sin; guard position -1``.

    Checks in ``also_correct`` (they fail the correct build too, so they say nothing about the bug) get a ``*``.
    """
    refs: dict[str, list[str]] = {}
    for name in failed:
        kind, _, what = name.partition(":")
        if kind in ("eager", "float64"):
            refs.setdefault(what, []).append(kind)
    by_refs: dict[str, list[str]] = {}
    for output, which in refs.items():
        by_refs.setdefault(", ".join(which), []).append(output)
    parts = [f"{', '.join(outputs)} ({which})" for which, outputs in by_refs.items()]
    tables = [n.split(":", 1)[1].removesuffix("_table") for n in failed if n.startswith("table:")]
    if tables:
        parts.append(f"tables {', '.join(tables)}")
    parts += [
        n.replace(":", " ", 1) + ("*" if n in also_correct else "")
        for n in failed
        if n.startswith(("guard:", "property:"))
    ]
    return "; ".join(parts) or "nothing"


def _short_error(error: str) -> str:
    message = error.split("Status Message:", 1)[-1].strip()
    return message if len(message) <= 90 else message[:87] + "..."


def _num(value: Any) -> str:
    return value if isinstance(value, str) else format(value, ".4g")


def worst_text(d: Detection) -> str:
    """The largest error of a failing comparison, with its check; ulps for a table-only catch."""
    w = d.worst
    if d.error:
        return "-"
    if "error" in w:
        return f"runtime raised ({w['check']})"
    if "max_abs" in w:
        return f"{_num(w['max_abs'])} ({w['check']})"
    if w.get("max_ulp") is not None:
        return f"{w['max_ulp']:.3g} ulp ({w['check']})"
    return "-"


def where_text(d: Detection) -> str:
    """Probe, positions and head of the worst element (or the error raised)."""
    w = d.worst
    if d.error:
        return _short_error(d.error)
    if "error" in w:
        return f"probe {w['probe']}: {_short_error(w['error'])}"
    if "position" in w:
        place = f"position {w['position']}"
    elif "query_position" in w:
        place = f"query {w['query_position']} / key {w['key_position']}"
    elif "worst_row" in w:
        return f"row {w['worst_row']}" if w["worst_row"] is not None else str(w.get("reason", "-"))
    else:
        return "-"
    head = f", head {w['head']}" if "head" in w else ""
    return f"{place}{head} (probe {w['probe']}; got {_num(w['actual'])}, want {_num(w['expected'])})"


def markdown(bugs: list[Detection], correct: list[Detection]) -> str:
    """The detection table, then the correct builds' verdicts."""
    control = {d.artifact: d for d in correct}
    lines = [
        "| bug | artifact | caught? | caught by | worst error | where (position/head) |",
        "|---|---|---|---|---|---|",
    ]
    for d in bugs:
        c = control.get(d.artifact)
        cells = [
            f"`{d.name}`: {d.summary}",
            d.artifact,
            VERDICTS[d.verdict(c)],
            caught_by(d.failed, c.failed if c else ()) if d.error is None else "- (no verdict)",
            worst_text(d),
            where_text(d),
        ]
        lines.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    lines += ["", "| correct build | verdict | failing checks |", "|---|---|---|"]
    for d in correct:
        state = "raised: " + _short_error(d.error) if d.error else ("pass" if d.passed else "**FAIL**")
        lines.append(f"| {d.artifact} | {_cell(state)} | {_cell(caught_by(d.failed) if d.failed else '-')} |")
    caught = sum(d.verdict(control.get(d.artifact)) == "caught" for d in bugs)
    passing = sum(bool(d.passed) for d in correct)
    lines += [
        "",
        f"{caught}/{len(bugs)} bugs caught by exactly their expected checks, worst error where expected; "
        f"{passing}/{len(correct)} correct builds pass. *: fails the correct build of the same spec too.",
    ]
    return "\n".join(lines)


def run(only: list[str], keep: Path | None) -> tuple[list[Detection], list[Detection]]:
    """Verify the correct builds, then the selected bugs; artifacts under ``keep`` (else a temporary folder)."""
    bugs = [b for b in BUGS if not only or b.name in only]
    names = {b.spec.name for b in bugs}
    work = keep or Path(tempfile.mkdtemp(prefix="ropeexport-planted-"))
    try:
        correct = [verify_correct(s, work / "correct" / s.name) for s in correct_specs() if s.name in names]
        found = [detect(b, work / "planted" / b.name) for b in bugs]
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return found, correct


def main() -> None:
    """Parse arguments, run, print the table, write the JSON, exit 0 or 1."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--only", action="append", default=[], metavar="BUG", help="run only this bug (repeatable)")
    parser.add_argument("--keep", type=Path, help="write the artifacts here instead of a temporary folder")
    args = parser.parse_args()
    unknown = sorted(set(args.only) - {b.name for b in BUGS})
    if unknown:
        parser.error(f"unknown bug {unknown[0]!r}; known: {', '.join(b.name for b in BUGS)}")
    start = time.perf_counter()
    bugs, correct = run(args.only, args.keep)
    print(markdown(bugs, correct))
    control = {d.artifact: d for d in correct}
    verdicts = [d.verdict(control.get(d.artifact)) for d in bugs]
    ok = all(v == "caught" for v in verdicts) and all(d.passed for d in correct)
    if args.out:
        data = {
            "schema": SCHEMA,
            "passed": ok,
            "bugs": [d.to_dict() | {"verdict": v} for d, v in zip(bugs, verdicts, strict=True)],
            "correct": [d.to_dict() for d in correct],
            "environment": versions() | {"python": sys.version.split()[0]},
            "seconds": round(time.perf_counter() - start, 2),
        }
        args.out.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
