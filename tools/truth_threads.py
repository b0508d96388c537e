"""The float64 truth's seconds on one BLAS thread against numpy's default, on a small dense and a small mixture decoder.

    OPENBLAS_NUM_THREADS=1 python tools/truth_threads.py dense 10   # one measurement, printed as a JSON line
    python tools/truth_threads.py --rounds 3 --passes 10            # fresh processes, 1 and default alternating

Each measurement is a fresh process whose OpenBLAS reads ``OPENBLAS_NUM_THREADS`` at load, timing ``passes`` float64
passes (``decoder.oracle.decoders_float64``, without the one-thread limit it now carries: ``__wrapped__``) over the
calls a verify makes of a prompt, 16 decode steps, a chunk and a padded batch of two, on seeded weights. ``--big``:
hidden 1024, MLP 4096, vocabulary 32000 (experts 512 wide) instead of 256 / 512 / 2048 (128). The load average is
printed with each line: under load, a figure of the machine's state, not of the code alone.

Shapes: feeds [1, 64], 16 x [1, 1], [1, 32], [2, 48] token ids; logits [b, s, vocab] each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BASE = {"vocab_size": 2048, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0}  # fmt: skip
MIXTURE = {"num_experts": 32, "num_experts_per_tok": 4, "moe_intermediate_size": 128, "norm_topk_prob": True}
BIG = {"hidden_size": 1024, "intermediate_size": 4096, "vocab_size": 32000, "head_dim": 128}
SHAPES = [(1, 64)] + [(1, 1)] * 16 + [(1, 32), (2, 48)]  # (rows, slots) of each call


def seconds(which: str, passes: int, big: bool) -> dict[str, Any]:
    """``passes`` float64 passes of the ``which`` decoder ("dense" or "moe") in this process, timed."""
    from ropeexport.decoder.build import DecoderRequest, resolve
    from ropeexport.decoder.oracle import Feed, Routing, Stored64, decoders_float64
    from ropeexport.decoder.parts import position_pieces
    from ropeexport.decoder.weights import seeded_weights

    config = {"model_type": "llama" if which == "dense" else "qwen3_moe", **BASE, **(BIG if big else {}),
              **({**MIXTURE, **({"moe_intermediate_size": 512} if big else {})} if which == "moe" else {})}  # fmt: skip
    spec, _ = resolve(DecoderRequest(config=config))
    weights, pieces = seeded_weights(spec), position_pieces(spec)
    rng = np.random.default_rng(0)
    feeds = [Feed(rng.integers(0, spec.vocab_size, (b, s)), np.tile(np.arange(s), (b, 1)), np.ones((b, s), np.int64))
             for b, s in SHAPES]  # fmt: skip
    unlimited = decoders_float64.__wrapped__  # the pass as it was before the limit: the variable decides
    start = time.perf_counter()
    for _ in range(passes):
        routings = [Routing(frozenset(), 1e-4, []) for _ in feeds] if which == "moe" else None
        unlimited(spec, Stored64(spec, weights), feeds, pieces, routings)
    return {"decoder": which, "big": big, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
            "passes": passes, "seconds": round(time.perf_counter() - start, 2),
            "load": Path("/proc/loadavg").read_text().split()[:3]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Command line (module doc)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("decoder", nargs="?", choices=("dense", "moe"), help="one measurement in this process")
    p.add_argument("passes_here", nargs="?", type=int, default=10, help="its passes")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of fresh processes")
    p.add_argument("--passes", type=int, default=10)
    p.add_argument("--big", action="store_true")
    args = p.parse_args(argv)
    if args.decoder is not None:
        print(json.dumps(seconds(args.decoder, args.passes_here, args.big)))
        return 0
    for _ in range(args.rounds):
        for which in ("dense", "moe"):
            for threads in ("1", None):
                env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
                env |= {"OPENBLAS_NUM_THREADS": threads} if threads else {}
                command = [sys.executable, __file__, which, str(args.passes), *(["--big"] if args.big else [])]
                print(subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
