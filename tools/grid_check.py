"""A built Qwen-VL decoder fed image-grid positions, judged against the float64 truth at any size (a real one too).

    python tools/grid_check.py OUT/qwen3-vl-4b-decoder-fp32-int4-b32-gqa CHECKPOINT --json grid.json
    python tools/grid_check.py EXPORTED CHECKPOINT --request '{"graph": "gqa", "dtype": "fp32", "weight_format": "int4",
        "block_size": 32, "symmetric": true}'   # a folder of the export alone (no decoder.json): the build's request

The build's own scenarios are text only (three equal rows); ``tests/decoder/test_qwen_vl.py`` feeds image grids to
tiny models. This is that check where the whole model cannot be held: each prompt of ``PROMPTS`` (text around image
grids of (t, h, w) merged patches, ``families.rope.mrope.prompt_positions``, from its start position) is run by ONNX
Runtime with an empty cache, then one decode step at its cache position plus ``rope_deltas`` on every axis; the
float64 truth is the no-cache recompute (``decoder.oracle.decoders_float64``) of the prompt and the step together,
one weight at a time (``Stored64``; an int4 model's projections read back from its own file, ``decoder.held``), all
prompts in one pass. Each is judged as the build judges a call (max abs logit error over the truth's logit scale,
against ``decoder.verify.tolerance``), and the same tokens at text rows must give other logits (an axis read in
another's place, or ignored, would not).

A one-axis decoder (Gemma 4, say) gets the same prompts' lengths as text, the far one moved to end at its last
position: a real-size check whose truth holds a few tokens' logits, where the build's scenarios hold hundreds.

Shapes: b = 1, s the prompt's length, V the vocabulary; position_ids [3, 1, s] in, logits [1, s, V] out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (label, start position, segments): a grid after text at the start, and one near the far end of 262144 positions
# (a decode step past an image there lands at 262143 at most).
PROMPTS: list[tuple[str, int, list[tuple[str, Any]]]] = [
    ("text, a 4x6 image, text", 0, [("text", 4), ("image", (1, 4, 6)), ("text", 4)]),
    ("two images near the far end", 262144 - 24, [("text", 3), ("image", (1, 3, 5)), ("text", 2),
                                                  ("image", (1, 4, 4)), ("text", 3)]),
]  # fmt: skip


def check(folder: Path, checkpoint: Path, request: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every prompt of ``PROMPTS`` on the decoder in ``folder`` (module doc); a record per prompt. ``request``: the
    ``DecoderRequest`` fields it was built with, for a folder without decoder.json (``bench_sizes.py``'s export).
    """  # noqa: D205
    import onnx
    import onnxruntime as ort

    from ropeexport.decoder.checkpoint import CheckpointWeights
    from ropeexport.decoder.export import prefill_and_step
    from ropeexport.decoder.held import held_weights
    from ropeexport.decoder.oracle import Feed, Stored64, decoders_float64
    from ropeexport.decoder.parts import position_pieces, weight_format
    from ropeexport.decoder.spec import DecoderSpec
    from ropeexport.decoder.verify import tolerance
    from ropeexport.families.rope.mrope import prompt_positions, rope_deltas, text_rows

    if request is None:
        spec = DecoderSpec.from_dict(json.loads((folder / "decoder.json").read_text())["spec"])
    else:
        from ropeexport.decoder.build import DecoderRequest, resolve

        spec, _ = resolve(DecoderRequest(checkpoint=checkpoint, **request))
    one_axis = spec.positions.one_axis  # a text decoder: PROMPTS' lengths as text, the far one at its far end
    far = int(spec.position_spec().max_positions)
    prompts = [(label, min(first, far - 1 - len(prompt_positions(segments)[0])) if one_axis else first, segments)
               for label, first, segments in PROMPTS]  # fmt: skip
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    infer = lambda feed, run=session.run: dict(zip(names, run(None, feed), strict=True))  # noqa: E731
    feeds, ours = [], []
    for _, first, segments in prompts:
        pos = prompt_positions(segments, first)[:, None]  # [3, 1, s]
        s = pos.shape[-1]
        if one_axis:
            pos = np.arange(first, first + s, dtype=np.int64)[None]  # [1, s]
        ids = rng.integers(0, min(spec.vocab_size, 256), (1, s)).astype(np.int64)  # the tokenizer's words
        step = (np.full((1, 1), first + s, np.int64) if one_axis else
                np.full((3, 1, 1), s + rope_deltas(pos[:, 0]), np.int64))  # cache position + rope_deltas  # fmt: skip
        logits, nxt = prefill_and_step(infer, spec, ids, pos, step)
        ours.append(logits)
        full_ids = np.concatenate([ids, nxt], axis=1)
        full_pos = np.concatenate([pos, step], axis=-1)
        mask = np.ones((1, s + 1), np.int64)
        feeds.append(Feed(full_ids, full_pos, mask))
        if not one_axis:  # the same tokens at text rows
            feeds.append(Feed(full_ids, text_rows(np.arange(first, first + s + 1)[None]), mask))
    del session, infer  # its weights out of memory before the truth's pass
    served = time.perf_counter() - start
    held = None
    if weight_format(spec).quantized:
        held, _ = held_weights(onnx.load(folder / "model.onnx", load_external_data=False), spec, folder)
    weights64 = Stored64(spec, CheckpointWeights(spec, checkpoint), held)
    truths = decoders_float64(spec, weights64, feeds, position_pieces(spec))
    bound = tolerance(spec)
    records = []
    per = 1 if one_axis else 2  # feeds a prompt
    for k, (label, _, segments) in enumerate(prompts):
        truth = truths[per * k]
        scale = float(np.abs(truth).max())
        worst = float(np.abs(ours[k] - truth).max()) / scale
        moved = None if one_axis else float(np.abs(truths[per * k + 1] - truth).max()) / scale
        positions = feeds[per * k].position_ids
        label = f"{label}: its {positions.shape[-1] - 1} tokens as text" if one_axis else label
        records.append({"prompt": label, "segments": [[kind, size] for kind, size in segments],
                        "positions": f"{int(positions.min())}-{int(positions.max())}",
                        "tokens": int(positions.shape[-1]), "worst": worst, "tolerance": bound,
                        "agreement": int((ours[k].argmax(-1) == truth.argmax(-1)).sum()),
                        "text_rows_moved": moved,
                        "passed": worst <= bound and (moved is None or moved > 1e-2)})  # fmt: skip
    return {"decoder": str(folder), "checkpoint": str(checkpoint), "request": request, "served_s": round(served, 1),
            "seconds": round(time.perf_counter() - start, 1), "prompts": records,
            "passed": all(r["passed"] for r in records)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Command line (module doc); exit 1 when a prompt fails."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("decoder", type=Path, help="a built decoder's folder (decoder.json, model.onnx)")
    p.add_argument("checkpoint", type=Path, help="the checkpoint it was built from")
    p.add_argument("--json", type=Path, help="write the records here")
    p.add_argument("--request", type=json.loads, help="the build's DecoderRequest fields (JSON), for a folder "
                   "without decoder.json")  # fmt: skip
    args = p.parse_args(argv)
    if args.request is None and not (args.decoder / "decoder.json").exists():
        raise SystemExit(f"decoder: {args.decoder} holds no decoder.json; give a built decoder's folder or --request")
    result = check(args.decoder, args.checkpoint, args.request)
    text = json.dumps(result, indent=1)
    if args.json is not None:
        args.json.write_text(text + "\n")
    print(text)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
