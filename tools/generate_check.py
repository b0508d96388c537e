"""``ropeexport generate`` on a built decoder, its greedy tokens judged against the float64 truth (any size).

    python tools/generate_check.py OUT/qwen3-vl-4b-decoder-fp32-int4-b32-gqa CHECKPOINT --json generate.json
    python tools/generate_check.py DIR --prompt-ids 1,2,..,16 --max-new-tokens 16 --far --cap-gib 7 --json OUT.json
    python tools/generate_check.py DIR --prompt-length 2032 --engine onnxruntime-genai --cap-gib 7 --json OUT.json

Each generation is the command a user runs (``python -m ropeexport generate DIR --prompt-ids IDS
--max-new-tokens N --position-offset K --json``, its own process): once at position 0, once placed so its last new
token sits at the decoder's last position (max_positions - 1); ``--far``: that one only. The float64 truth is the
no-cache recompute (``decoder.oracle.decoders_float64``, one weight at a time, ``Stored64``; an int4 model's
projections read back from its own file, ``decoder.held``) of the prompt and every new token but the last, every
generation in one pass, with the positions the server fed (text only: M-RoPE's three equal rows,
``PositionInputs.text``); the logits of the prompt's last slot onwards pick the next tokens. The weights are the
checkpoint given, else the ones decoder.json names (its checkpoint, or the seeded draws). A generation agrees when
every new token is the truth's argmax, taken on the server's own sequence so far; a step that differs is listed
with the truth's top-2 margin there and whether that is a near tie (within twice the decoder's tolerance x the
logit scale: ``decoder.verify.tolerance``); the server prints no logits, so a near tie cannot be told from an
error here. The truth's smallest top-2 margin is reported beside the verdict.

``--engine onnxruntime-genai``: each generation is ``ropeexport generate --engine onnxruntime-genai`` (its own
loop), judged by the same truth. It places a prompt at positions 0 .. n - 1 only (no offset: ``--far`` is refused,
the generation at 0 alone runs), so its far positions are reached by a long prompt: ``--prompt-length N`` is the
prompt 1, 2, .., N (each id taken into 1 .. vocab - 1), the truth's one pass covering all n + N - 1 slots.

``--cap-gib``: the check runs as a worker under ``bench_sizes.measure`` (wall, peak RSS of its process tree, which
is killed past the cap), and the measurement and the load are written beside the records.

Shapes: b = 1; n prompt tokens, N new; input_ids [1, n + N - 1], position_ids [1, n + N - 1] or [3, 1, n + N - 1];
logits [1, N, vocab] over the slots n - 1 .. n + N - 2.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPT = list(range(1, 9))  # ids the written checkpoints' tokenizer reads (tools/write_checkpoint.py: t0..t255)
NEW = 16

Served = Callable[[Path, list[int], int, int], dict[str, Any]]


def generated(folder: Path, prompt: list[int], new: int, offset: int, engine: str = "ort") -> dict[str, Any]:
    """``ropeexport generate``'s JSON for the prompt at ``offset`` in ``engine`` (module doc): its own process, as a
    user runs it.
    """  # noqa: D205
    command = [sys.executable, "-m", "ropeexport", "generate", str(folder), "--prompt-ids",
               ",".join(str(t) for t in prompt), "--max-new-tokens", str(new), "--position-offset", str(offset),
               "--engine", engine, "--json"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"ropeexport generate exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def judged(run: dict[str, Any], truth: np.ndarray, n: int, bound: float) -> dict[str, Any]:
    """One generation's record: ``run``, ``ropeexport generate --json``'s object; ``truth`` [N, vocab], the float64
    logits of the slots that picked its N new tokens; ``n``, the prompt's length; ``bound``, the decoder's tolerance
    over the logit scale (a differing step whose top-2 margin is within twice it x the scale is a near tie).
    """  # noqa: D205
    ordered = np.sort(truth, axis=-1)
    picks = truth.argmax(-1)
    margins = ordered[:, -1] - ordered[:, -2]  # [N]
    scale = float(np.abs(truth).max())
    same = [int(a) == int(b) for a, b in zip(picks, run["tokens"], strict=True)]
    differ = [{"step": k, "runtime": int(run["tokens"][k]), "float64": int(picks[k]), "margin": float(margins[k]),
               "near_tie": bool(margins[k] <= 2 * bound * scale)} for k in range(len(same)) if not same[k]]  # fmt: skip
    return {"positions": f"{run['position_offset']}-{run['position_offset'] + n + len(run['tokens']) - 1}",
            "tokens": run["tokens"], "float64": [int(t) for t in picks], "agreement": f"{sum(same)}/{len(same)}",
            "first_divergence": None if all(same) else same.index(False), "differ": differ,
            "margin_min": float(margins.min()), "margin_min_over_scale": float(margins.min() / scale),
            "prefill_tokens_per_second": run["prefill_tokens_per_second"],
            "decode_ms_per_token": run["decode_ms_per_token"], "passed": all(same)}  # fmt: skip


def check(folder: Path, checkpoint: Path | None, prompt: list[int], new: int, far: bool = False,
          serve: Served = generated, engine: str = "ort") -> dict[str, Any]:  # fmt: skip
    """The generations of the module doc on the decoder in ``folder`` (``far``: the far one only), judged against one
    float64 pass; ``checkpoint`` None: the weights decoder.json names. ``serve``: how a generation is run;
    ``engine``: ``ort`` or ``onnxruntime-genai`` (the generation at position 0 only: it takes no offset).
    """  # noqa: D205
    import onnx

    from ropeexport.decoder.held import held_weights
    from ropeexport.decoder.kind import checkpoint_of, read_record, weights_of
    from ropeexport.decoder.oracle import Feed, Stored64, decoders_float64
    from ropeexport.decoder.parts import position_pieces, weight_format
    from ropeexport.decoder.spec import DecoderSpec
    from ropeexport.decoder.verify import tolerance

    record = read_record(folder)
    spec = DecoderSpec.from_dict(record["spec"])
    top = int(spec.position_spec().max_positions)
    start = time.perf_counter()
    offsets = [0] if engine != "ort" else ([] if far else [0]) + [top - len(prompt) - new]
    if engine == "ort":
        runs = [serve(folder, prompt, new, offset) for offset in offsets]
    else:  # the default server in that engine; a test's own server as it is
        runs = [(generated(folder, prompt, new, o, engine) if serve is generated else serve(folder, prompt, new, o))
                for o in offsets]  # fmt: skip
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
    weights = weights_of(spec, checkpoint if checkpoint is not None else checkpoint_of(record["weights"]))
    told = lambda i: print(f"float64: layer {i + 1} of {spec.num_layers}", file=sys.stderr, flush=True)  # noqa: E731
    truths = decoders_float64(spec, Stored64(spec, weights, held), feeds, position_pieces(spec), on_layer=told)
    records = [judged(run, truth[0], n, tolerance(spec)) for run, truth in zip(runs, truths, strict=True)]
    return {"decoder": str(folder), "checkpoint": None if checkpoint is None else str(checkpoint),
            "weights": record["weights"], "engine": engine, "prompt": prompt, "new": new, "max_positions": top,
            "generate_s": round(served, 1), "seconds": round(time.perf_counter() - start, 1), "runs": records,
            "passed": all(r["passed"] for r in records)}  # fmt: skip


def measured(argv: list[str], log: Path, cap_gib: float) -> dict[str, Any]:
    """The check run again as a worker (``--worker``) under ``bench_sizes.measure``, capped at ``cap_gib``: its
    result with the measurement and the load before and after.
    """  # noqa: D205
    sys.path.insert(0, str(ROOT / "tools"))
    from bench_sizes import _free, measure

    load = lambda: Path("/proc/loadavg").read_text().split()[:3]  # noqa: E731
    before, free = load(), _free()
    command = [sys.executable, str(Path(__file__).resolve()), *argv, "--worker"]
    took = measure(command, log, cap_bytes=int(cap_gib * 2**30))
    lines = [line for line in log.read_text().splitlines() if line.startswith("{")]
    return {**(json.loads(lines[-1]) if lines else {"passed": False}), "measured": took, "load_before": before,
            "load_after": load(), "mem_available_before_gib": round(free["MemAvailable"] / 2**30, 1)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Command line (module doc); exit 1 when a generation's tokens differ from the truth's."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("decoder", type=Path, help="a built decoder's folder (ropeexport build --artifact decoder)")
    p.add_argument("checkpoint", type=Path, nargs="?", help="its checkpoint (default: decoder.json's)")
    p.add_argument("--prompt-ids", help=f"comma-separated token ids (default {','.join(str(t) for t in PROMPT)})")
    p.add_argument("--prompt-length", type=int, help="the prompt 1, 2, .., N (each id taken into the vocabulary)")
    p.add_argument("--engine", default="ort", choices=("ort", "onnxruntime-genai"),
                   help="ort (ropeexport's loop) or onnxruntime-genai (its own loop, positions from 0 only)")
    p.add_argument("--max-new-tokens", type=int, default=NEW)
    p.add_argument("--far", action="store_true", help="only the generation whose last token is at max_positions - 1")
    p.add_argument("--cap-gib", type=float, help="run as a measured worker, its process tree killed past this RSS")
    p.add_argument("--json", type=Path, help="write the records here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.prompt_length is not None and args.prompt_ids is not None:
        p.error("--prompt-length: give it or --prompt-ids, not both")
    if args.prompt_length is not None and args.prompt_length < 1:
        p.error(f"--prompt-length: must be at least 1, got {args.prompt_length}")
    if args.far and args.engine != "ort":
        p.error("--far: onnxruntime-genai places a prompt at positions 0 .. n - 1 only; reach far positions with "
                "--prompt-length")  # fmt: skip
    if not (args.decoder / "decoder.json").exists():
        p.error(f"decoder: {args.decoder} holds no decoder.json; give a folder ropeexport build wrote")
    if args.prompt_length is not None:  # 1 .. vocab - 1 again (0 left out: often a special id)
        vocab = int(json.loads((args.decoder / "decoder.json").read_text())["spec"]["vocab_size"])
        args.prompt_ids = ",".join(str(1 + t % (vocab - 1)) for t in range(args.prompt_length))
    args.prompt_ids = args.prompt_ids or ",".join(str(t) for t in PROMPT)
    if not all(t.strip().isdigit() for t in args.prompt_ids.split(",")):
        p.error(f"--prompt-ids: must be comma-separated token ids (ASCII digits), got {args.prompt_ids!r}")
    if args.max_new_tokens < 1:
        p.error(f"--max-new-tokens: must be at least 1, got {args.max_new_tokens}")
    if args.cap_gib is not None and not args.cap_gib > 0:
        p.error(f"--cap-gib: must be a positive number of GiB, got {args.cap_gib}")
    prompt = [int(t) for t in args.prompt_ids.split(",")]
    if args.cap_gib is not None and not args.worker:
        forwarded = [str(args.decoder), *([str(args.checkpoint)] if args.checkpoint else []),
                     "--prompt-ids", args.prompt_ids, "--max-new-tokens", str(args.max_new_tokens),
                     "--engine", args.engine, *(["--far"] * args.far)]  # fmt: skip
        result = measured(forwarded, (args.json or Path("generate_check.json")).with_suffix(".log"), args.cap_gib)
    else:
        result = check(args.decoder, args.checkpoint, prompt, args.max_new_tokens, args.far, engine=args.engine)
    text = json.dumps(result, indent=None if args.worker else 1)
    if args.json is not None and not args.worker:
        args.json.write_text(text + "\n")
    print(text)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
