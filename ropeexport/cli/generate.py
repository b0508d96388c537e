"""``ropeexport generate DIR``: greedy generation with a built decoder, as a server runs it.

DIR is a decoder folder (``ropeexport build --artifact decoder``); its files are checked against the sha256 its
report.json lists before anything runs. ONNX Runtime (CPU) runs model.onnx with IO binding and a cache allocated
once for the whole generation. The prompt is token ids (--prompt-ids) or text (--prompt, read with the folder's
tokenizer.json, copied from the checkpoint at build time). --position-offset K places the prompt at positions
K .. K+n-1 (the cache holds the prompt only): a long context exercised without computing it. Every token, the last
new one included, must sit below the decoder's max_positions: nothing is wrapped.

At a RoPE regime switch (LongRoPE past original_max_position_embeddings, dynamic NTK) the default policy re-prefill
recomputes the whole sequence so every cached key is rotated under the regime in effect (what the build verified
against the float64 recompute); --policy keep keeps the cache, as onnxruntime-genai does.

--engine onnxruntime-genai runs the folder in onnxruntime-genai instead (its own loop, from its genai_config.json):
the prompt at position 0, the keep policy, stopping at its end-of-sequence id. A decoder it cannot serve (DeepSeek V3 /
Kimi K2's latent attention, Gemma 4) is one line saying why, exit 2.

Prints the prompt and the new tokens (and text, with a tokenizer), prefill and decode speed, and the RoPE regime of
every step (runs of steps in one regime; --steps for one line per call); --json prints all of it as one object.

Examples:
  ropeexport generate out/llama-decoder-fp32-fused --prompt-ids 1,15043,29892 --max-new-tokens 32
  ropeexport generate out/phi-3-mini-128k-decoder-fp32-fused --prompt "The capital of" --position-offset 4000
  ropeexport generate out/llama-decoder-fp32-gqa --prompt-ids 5,6,7 --threads 2 --json
  ropeexport generate out/gpt_oss-decoder-fp32-int4-b16-gqa --prompt-ids 5,6,7 --engine onnxruntime-genai

Exit codes: 0 generated; 2 bad input (not a decoder folder, edited files, ids outside the vocabulary, positions past
max_positions, --prompt without a tokenizer or not UTF-8, numbers not in ASCII digits, a decoder or option
onnxruntime-genai cannot take); 3 onnxruntime-genai not installed.

"""

from __future__ import annotations

import argparse
import json
from itertools import groupby
from typing import Any

from ropeexport.cli import subcommand
from ropeexport.cli.options import ascii_int, int_flag
from ropeexport.decoder.genai_serve import ENGINES, genai_generate
from ropeexport.decoder.serve import DecoderSession, Generation
from ropeexport.decoder.spec import POLICIES
from ropeexport.errors import SpecError


def add_parser(sub: Any) -> None:
    """Register ``generate``."""
    p = subcommand(sub, "generate", __doc__, run)
    p.add_argument("folder", metavar="DIR", help="a decoder folder written by ropeexport build --artifact decoder")
    prompt = p.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt-ids", metavar="IDS", help="the prompt as comma-separated token ids: 1,2,3")
    prompt.add_argument("--prompt", metavar="TEXT", help="the prompt as text (needs tokenizer.json in DIR)")
    p.add_argument("--max-new-tokens", type=int_flag("max_new_tokens"), default=32, metavar="N",
                   help="tokens to generate (default 32)")  # fmt: skip
    p.add_argument("--position-offset", type=int_flag("position_offset"), default=0, metavar="K",
                   help="position of the first prompt token (default 0)")  # fmt: skip
    p.add_argument("--threads", type=int_flag("threads"), default=None, metavar="N",
                   help="ONNX Runtime intra-op threads (default: one per physical core)")  # fmt: skip
    p.add_argument("--policy", choices=POLICIES, default=None, help="the cache at a RoPE regime switch: "
                   "re-prefill (default, exact) or keep (onnxruntime-genai's, its only one)")  # fmt: skip
    p.add_argument("--engine", choices=ENGINES, default="ort", help="ort (default: ONNX Runtime, ropeexport's loop) "
                   "or onnxruntime-genai (its own loop, from the folder's genai_config.json)")  # fmt: skip
    p.add_argument("--stop-at-eos", action="store_true", help="stop at the checkpoint's eos_token_id (default: "
                   "generate all N)")  # fmt: skip
    p.add_argument("--steps", action="store_true", help="one line per model call")
    p.add_argument("--json", action="store_true", help="print the generation as JSON")


