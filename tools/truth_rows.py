"""What the float64 truth of a decoder's verification recomputes: token-rows a pass.

Each call recomputed from the start, against each run of calls that extend one another once
(``decoder.oracle.chained``).

    python tools/truth_rows.py --preset llama-3.1-8b

Every scenario's calls come from ``decoder.greedy.run_scenario`` through a stand-in runtime of seeded logits (the
truth reads only the tokens, positions and masks; the chains depend on the position tables alone, so no weights are
made). ``tests/decoder/test_chained_truth.py`` runs the same calls.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ropeexport.decoder.export import cache_names  # noqa: E402
from ropeexport.decoder.greedy import Call, run_scenario  # noqa: E402
from ropeexport.decoder.memory import ENV  # noqa: E402
from ropeexport.decoder.oracle import Feed, chained  # noqa: E402
from ropeexport.decoder.parts import position_pieces  # noqa: E402
from ropeexport.decoder.scenarios import scenarios  # noqa: E402
from ropeexport.decoder.weights import cache_shapes  # noqa: E402


def calls(spec: Any) -> list[tuple[str, list[Call]]]:
    """Every scenario's calls (module doc), by scenario name."""
    rng = np.random.default_rng(0)

    def infer(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        b, s = feeds["input_ids"].shape
        out = {"logits": rng.standard_normal((b, s, spec.vocab_size)).astype(np.float32)}
        for i in range(spec.num_layers):
            past_key, past_value, present_key, present_value = cache_names(i)
            for past, present, (heads, width) in zip((past_key, past_value), (present_key, present_value),
                                                     cache_shapes(spec, i), strict=True):  # fmt: skip
                out[present] = np.concatenate([feeds[past], np.zeros((b, heads, s, width), np.float32)], axis=2)
        return out

    return [(scenario.name, run_scenario(infer, spec, scenario)) for scenario in scenarios(spec)]


def feeds(made: list[Call]) -> list[Feed]:
    """The truth's feeds of the calls, as ``verify`` makes them (M-RoPE: the [3, b, s] positions fed)."""
    return [Feed(c.input_ids, c.fed_positions, c.attention_mask, c.first) for c in made]


def main(argv: list[str] | None = None) -> int:
    """Command line (module doc)."""
    import ropeexport as rx

    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--preset", default="llama-3.1-8b")
    args = p.parse_args(argv)
    os.environ[ENV] = "1T"  # the spec alone: nothing is built here, so the build's memory check has no say
    spec = rx.resolve_decoder(preset=args.preset)
    pieces, total = position_pieces(spec), [0, 0]
    print("| scenario | calls | runs | token-rows, each call whole | token-rows, once a run |")
    print("|---|---:|---:|---:|---:|")
    for name, made in calls(spec):
        fed = feeds(made)
        runs = chained(spec, fed, pieces)
        whole, once = sum(f.input_ids.size for f in fed), sum(fed[r[-1]].input_ids.size for r in runs)
        total = [total[0] + whole, total[1] + once]
        print(f"| {name} | {len(made)} | {len(runs)} | {whole} | {once} |")
    print(f"| all | | | {total[0]} | {total[1]} (x{total[0] / total[1]:.1f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
