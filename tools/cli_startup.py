"""CLI start-up time: wall time of ``python -m ropeexport ARGS`` for the commands a person types first.

Usage:
  python tools/cli_startup.py [--tree DIR] [--runs N] [--out FILE.json]

``--tree`` times another checkout (its folder goes first on PYTHONPATH), to compare before and after a change in
one run on one machine. Each command runs ``--runs`` times; best and median wall seconds are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = [["--version"], ["--help"], ["build", "--help"], ["list", "--help"], ["verify", "--help"]]


def measure(tree: Path, runs: int) -> dict[str, dict[str, float]]:
    """{command: {best, median}} in seconds for the checkout at ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = {}
    for argv in COMMANDS:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            # cwd is the checkout too: `python -m` puts the working folder first on sys.path.
            done = subprocess.run(
                [sys.executable, "-m", "ropeexport", *argv], cwd=tree, env=env, capture_output=True, check=False
            )
            times.append(time.perf_counter() - start)
            if done.returncode != 0:
                raise SystemExit(f"{tree}: ropeexport {' '.join(argv)} exited {done.returncode}")
        out[" ".join(argv)] = {"best": round(min(times), 4), "median": round(statistics.median(times), 4)}
    return out


def main() -> None:
    """Measure the checkouts given (this one by default) and print or write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", default=[], help="a checkout to time (repeatable)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", help="write the JSON here")
    args = parser.parse_args()
    trees = [Path(t).resolve() for t in args.tree] or [Path(__file__).resolve().parents[1]]
    result = {
        "python": sys.version.split()[0],
        "runs": args.runs,
        "trees": {str(t): measure(t, args.runs) for t in trees},
    }
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
