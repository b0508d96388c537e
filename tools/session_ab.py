"""Decode steps of decoder folders in plain ONNX Runtime sessions, timed in alternating rounds: ms a step and ratios.

    python tools/session_ab.py OURS THEIRS [MORE ...] --threads 1 --past 128 --rounds 9 --out F.json

Each folder's ``model.onnx`` (ropeexport's decoder or onnxruntime-genai's builder's; inputs as
``tools/decode_profile.py`` feeds them) gets one token after a ``--past``-entry cache of random values. Every round
times 15 steps of each folder (the median kept) after 5 untimed, the folders' order rotated every round; each
folder's speed is reported against the last one's, round by round (> 1: faster than the last), as median and
quartiles.

Every timing runs in a fresh process holding that one session. Sessions sharing a process are not timed alike on
this machine (ONNX Runtime 1.31 CPU, 2 cores): the same folder loaded three times into one process ran its decode
step at 0.91 / 1.00 / 1.00 of the last one's speed, and at 0.85 / 0.95 / 1.00 with glibc's mmap threshold fixed, so
an in-process A/B measures load order. ``--threads``: ONNX Runtime's intra-op threads (0: its default;
onnxruntime-genai 0.18 serves this machine's decode steps at about the one-thread speed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import decode_profile  # noqa: E402  (a sibling tool: the feeds both tools give a decode step)

STEPS = 15


def _session(folder: Path, threads: int, past: int) -> tuple[Any, dict[str, np.ndarray]]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.log_severity_level = threads, 3
    session = ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])
    decode_profile.PAST = past
    feeds = decode_profile._feeds(session)
    rng = np.random.default_rng(0)
    for name, value in feeds.items():
        if "past" in name:  # zeros would let a kernel skip work a served cache never lets it skip
            feeds[name] = rng.standard_normal(value.shape).astype(np.float32)
    for _ in range(5):
        session.run(None, feeds)
    return session, feeds


def _step_ms(session: Any, feeds: dict[str, np.ndarray]) -> float:
    times = []
    for _ in range(STEPS):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def _timed_apart(folder: Path, threads: int, past: int) -> float:
    """One timing (``_step_ms``) of ``folder`` in a fresh process (module doc)."""
    from fresh_process import child_json

    args = [str(folder), "--one", "--threads", str(threads), "--past", str(past)]
    return float(child_json(str(Path(__file__).resolve()), args, f"timing {folder}"))


def main(argv: list[str] | None = None) -> int:
    """Command line (module doc)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("folders", type=Path, nargs="+")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # the child: one folder, one timing
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--past", type=int, default=128)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if args.one:
        print(_step_ms(*_session(args.folders[0], args.threads, args.past)))
        return 0
    if len(args.folders) < 2:
        p.error("give two folders or more: each is timed against the last")
    before = os.getloadavg()
    ms: list[list[float]] = [[] for _ in args.folders]
    for r in range(args.rounds):
        k = r % len(args.folders)
        for i in [*range(k, len(args.folders)), *range(k)]:
            ms[i].append(_timed_apart(args.folders[i], args.threads, args.past))
    last = np.array(ms[-1])
    rows = []
    for folder, times in zip(args.folders, ms, strict=True):
        speed = last / np.array(times)
        rows.append({"folder": str(folder), "step_ms_median": round(float(np.median(times)), 2),
                     "speed_vs_last": [round(float(np.percentile(speed, q)), 3) for q in (50, 25, 75)]})  # fmt: skip
    out = {
        "command": "python tools/session_ab.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "load_average": {"before": [round(x, 2) for x in before], "after": [round(x, 2) for x in os.getloadavg()]},
        "threads": args.threads,
        "past": args.past,
        "folders": rows,
    }
    text = json.dumps(out, indent=1)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
