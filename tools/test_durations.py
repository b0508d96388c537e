"""Each test file's measured duration, for the suite's longest-first order (``tests/durations.json``).

    .venv/bin/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --junitxml=/tmp/suite.xml
    python tools/test_durations.py /tmp/suite.xml --note "fresh clone of abc1234, 2-core machine, load 1-2"

Reads a pytest JUnit XML report (each testcase's ``time`` is its setup, call and teardown together, pytest's default
``junit_duration_report = total``), or the log of a run with ``--durations=0`` (its ``0.59s call tests/x.py::t``
lines, setup and teardown added), and writes ``tests/durations.json``: ``{"note": ..., "seconds": {file: seconds}}``,
files longest first. ``tests/conftest.py`` orders the collection by it: with ``--no-loadscope-reorder`` pytest-xdist
hands files to its processes in that order, so the long files start first and no long file is left to run alone at
the end (without the flag xdist orders files by how many tests they hold). The figures are sums of the tests' own
times, not wall time, and they carry the load of the run that measured them: only their order is used.
"""

from __future__ import annotations

import argparse
import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "durations.json"


def file_of(classname: str, root: Path = ROOT) -> str | None:
    """``tests.audits.test_x`` or ``tests.audits.test_x.TestClass`` -> ``tests/audits/test_x.py`` (None: no file)."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = Path(*parts[:end]).with_suffix(".py")
        if (root / path).is_file():
            return path.as_posix()
    return None


# one line of pytest's --durations report: "0.59s call     tests/report/test_sections.py::test_x[passed]"
DURATION_LINE = re.compile(r"^\s*([\d.]+)s (?:setup|call|teardown)\s+([^\s:]+\.py)::")


def file_seconds(report: Path, root: Path = ROOT) -> dict[str, float]:
    """{test file: the sum of its tests' times}, longest first (tests of files no longer there left out).

    ``report``: a JUnit XML report, or a log holding pytest's ``--durations=0`` lines.
    """
    seconds: Counter[str] = Counter()
    text = report.read_text(errors="replace")
    if text.lstrip().startswith("<"):
        for case in ET.fromstring(text).iter("testcase"):
            path = file_of(case.get("classname", ""), root)
            if path is not None:
                seconds[path] += float(case.get("time", "0"))
    else:
        for line in text.splitlines():
            if (found := DURATION_LINE.match(line)) and (root / found.group(2)).is_file():
                seconds[found.group(2)] += float(found.group(1))
    return {path: round(total, 2) for path, total in seconds.most_common()}


def main(argv: list[str] | None = None) -> int:
    """Write tests/durations.json (or ``--out``) from a report; exit 2 when it holds no test of this repository."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="pytest's --junitxml report of a whole-suite run")
    parser.add_argument("--note", required=True, help="what was run, where, at what load")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    seconds = file_seconds(args.report)
    if not seconds:
        parser.error(f"report: {args.report} holds no testcase of a file under {ROOT}")
    args.out.write_text(json.dumps({"note": args.note, "seconds": seconds}, indent=1) + "\n")
    print(f"{args.out}: {len(seconds)} files, {sum(seconds.values()) / 60:.1f} min in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
