"""A Gemma 4 preset card's shrunk decoder, verified by hand (issue 39 item 2; not in CI: minutes to an hour on 2 cores).

The card's config shrunk (``decoder.config.shrink``: hidden 512 or as given, vocabulary 512, the first ``--layers``
layers), seeded weights, built and verified by generation against the float64 recompute and ``Gemma4ForCausalLM``
(``rx.build_decoder``). Two edits by hand, each said in the output: ``--shared`` (the layers reading an earlier
layer's keys and values; shrink scales the card's count with the layers and caps it as transformers requires: E2B's 20
of 35 is 5 of 10, what verified.md's run set by hand before shrink did) and ``--window`` (the sliding window, so that a
short ``--max-positions`` still crosses it). Run once for verified.md's Gemma 4 row:

    python tools/gemma4_card_check.py gemma-4-e2b --layers 10 --max-positions 1024 --out /tmp/e2b
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ropeexport as rx  # noqa: E402
from ropeexport.decoder.config import shrink  # noqa: E402
from ropeexport.presets import get_preset  # noqa: E402


def main(argv: list[str]) -> int:
    """Build and verify the shrunk card; print each scenario's worst error against float64 and transformers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("card", help="a Gemma 4 preset card (gemma-4-e2b, gemma-4-e4b, gemma-4-26b-a4b, gemma-4-31b)")
    parser.add_argument("--layers", type=int, required=True, help="keep the card's first N layers (end on a full one)")
    parser.add_argument("--hidden", type=int, default=512, help="hidden size (a multiple of head_dim 256)")
    parser.add_argument("--shared", type=int, default=None, help="num_kv_shared_layers (default: shrink's)")
    parser.add_argument("--window", type=int, default=None, help="sliding_window for the shrunk model")
    parser.add_argument("--max-positions", type=int, default=1024)
    parser.add_argument("--graph", default="gqa")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    config = shrink(dict(get_preset(args.card).config or {}), num_layers=args.layers, hidden_size=args.hidden,
                    vocab_size=512)  # fmt: skip
    for key, value in (("num_kv_shared_layers", args.shared), ("sliding_window", args.window)):
        if value is not None:
            print(f"{key}: {config.get(key)} -> {value} (set by hand)")
            config[key] = value
    start = time.time()
    result = rx.build_decoder(config=config, name=f"{args.card}-shrunk", out_dir=args.out, graph=args.graph,
                              max_positions=args.max_positions)  # fmt: skip
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"{args.card}: passed {result.passed}, {time.time() - start:.0f} s, peak RSS {peak} MiB")
    for scenario in result.decoder_report.scenarios:
        s = scenario.summary
        print(f"  {scenario.name}: float64 {s.worst_rel:.2e}, transformers {s.worst_rel_transformers:.2e}, "
              f"positions {s.positions}")  # fmt: skip
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
