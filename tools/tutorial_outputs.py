"""Run a tutorial as a new user does and record what each of its commands printed: the outputs its page shows.

    python tools/tutorial_outputs.py docs/tutorials/audit-and-graft.md --out tools/figures/tutorial-audit-and-graft.json

The page's ``sh`` and ``python`` blocks run top to bottom in a new empty folder, as ``tests/docs/test_tutorials.py``
runs them (the block that makes the checkout's tiny checkpoint first, where the page needs one: ``tests/docs/pages.py``
``NEEDS``), with this interpreter's ``bin`` first on PATH. Each block's command, exit code and output (stdout, then
stderr) are written with the machine, the load average and the versions that made them. ``tools/docs_site.py``
renders the page's output excerpts from this file (``<!-- render: output NAME -->``), and the tutorial's test fails
when a run prints other lines than the committed excerpts: a figure on the page cannot drift from what a user gets.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.docs.pages import NEEDS, RUN, SHELL, Block, blocks  # noqa: E402 - the tests' reading of a page


def environment() -> dict[str, str]:
    """The user's shell after the install: this interpreter's bin first (``ropeexport``, ``python``), this checkout."""
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT),
            "NO_MKDOCS_2_WARNING": "1", "MPLBACKEND": "Agg"}  # fmt: skip


def run_block(block: Block, folder: Path, timeout: float = 1800) -> dict[str, Any]:
    """One block in ``folder`` (a shell block under bash -e, a Python block as a script): its record."""
    argv = ["bash", "-e", "-o", "pipefail", "-c", block.text] if block.info in SHELL else [sys.executable, "-c",
                                                                                          block.text]  # fmt: skip
    proc = subprocess.run(argv, cwd=folder, env=environment(), capture_output=True, text=True, timeout=timeout)
    return {"line": block.line, "info": block.info, "text": block.text, "exit": proc.returncode,
            "output": proc.stdout + proc.stderr}  # fmt: skip


def run_page(page: str, folder: Path, done: Callable[[list[dict[str, Any]]], None]) -> list[dict[str, Any]]:
    """Every runnable block of ``page`` in ``folder`` (what it needs made first), each block's record; ``done`` is
    handed the records so far after each block (a tutorial runs for many minutes: a stopped run keeps what it ran).
    """  # noqa: D205
    if page in NEEDS and not (folder / NEEDS[page][0]).exists():
        _, other, index = NEEDS[page]
        run_block([b for b in blocks(other) if b.info == "python"][index], folder)
    records: list[dict[str, Any]] = []
    for block in (b for b in blocks(page) if b.info in (*SHELL, "python") and b.skip is None):
        records.append(run_block(block, folder))
        done(records)
        if records[-1]["exit"] != 0:
            break
    return records


def main(argv: list[str] | None = None) -> int:
    """Run and write (module doc); exit 1 when a block failed (its record is written all the same)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("page", choices=sorted(RUN), help="a page whose blocks run top to bottom")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    before, start = [round(x, 2) for x in os.getloadavg()], time.perf_counter()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    runnable = sum(b.info in (*SHELL, "python") and b.skip is None for b in blocks(args.page))

    def write(records: list[dict[str, Any]]) -> None:
        document = {
            "tool": "tools/tutorial_outputs.py",
            "command": f"python tools/tutorial_outputs.py {args.page} --out {args.out}",
            "page": args.page, "commit": commit.stdout.strip(),
            "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "python": platform.python_version(),
            "versions": {p: version(p) for p in ("onnxruntime", "onnxruntime-genai", "torch", "transformers")},
            "load_average": {"before": before, "after": [round(x, 2) for x in os.getloadavg()]},
            "wall_s": round(time.perf_counter() - start, 1), "complete": len(records) == runnable, "blocks": records,
        }  # fmt: skip
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(document, indent=2) + "\n")

    with tempfile.TemporaryDirectory(prefix="tutorial-") as folder:
        records = run_page(args.page, Path(folder), write)
    failed = [r for r in records if r["exit"] != 0]
    print(f"{len(records)} blocks run, {len(failed)} failed; written {args.out}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
