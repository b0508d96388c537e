"""Time ``ropeexport build`` commands as a user runs them: wall and CPU seconds, with the machine and its load.

Each command runs in a fresh process in a new temporary folder (its output deleted after), one run each, nothing
else of ours running. The load average is read before and after: on a shared machine the wall time grows with it,
the CPU time much less. Writes ``build-times.json`` (and prints a Markdown table)::

    python tools/build_times.py --out tools/figures/build-times.json                  # the default build
    python tools/build_times.py --all-presets --out tools/figures/build-times.json    # + --all-presets (-j 1, 2)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ropeexport.report import cpu_name


def run(argv: list[str]) -> dict[str, Any]:
    """One command's wall and CPU seconds (its process tree), exit code, and the load before and after."""
    work = Path(tempfile.mkdtemp(prefix="build-times-"))
    before_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before = os.getloadavg()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ropeexport", *argv, "--quiet"], cwd=work, capture_output=True,
                          text=True)  # fmt: skip
    wall = time.perf_counter() - start
    after_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_after = os.getloadavg()
    index = work / "ropeexport-out" / "index.json"
    count = len(json.loads(index.read_text())["artifacts"]) if index.is_file() else 0
    shutil.rmtree(work, ignore_errors=True)
    cpu = (after_cpu.ru_utime - before_cpu.ru_utime) + (after_cpu.ru_stime - before_cpu.ru_stime)
    return {"command": " ".join(["ropeexport", *argv]), "exit": done.returncode, "artifacts": count,
            "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "load_average": {"before": [round(x, 2) for x in load_before],
                             "after": [round(x, 2) for x in load_after]}}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Measure (module doc)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--all-presets", action="store_true", help="also time --all-presets, with -j 1 and -j 2")
    args = parser.parse_args(argv)
    commands = [["build"]]
    if args.all_presets:
        commands += [["build", "--all-presets"], ["build", "--all-presets", "-j", "2"]]
    runs = []
    for command in commands:
        runs.append(run(command))
        print(runs[-1], file=sys.stderr, flush=True)
    document = {"tool": "tools/build_times.py", "command": "python tools/build_times.py --out " + str(args.out)
                + (" --all-presets" if args.all_presets else ""),
                "machine": {"cpu": cpu_name(), "cpus": os.cpu_count(), "platform": platform.platform()},
                "python": platform.python_version(), "runs": runs}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    for r in runs:
        print(f"| `{r['command']}` | {r['artifacts']} | {r['wall_s']} s | {r['cpu_s']} s | "
              f"{r['load_average']['before'][0]} -> {r['load_average']['after'][0]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
