"""Two onnxruntime-genai folders served in alternating rounds in one process: prefill and decode speed, and ratios.

    python tools/genai_ab.py OURS THEIRS --rounds 7 --out tools/figures/genai-ab.json

Each round serves the same prompt (ids 1..``--prompt``) greedily for ``--new`` tokens in each folder, one after the
other, their order swapped every round; per round the prefill tokens/s and the median decode ms a token. The ratios
(OURS against THEIRS, > 1: OURS faster) are taken round by round, so load that drifts over the run moves both sides
of a ratio alike; the median and quartiles of the rounds are reported with the load average before and after.
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


def serve(model: Any, ids: list[int], new: int) -> tuple[float, float, int]:
    """(prefill tokens/s, median decode ms a token, decode steps) of one greedy generation (``tools/bench_sizes.py``
    serves with it too).
    """  # noqa: D205
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + new, do_sample=False)
    generator = og.Generator(model, params)
    start = time.perf_counter()
    generator.append_tokens(np.array([ids], dtype=np.int32))
    prefill = time.perf_counter() - start
    steps = []
    while not generator.is_done():
        t = time.perf_counter()
        generator.generate_next_token()
        steps.append(time.perf_counter() - t)
    return len(ids) / prefill, 1000 * float(np.median(steps)), len(steps)


def quartiles(values: list[float]) -> list[float]:
    """[median, lower quartile, upper quartile], rounded to 3 decimals."""
    return [round(float(np.percentile(values, q)), 3) for q in (50, 25, 75)]


def main(argv: list[str] | None = None) -> int:
    """Command line (module doc)."""
    import onnxruntime_genai as og

    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("ours", type=Path)
    p.add_argument("theirs", type=Path)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    models = {"ours": og.Model(str(args.ours)), "theirs": og.Model(str(args.theirs))}
    ids = list(range(1, args.prompt + 1))
    before = os.getloadavg()
    rounds = []
    for r in range(args.rounds):
        order = ["ours", "theirs"] if r % 2 == 0 else ["theirs", "ours"]
        rounds.append({name: serve(models[name], ids, args.new) for name in order})
    after = os.getloadavg()
    prefill = [x["ours"][0] / x["theirs"][0] for x in rounds]
    decode = [x["theirs"][1] / x["ours"][1] for x in rounds]
    out = {
        "command": "python tools/genai_ab.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "load_average": {"before": [round(x, 2) for x in before], "after": [round(x, 2) for x in after]},
        "rounds": [{k: {"prefill_tokens_per_second": round(v[0], 1), "decode_ms_per_token": round(v[1], 1)}
                    for k, v in x.items()} for x in rounds],  # fmt: skip
        "ratio_prefill": quartiles(prefill),
        "ratio_decode": quartiles(decode),
    }
    text = json.dumps(out, indent=1)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
