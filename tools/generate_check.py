"""``ropeexport generate`` on a built decoder, its greedy tokens judged against the float64 truth (any size).

    python tools/generate_check.py OUT/qwen3-vl-4b-decoder-fp32-int4-b32-gqa CHECKPOINT --json generate.json
    python tools/generate_check.py DIR CHECKPOINT --prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens 16

Each generation is the command a user runs (``python -m ropeexport generate DIR --prompt-ids IDS
--max-new-tokens N --position-offset K --json``, its own process): once at position 0, once placed so its last new
token sits at the decoder's last position (max_positions - 1). The float64 truth is the no-cache recompute
(``decoder.oracle.decoders_float64``, one weight at a time, ``Stored64``; an int4 model's projections read back from
its own file, ``decoder.held``) of the prompt and every new token but the last, both generations in one pass, with
the positions the server fed (text only: M-RoPE's three equal rows, ``PositionInputs.text``); the logits of the
prompt's last slot onwards pick the next tokens. A generation agrees when every new token is the truth's argmax;
the server prints no logits, so a near tie cannot be told from an error here: the truth's smallest top-2 margin is
reported beside the verdict.

Shapes: b = 1; n prompt tokens, N new; input_ids [1, n + N - 1], position_ids [1, n + N - 1] or [3, 1, n + N - 1];
logits [1, N, vocab] over the slots n - 1 .. n + N - 2.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPT = list(range(1, 9))  # ids the written checkpoints' tokenizer reads (tools/write_checkpoint.py: t0..t255)
NEW = 16


def generated(folder: Path, prompt: list[int], new: int, offset: int) -> dict[str, Any]:
    """``ropeexport generate``'s JSON for the prompt at ``offset`` (module doc): its own process, as a user runs it."""
    command = [sys.executable, "-m", "ropeexport", "generate", str(folder), "--prompt-ids",
               ",".join(str(t) for t in prompt), "--max-new-tokens", str(new), "--position-offset", str(offset),
               "--json"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"ropeexport generate exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def judged(run: dict[str, Any], truth: np.ndarray, n: int) -> dict[str, Any]:
    """One generation's record: ``run``, ``ropeexport generate --json``'s object; ``truth`` [N, vocab], the float64
    logits of the slots that picked its N new tokens; ``n``, the prompt's length.
    """  # noqa: D205
    ordered = np.sort(truth, axis=-1)
    picks = truth.argmax(-1)
    same = [int(a) == int(b) for a, b in zip(picks, run["tokens"], strict=True)]
    return {"positions": f"{run['position_offset']}-{run['position_offset'] + n + len(run['tokens']) - 1}",
            "tokens": run["tokens"], "float64": [int(t) for t in picks], "agreement": f"{sum(same)}/{len(same)}",
            "first_divergence": None if all(same) else same.index(False),
            "margin_min": float((ordered[:, -1] - ordered[:, -2]).min()),
            "prefill_tokens_per_second": run["prefill_tokens_per_second"],
            "decode_ms_per_token": run["decode_ms_per_token"], "passed": all(same)}  # fmt: skip


def check(folder: Path, checkpoint: Path, prompt: list[int], new: int) -> dict[str, Any]:
    """Both generations of the module doc on the decoder in ``folder``, judged against one float64 pass."""
    import onnx

    from ropeexport.decoder.checkpoint import CheckpointWeights
    from ropeexport.decoder.held import held_weights
    from ropeexport.decoder.oracle import Feed, Stored64, decoders_float64
    from ropeexport.decoder.parts import position_pieces, weight_format
    from ropeexport.decoder.spec import DecoderSpec

    spec = DecoderSpec.from_dict(json.loads((folder / "decoder.json").read_text())["spec"])
    top = int(spec.position_spec().max_positions)
    start = time.perf_counter()
    runs = [generated(folder, prompt, new, offset) for offset in (0, top - len(prompt) - new)]
    served = time.perf_counter() - start
    n = len(prompt)
    feeds = []
    for run in runs:
        ids = np.array([run["prompt"] + run["tokens"][:-1]], np.int64)  # [1, n + N - 1]
        rows = run["position_offset"] + np.arange(ids.shape[1], dtype=np.int64)[None]
        feeds.append(Feed(ids, spec.positions.text(rows), np.ones_like(ids), n - 1))
    held = None
    if weight_format(spec).quantized:
        held, _ = held_weights(onnx.load(folder / "model.onnx", load_external_data=False), spec, folder)
    truths = decoders_float64(spec, Stored64(spec, CheckpointWeights(spec, checkpoint), held), feeds,
                              position_pieces(spec))  # fmt: skip
    records = [judged(run, truth[0], n) for run, truth in zip(runs, truths, strict=True)]
    return {"decoder": str(folder), "checkpoint": str(checkpoint), "prompt": prompt, "new": new,
            "generate_s": round(served, 1), "seconds": round(time.perf_counter() - start, 1), "runs": records,
            "passed": all(r["passed"] for r in records)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Command line (module doc); exit 1 when a generation's tokens differ from the truth's."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("decoder", type=Path, help="a built decoder's folder (ropeexport build --artifact decoder)")
    p.add_argument("checkpoint", type=Path, help="the checkpoint it was built from")
    p.add_argument("--prompt-ids", default=",".join(str(t) for t in PROMPT), help="comma-separated token ids")
    p.add_argument("--max-new-tokens", type=int, default=NEW)
    p.add_argument("--json", type=Path, help="write the records here")
    args = p.parse_args(argv)
    if not (args.decoder / "decoder.json").exists():
        p.error(f"decoder: {args.decoder} holds no decoder.json; give a folder ropeexport build wrote")
    if not all(t.strip().isdigit() for t in args.prompt_ids.split(",")):
        p.error(f"--prompt-ids: must be comma-separated token ids (ASCII digits), got {args.prompt_ids!r}")
    prompt = [int(t) for t in args.prompt_ids.split(",")]
    result = check(args.decoder, args.checkpoint, prompt, args.max_new_tokens)
    text = json.dumps(result, indent=1)
    if args.json is not None:
        args.json.write_text(text + "\n")
    print(text)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
