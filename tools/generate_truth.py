"""A built decoder's greedy generation at its far positions, beside the float64 truth's greedy tokens.

    python tools/generate_truth.py DIR --prompt-ids 1,2,..,16 --max-new-tokens 16 --far --json OUT.json
    python tools/generate_truth.py DIR ... --cap-gib 7   # the worker's process tree killed past 7 GiB of RSS
    python tools/generate_truth.py DIR --prompt-ids 1,2,..,16 --engine onnxruntime-genai --json OUT.json
    python tools/generate_truth.py DIR --prompt-length 2032 --max-new-tokens 16 --engine onnxruntime-genai ...

``ropeexport generate``'s loop (``decoder.serve.DecoderSession``: ONNX Runtime, the cache kept, greedy) generates
``--max-new-tokens`` after the prompt, placed with ``--far`` so that the last new token sits at the decoder's last
position (max_positions - 1); then the float64 truth (``decoder.oracle.decoders_float64``, one no-cache pass over the
prompt and the tokens generated, on the weights the model holds: int4 read back from model.onnx,
``decoder.held.held_weights``, a mixture's experts quantized again one at a time) gives the logits at every slot from
the prompt's last on: its greedy token at each step, taken on the runtime's sequence so far, must be the token the
runtime picked. A step where they differ is reported with the float64 top-2 margin there (a near tie: within the
decoder's tolerance x the logit scale; anything else is a wrong token). Both tokens lists equal means the two greedy
generations are the same sequence (each step's prefix is the same).

``--engine onnxruntime-genai``: the generation is onnxruntime-genai's own loop (``genai_serve.genai_generate``, as
``ropeexport generate --engine onnxruntime-genai`` runs it), judged by the same truth. It places a prompt at positions
0 .. n - 1 only (no offset: ``--far`` is refused), so its far positions are reached by a long prompt:
``--prompt-length N`` is the prompt 1, 2, .., N (each id taken modulo the vocabulary), the truth's one pass then
covering all N + new - 1 slots. It stops early at its eos id: a shorter list is reported unequal.

Run as a worker under ``bench_sizes.measure`` (wall, peak RSS of the process tree, ``--cap-gib``); its JSON holds
both generations, the agreement, the runtime's prefill / decode speed, and the truth's seconds.
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


def work(
    folder: Path, prompt: list[int], new: int, far: bool, engine: str = "ort", wrap: bool = False
) -> dict[str, Any]:
    """The runtime's generation (``engine``: ``ort``, ropeexport's loop, or ``onnxruntime-genai``) and the float64
    truth's greedy tokens on it (module doc). ``wrap``: ids past the vocabulary taken modulo it (``--prompt-length``).
    """  # noqa: D205
    import onnx

    from ropeexport.decoder.held import held_weights
    from ropeexport.decoder.kind import checkpoint_of, read_record, weights_of
    from ropeexport.decoder.oracle import Feed, Stored64, decoders_float64
    from ropeexport.decoder.parts import position_pieces, weight_format
    from ropeexport.decoder.serve import DecoderSession
    from ropeexport.decoder.verify import tolerance

    session = DecoderSession(folder, threads=None, spinning=False)
    spec = session.spec
    if wrap:  # 1 .. vocab - 1 again (0 left out: often a special id)
        prompt = [1 + (t - 1) % (spec.vocab_size - 1) for t in prompt]
    offset = session.max_positions - len(prompt) - new if far else 0
    if engine == "onnxruntime-genai":
        from ropeexport.decoder.genai_serve import genai_generate

        generation = genai_generate(session, prompt, new, offset)  # an offset refused there, in one line
    else:
        generation = session.generate(prompt, new, offset)
    ran, limit = generation.to_dict(), session.max_positions
    del session
    record = read_record(folder)
    weights = weights_of(spec, checkpoint_of(record["weights"]))  # the checkpoint's, or the seeded draws
    held = None
    if weight_format(spec).quantized:
        held, _ = held_weights(onnx.load(folder / "model.onnx", load_external_data=False), spec, folder)
    tokens = list(generation.tokens)
    sequence = np.array([prompt + tokens[:-1]])
    s = sequence.shape[1]
    feed = Feed(sequence, offset + np.arange(s)[None], np.ones((1, s), np.int64), len(prompt) - 1)
    start = time.perf_counter()
    told = lambda i: print(f"float64: layer {i + 1} of {spec.num_layers}", flush=True)  # noqa: E731
    (logits,) = decoders_float64(spec, Stored64(spec, weights, held), [feed], position_pieces(spec), on_layer=told)
    seconds = time.perf_counter() - start
    logits = logits[0]  # [new, vocab]: the slots from the prompt's last on
    picked = logits.argmax(axis=-1)
    ordered = -np.sort(-logits, axis=-1)[:, :2]
    scale = float(np.abs(logits).max())
    bound = tolerance(spec) * scale
    differ = [{"step": k, "runtime": tokens[k], "float64": int(picked[k]), "margin": float(ordered[k, 0] -
               ordered[k, 1]), "near_tie": bool(ordered[k, 0] - ordered[k, 1] <= 2 * bound)}
              for k in range(len(tokens)) if int(picked[k]) != tokens[k]]  # fmt: skip
    return {"folder": str(folder), "model": spec.name, "engine": engine, "prompt_length": len(prompt),
            "position_offset": offset,
            "last_position": offset + len(prompt) + new - 1, "max_positions": limit,
            "runtime": {k: ran[k] for k in ("tokens", "prefill_tokens_per_second", "decode_ms_per_token", "regimes")},
            "float64_tokens": [int(t) for t in picked], "equal": not differ, "differ": differ,
            "min_top2_margin_over_scale": float((ordered[:, 0] - ordered[:, 1]).min() / scale),
            "truth_seconds": round(seconds, 1)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run the worker under ``bench_sizes.measure`` and write its JSON with the measurement (module doc)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path)
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--prompt-ids", help="comma-separated token ids")
    given.add_argument("--prompt-length", type=int, help="the prompt 1, 2, .., N (modulo the vocabulary)")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--far", action="store_true", help="the last new token at max_positions - 1")
    p.add_argument("--json", type=Path, help="write the result here")
    p.add_argument("--engine", default="ort", choices=("ort", "onnxruntime-genai"))
    p.add_argument("--cap-gib", type=float)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.prompt_length is not None and args.prompt_length < 1:
        p.error(f"--prompt-length must be at least 1, got {args.prompt_length}")
    if args.far and args.engine == "onnxruntime-genai":
        p.error("--far: onnxruntime-genai places a prompt at positions 0 .. n - 1 only; reach far positions with "
                "--prompt-length")  # fmt: skip
    prompt = ([int(t) for t in args.prompt_ids.split(",")] if args.prompt_ids is not None else
              list(range(1, args.prompt_length + 1)))  # fmt: skip
    if args.worker:
        wrap = args.prompt_length is not None
        print(json.dumps(work(args.folder, prompt, args.max_new_tokens, args.far, args.engine, wrap)))
        return 0
    sys.path.insert(0, str(ROOT / "tools"))
    from bench_sizes import _free, measure

    given = (
        ["--prompt-ids", args.prompt_ids]
        if args.prompt_ids is not None
        else ["--prompt-length", str(args.prompt_length)]
    )
    command = [sys.executable, str(Path(__file__).resolve()), str(args.folder), *given, "--max-new-tokens",
               str(args.max_new_tokens), "--engine", args.engine, "--worker",
               *(["--far"] if args.far else [])]  # fmt: skip
    log = (args.json or Path("generate_truth.json")).with_suffix(".log")
    load = lambda: subprocess.run(["cat", "/proc/loadavg"], capture_output=True, text=True).stdout.split()[:3]  # noqa: E731
    before, free = load(), _free()
    measured = measure(command, log, cap_bytes=None if args.cap_gib is None else int(args.cap_gib * 2**30))
    lines = [line for line in log.read_text().splitlines() if line.startswith("{")]
    out = {**(json.loads(lines[-1]) if lines else {}), "measured": measured, "load_before": before,
           "load_after": load(), "mem_available_before_gib": round(free["MemAvailable"] / 2**30, 1)}  # fmt: skip
    text = json.dumps(out, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    return 0 if out.get("equal") else 1


if __name__ == "__main__":
    raise SystemExit(main())
