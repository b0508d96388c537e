"""One call of a built mixture-of-experts decoder's scenario, recomputed three ways, to tell a routing near tie from a
fault (issue 40's loose end: transformers' fp16 Gemma 4 mixture 0.37 of the logit scale off at one decode call).

The call is rerun through the built model (``greedy.run_scenario``, as the build ran it), then its last slot's logits
are computed by ropeexport's float64 twin on the weights as the graph holds them (an fp16 build: rounded to fp16) and
on the checkpoint's own weights, and by transformers in float64 (eager experts) on the checkpoint; each twin's router
near ties within 1e-3 are listed (layer, row, slot, margin). A near tie whose two experts swap between the rounded and
the checkpoint weights is what moves such a call; a fault would leave the twin on the checkpoint's weights off
transformers too. Run by hand (about a minute on 2 cores, after the build):

    python tools/routing_tie_check.py DECODER_FOLDER CHECKPOINT --scenario decode-64 --call 53
"""  # noqa: D205

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    """Print the three comparisons and the near ties of the chosen call."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a built decoder folder (build --artifact decoder)")
    parser.add_argument("checkpoint", type=Path, help="the checkpoint it was built from")
    parser.add_argument("--scenario", default="decode-64")
    parser.add_argument("--call", type=int, required=True, help="the call's index in the scenario (report.json)")
    args = parser.parse_args(argv)

    import numpy as np
    import torch
    import transformers

    from ropeexport.decoder.build import DecoderRequest, resolve
    from ropeexport.decoder.checkpoint import load_checkpoint
    from ropeexport.decoder.greedy import run_scenario
    from ropeexport.decoder.oracle import Routing, decoder_float64, stored_float64
    from ropeexport.decoder.parts import position_pieces
    from ropeexport.decoder.scenarios import scenarios
    from ropeexport.decoder.spec import DecoderSpec
    from ropeexport.runtimes.ort import OrtRunner

    built = DecoderSpec.from_dict(json.loads((args.folder / "decoder.json").read_text())["spec"])
    length = built.position_spec().max_positions
    request = {"checkpoint": args.checkpoint, "graph": built.graph, "max_positions": length}
    stored, _ = resolve(DecoderRequest(dtype=built.dtype, **request))
    plain, _ = resolve(DecoderRequest(dtype="fp32", **request))
    runner = OrtRunner(args.folder / "model.onnx", providers=["CPUExecutionProvider"])
    call = run_scenario(runner.infer, built, next(s for s in scenarios(built) if s.name == args.scenario))[args.call]
    feed = {"input_ids": call.input_ids, "position_ids": call.fed_positions, "attention_mask": call.attention_mask}
    model = transformers.AutoModelForCausalLM.from_pretrained(str(args.checkpoint), attn_implementation="eager",
                                                              dtype=torch.float64, experts_implementation="eager")
    with torch.no_grad():
        theirs = model.eval()(**{k: torch.from_numpy(v) for k, v in feed.items()}, use_cache=False).logits
    theirs = theirs[:, -1].double().numpy()  # [b, vocab]: the call's last slot
    print(f"{args.scenario} call {args.call}: positions {call.first}..{call.input_ids.shape[1] - 1}")
    for label, spec in ((f"the weights as the {built.dtype} graph holds them", stored), ("the checkpoint's", plain)):
        ties: list[tuple[int, int, int, float]] = []
        ours = decoder_float64(spec, stored_float64(spec, load_checkpoint(spec, args.checkpoint)), call.input_ids,
                               call.fed_positions, call.attention_mask, pieces=position_pieces(spec),
                               routing=Routing(frozenset(), 1e-3, ties))[:, -1]  # fmt: skip
        rel = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
        print(f"  float64 twin on {label}: {rel:.3g} of the logit scale off transformers float64; router near ties "
              f"within 1e-3 (layer, row, slot, margin): {ties}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