def _ids(text: str) -> list[int]:
    """``1,2,3`` (spaces around a comma allowed) -> [1, 2, 3]; SpecError naming --prompt-ids otherwise."""
    try:
        return [ascii_int(part.strip(" "), "prompt_ids") for part in text.split(",")]
    except SpecError:
        raise SpecError("prompt_ids", f"must be comma-separated integers in ASCII digits (0-9), got {text!r}") from None


def _regimes(result: Generation) -> list[str]:
    """One line per run of consecutive calls in one regime: their positions and how the run began."""
    lines = []
    for name, run in groupby(result.steps, key=lambda s: s.regime):
        calls = list(run)
        kinds = sorted({c.kind for c in calls})
        lines.append(f"  {name}: positions {calls[0].first}..{calls[-1].last}, {len(calls)} call(s) "
                     f"({', '.join(kinds)})")  # fmt: skip
    return lines


def run(args: argparse.Namespace) -> int:
    """Generate and print (module doc); bad input raises SpecError (exit 2)."""
    ort = args.engine == "ort"
    session = DecoderSession(args.folder, args.threads, runtime=ort)
    ids = session.prompt_of(_ids(args.prompt_ids) if args.prompt_ids is not None else None, args.prompt)
    if ort:
        result = session.generate(ids, args.max_new_tokens, args.position_offset, args.policy or "re-prefill",
                                  args.stop_at_eos)  # fmt: skip
    else:
        result = genai_generate(session, ids, args.max_new_tokens, args.position_offset, args.policy)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    n = len(result.prompt)
    offset = result.position_offset
    print(f"{result.model}: {n}-token prompt at positions {offset}..{offset + n - 1} of {result.max_positions}, "
          f"policy {result.policy}, threads {result.threads or 'default'}"
          f"{'' if ort else ', served by onnxruntime-genai'}")  # fmt: skip
    if result.positions:  # M-RoPE (Qwen-VL): what position_ids [3, batch, seq] held
        print(f"positions: {result.positions}")
    print(f"tokens: {' '.join(map(str, result.tokens))}")
    if result.text is not None:
        print(f"text: {result.text!r}")
    prefill = result.steps[0]
    print(f"prefill: {prefill.tokens} tokens in {1000 * prefill.seconds:.2f} ms "
          f"({result.prefill_tokens_per_second:.0f} tokens/s)")  # fmt: skip
    decode = result.decode_ms_per_token
    count = sum(s.kind == "decode" for s in result.steps)
    if decode is not None:
        print(f"decode: {count} steps, {decode:.2f} ms/token ({1000 / decode:.1f} tokens/s)")
    redone = [s for s in result.steps if s.kind == "re-prefill"]
    for s in redone:
        print(f"re-prefill at position {s.last}: {s.tokens} tokens in {1000 * s.seconds:.2f} ms (regime {s.regime})")
    if result.stopped_at_eos:
        print(f"stopped at eos after {len(result.tokens)} tokens")
    print("RoPE regime per call:")
    print("\n".join(_regimes(result)))
    if args.steps:
        print(f"  {'call':>5} {'kind':<10} {'positions':>15} {'regime':<16} {'ms':>9} {'token':>8}")
        for i, s in enumerate(result.steps):
            print(f"  {i:>5} {s.kind:<10} {f'{s.first}..{s.last}':>15} {s.regime:<16} {1000 * s.seconds:>9.3f} "
                  f"{s.token:>8}")  # fmt: skip
    return 0
