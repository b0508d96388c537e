"""Where a decode step of a served model spends its time: ONNX Runtime's kernel time by op type, profiled.

    python tools/decode_profile.py FOLDER [FOLDER ...] --out tools/figures/decode-profile.json
    python tools/decode_profile.py FOLDER [FOLDER ...] --prompt 128   # a first prompt of 128 tokens instead

Each folder's ``model.onnx`` (ropeexport's decoder or onnxruntime-genai's builder's: both take input_ids,
attention_mask, optionally position_ids, and past_key_values.*) gets one token after a 128-entry cache (``--prompt
N``: a first prompt of N tokens, the cache empty), 3 warm-up runs, then 10 timed and profiled; per op type the
kernel milliseconds a call and the nodes a call, and per MatMulNBits output width its microseconds a node. Each
folder is profiled in a fresh process of its own (the first model a process loads runs about 9% slower than later
ones: ``tools/genai_ab.py``), one after the other, so load that drifts between them moves the comparison
(``tools/genai_ab.py`` and ``tools/session_ab.py`` alternate).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

PAST, WARM, RUNS = 128, 3, 10


def _feeds(session: ort.InferenceSession, prompt: int = 0) -> dict[str, np.ndarray]:
    """One decode step's inputs by the names both tools use (``prompt`` > 0: a first prompt of that many tokens, the
    cache empty); a cache's symbolic dims as Llama's 8 KV heads of 64.
    """  # noqa: D205
    past, new = (0, prompt) if prompt else (PAST, 1)
    out: dict[str, np.ndarray] = {}
    for value in session.get_inputs():
        name, dims = value.name, [d if isinstance(d, int) else None for d in value.shape]
        if name == "input_ids":
            out[name] = np.arange(5, 5 + new, dtype=np.int64)[None]
        elif name == "attention_mask":
            out[name] = np.ones((1, past + new), np.int64)
        elif name == "position_ids":
            out[name] = np.arange(past, past + new, dtype=np.int64)[None]
        elif "past" in name:
            out[name] = np.zeros((1, dims[1] or 8, past, dims[3] or 64), np.float32)
    return out


def profile(folder: Path, prompt: int = 0) -> dict[str, Any]:
    """The folder's decode step (module doc)."""
    options = ort.SessionOptions()
    options.enable_profiling, options.profile_file_prefix = True, f"/tmp/decode-profile-{os.getpid()}"
    session = ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])
    feeds = _feeds(session, prompt)
    times = []
    for k in range(WARM + RUNS):
        start = time.perf_counter()
        session.run(None, feeds)
        if k >= WARM:
            times.append(time.perf_counter() - start)
    path = Path(session.end_profiling())
    events = [e for e in json.loads(path.read_text()) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    path.unlink()
    runs = WARM + RUNS
    by_op: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    by_width: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for e in events:
        op = e["args"].get("op_name", "?")
        by_op[op][0] += e["dur"]
        by_op[op][1] += 1
        if op == "MatMulNBits":
            width = str(e["args"].get("output_type_shape", [{}])[0].get("float", ["?"])[-1])
            by_width[width][0] += e["dur"]
            by_width[width][1] += 1
    return {
        "folder": str(folder),
        "step_ms_median": round(1000 * float(np.median(times)), 1),
        "nodes_a_step": sum(n for _, n in by_op.values()) // runs,
        "ms_a_step": {op: round(d / runs / 1000, 2) for op, (d, _) in sorted(by_op.items(), key=lambda x: -x[1][0])},
        "MatMulNBits_us_a_node": {w: round(d / n, 1) for w, (d, n) in by_width.items()},
    }


def _profiled_apart(folder: Path, prompt: int) -> dict[str, Any]:
    """``profile(folder, prompt)`` in a fresh process (module doc)."""
    from fresh_process import child_json

    args = ["--one", str(folder), "--prompt", str(prompt)]
    return dict(child_json(str(Path(__file__).resolve()), args, f"profiling {folder}"))


def main(argv: list[str] | None = None) -> int:
    """Command line (module doc)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("folders", type=Path, nargs="+")
    p.add_argument("--out", type=Path)
    p.add_argument("--prompt", type=int, default=0, help="profile a first prompt of this many tokens instead")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # the child: one folder, one JSON line
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(profile(args.folders[0], args.prompt)))
        return 0
    before = os.getloadavg()
    found = [_profiled_apart(folder, args.prompt) for folder in args.folders]
    out = {"command": "python tools/decode_profile.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "load_average": {"before": [round(x, 2) for x in before],
                            "after": [round(x, 2) for x in os.getloadavg()]},
           "cpus": os.cpu_count(), "models": found}  # fmt: skip
    text = json.dumps(out, indent=1)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
