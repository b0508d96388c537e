"""Two onnxruntime-genai folders served in alternating rounds: prefill and decode speed, and ratios.

    python tools/genai_ab.py OURS THEIRS --rounds 7 --out tools/figures/genai-ab.json

Each round serves the same prompt (ids 1..``--prompt``) greedily for ``--new`` tokens from each folder, one after the
other, their order swapped every round; per round the prefill tokens/s and the median decode ms a token. The ratios
(OURS against THEIRS, > 1: OURS faster) are taken round by round, so load that drifts over the run moves both sides
of a ratio alike; the median and quartiles of the rounds are reported with the load average before and after.

Each folder is served with the session options its ``genai_config.json`` holds (as a user gets it: ropeexport
writes ``intra_op_num_threads`` 0, ONNX Runtime's one thread a physical core; the builder writes none, and
onnxruntime-genai 0.18 then takes half the logical CPUs, one thread on this 2-vCPU host). ``--threads N`` overlays
the same count on both: the two graphs compared under one setting.

Every serving runs in a fresh process that loads that one model (as a server holds it), serves a short warm-up
generation, then the measured one. Two models loaded in one process are not timed alike: on this 2-core machine
(ONNX Runtime 1.31 CPU) the model loaded first runs a decode step about 9% slower than one loaded after it, the same
folder loaded three times included (0.91, 1.00, 1.00 against the last), so an in-process A/B measures load order.
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


def serve_fresh(folder: Path, prompt: int, new: int, threads: int | None = None) -> tuple[float, float, int]:
    """``serve`` in a fresh process holding only ``folder``'s model, after a warm-up generation (module doc)."""
    from fresh_process import child_json

    args = ["--serve-one", str(folder), "--prompt", str(prompt), "--new", str(new)]
    args += [] if threads is None else ["--threads", str(threads)]
    prefill, decode, steps = child_json(str(Path(__file__).resolve()), args, f"serving {folder}")
    return prefill, decode, steps


def _serve_one(folder: Path, prompt: int, new: int, threads: int | None) -> int:
    """The child of ``serve_fresh``: one line of JSON, [prefill tokens/s, decode ms a token, steps]."""
    import onnxruntime_genai as og

    config = og.Config(str(folder))
    if threads is not None:
        config.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": threads}}}}))
    model = og.Model(config)
    serve(model, list(range(1, 9)), 4)  # warm-up: the first generation's one-time costs are not the model's speed
    print(json.dumps(list(serve(model, list(range(1, prompt + 1)), new))))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command line (module doc)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("ours", type=Path, nargs="?")
    p.add_argument("theirs", type=Path, nargs="?")
    p.add_argument("--serve-one", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--threads", type=int, help="intra-op threads for both (default: each config's own)")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if args.serve_one is not None:
        return _serve_one(args.serve_one, args.prompt, args.new, args.threads)
    if args.ours is None or args.theirs is None:
        p.error("OURS and THEIRS are both needed")
    folders = {"ours": args.ours, "theirs": args.theirs}
    before = os.getloadavg()
    rounds = []
    for r in range(args.rounds):
        order = ["ours", "theirs"] if r % 2 == 0 else ["theirs", "ours"]
        rounds.append({name: serve_fresh(folders[name], args.prompt, args.new, args.threads) for name in order})
    after = os.getloadavg()
    prefill = [x["ours"][0] / x["theirs"][0] for x in rounds]
    decode = [x["theirs"][1] / x["ours"][1] for x in rounds]
    out = {
        "command": "python tools/genai_ab.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "load_average": {"before": [round(x, 2) for x in before], "after": [round(x, 2) for x in after]},
        "rounds": [
            {
                k: {"prefill_tokens_per_second": round(v[0], 1), "decode_ms_per_token": round(v[1], 1)}
                for k, v in x.items()
            }
            for x in rounds
        ],  # fmt: skip
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
