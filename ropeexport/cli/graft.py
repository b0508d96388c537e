"""``ropeexport graft MODEL.onnx --hf-config config.json --out FIXED.onnx|FOLDER``: exact RoPE tables in a model.

Audits the model first (``ropeexport audit``; --spec FILE instead of --hf-config as there), and per layer gives each
wrong site's readers the exact values of their layers' encoding (a table two encodings share is split, the readers
of each rewired to their own; a layer without RoPE gets an identity table). It replaces every constant rotary table
(GroupQueryAttention's or RotaryEmbedding's caches, an If's LongRoPE branches, tables inside If branches and Loop
bodies) with the config's schedule in float64 rounded once to the table's dtype, keeping every node (same runtime,
same execution providers; a model's local functions kept as they were unless a site it repairs lies inside one: then
the model is written inlined, and said); cos/sin computed in the graph from position_ids (torch.onnx.export's form)
become exact tables gathered by position_ids (a LongRoPE switch on the call length included). Then proves the
result: the grafted model audited again, and both models run on one short call (8 tokens, positions 0..7): equal to
the dtype's noise. With --checkpoint (the folder the model was exported from: config.json and *.safetensors), both
models' logits are also judged against a float64 truth of the whole decoder: 8 tokens at positions 0..7, the last
at max_positions - 1, and L = original_max_position_embeddings and one past it (a LongRoPE switch's two sides). The
truth (--truth auto) is ropeexport's own float64 decoder for a model type it builds as a decoder, where a model with
a cache input is placed after random cached entries; for any other type transformers knows (Qwen3.5, Granite 4,
LFM2, Gemma 3n, ...) it is transformers' model in float64, eager, no cache, with exact float64 angles per layer type,
and the calls are placed by position_ids after no cached entry (or fed whole, for a model without position_ids).
Each verdict names its truth. A call whose cache (given and given back) would take more than --proof-cache-gib is
not run, and the report says so (Llama-3.2-1B's last position needs 17 GiB).

A model with genai_config.json beside it (onnxruntime-genai's builder's, a folder published for onnxruntime-genai) is
served from its folder: give --out a new folder (no .onnx suffix) and graft writes the whole folder there (the
grafted model under its own name with its data, genai_config.json, the tokenizer and every other file of the
original folder), so that og.Model(--out) loads it as written; --out FIXED.onnx writes the model file alone.

An ALiBi model's slopes (the one stored constant with a value per head the bias is computed from) are replaced by
the config's exact ones.

When the model's tables imply another schedule than the config's (scaling ignored, another factor, a LongRoPE
switch never taken, ...) the graft refuses (exit 2, nothing written) unless --trust config. Refused too: dynamic NTK
computed in the graph (its values depend on the call length), cos/sin computed inside a subgraph, a model the audit
could not check whole (a site it could not evaluate, a call length the model refuses, a reader ONNX Runtime will not
run), and a model ONNX Runtime refuses on the short call or, with --checkpoint, on the proof's calls (both run on the
original before anything is written).

Exit codes: 0 grafted and proven, 1 grafted but not proven (the report says what failed), 2 bad input (nothing
written; with --checkpoint also "cannot prove": the float64 recompute's logits on some call are not finite or all one
value, a tied int4 head whose scales are 0 say, so no position error could show in them), 3 proven on every call run
but a far call not run (its cache over --proof-cache-gib, or a model that takes neither a cache nor position_ids):
"proven up to position P; K far calls not run (cache would need N GiB, over --proof-cache-gib G)", never "proven"
for the whole range.

MODEL may be a folder published for transformers.js (an onnx-community folder: config.json beside onnx/model.onnx,
model_q4.onnx, ...): --variant FILE (or its dtype: q4, fp16, ...) names the model to graft (needed when there are
several), its config.json is the config unless --hf-config or --spec is given, and --out a new folder receives what
transformers.js loads: the grafted model at onnx/FILE (external data as FILE_data, named in config.json) and every
top-level file of MODEL (config, generation config, tokenizer). The other variants are not copied: not grafted.

Examples:
  ropeexport graft onnx-community/my-model --variant q4 --out my-model-fixed
  ropeexport graft og-llama/model.onnx --hf-config llama/config.json --out og-llama-fixed
  ropeexport graft og-llama/model.onnx --hf-config llama/config.json --out og-llama-fixed --trust config --json
  ropeexport graft exported.onnx --hf-config llama/config.json --out fixed.onnx
  ropeexport graft og-phi3/model.onnx --hf-config phi3/config.json --checkpoint phi3 --out fixed/model.onnx

"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ropeexport.api import graft
from ropeexport.cli import EXIT_SKIPPED, subcommand
from ropeexport.report.words import error


def add_parser(sub: Any) -> None:
    """Register ``graft``."""
    p = subcommand(sub, "graft", __doc__, run)
    p.add_argument("model", metavar="MODEL", help="the ONNX file (its external data beside it), or a folder published "
                   "for transformers.js (config.json, onnx/model*.onnx)")  # fmt: skip
    p.add_argument("--variant", metavar="FILE", help="in a transformers.js folder, the model to graft: its file name "
                   "in onnx/ (model_q4.onnx) or dtype (fp32, fp16, q4, ...)")  # fmt: skip
    source = p.add_mutually_exclusive_group()
    source.add_argument("--hf-config", metavar="CONFIG", help="the transformers config.json it came from")
    source.add_argument("--spec", metavar="FILE", help="its position spec where no config is at hand (.json or .toml): "
                        "one spec's fields, or {\"layers\": [name or null per layer], \"encodings\": {name: "
                        "fields}}")  # fmt: skip
    p.add_argument("--out", required=True, metavar="OUT", help="the grafted model to write, FIXED.onnx, or for a "
                   "model with genai_config.json beside it the new onnxruntime-genai folder (must not "
                   "exist)")  # fmt: skip
    p.add_argument("--trust", choices=["model", "config"], default="model",
                   help="which to follow when they disagree on the schedule (default model: refuse)")  # fmt: skip
    p.add_argument("--checkpoint", metavar="FOLDER",
                   help="the checkpoint the model was exported from: judge both models against the whole decoder's "
                   "float64 recompute at far positions")  # fmt: skip
    p.add_argument("--proof-cache-gib", type=float, default=4.0, metavar="GIB",
                   help="with --checkpoint: the most cache a far call may take (default 4); a call needing more is "
                   "not run")  # fmt: skip
    p.add_argument("--truth", choices=["auto", "oracle", "transformers"], default="auto",
                   help="with --checkpoint: what the logits are judged against (default auto: ropeexport's float64 "
                   "decoder where it builds the model type, else transformers' model in float64)")  # fmt: skip
    p.add_argument("--truth-gib", type=float, default=None, metavar="GIB",
                   help="with the transformers truth: the most memory its float64 model may take (default: what is "
                   "available now); a model estimated larger is refused before it is loaded")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    """Graft, prove, print; 1 when the proof fails, 3 when it passed on every call run but some were not run."""
    if args.hf_config is None and args.spec is None and not Path(args.model).is_dir():
        from ropeexport.errors import SpecError

        raise SpecError("hf_config", "give --hf-config (the transformers config the model came from) or --spec; "
                        "only a transformers.js folder's own config.json is read without one")  # fmt: skip
    result = graft(args.model, args.hf_config, args.out, args.trust, args.checkpoint, args.spec, args.proof_cache_gib,
                   args.truth, args.truth_gib, args.variant)  # fmt: skip
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(f"{result.path}: {len(result.replaced)} table pair(s) replaced, {result.text}")
        if result.genai is not None:
            print(f"  onnxruntime-genai folder {result.genai['folder']}: {', '.join(result.genai['files'])}")
        elif result.transformersjs is not None:
            print(f"  transformers.js folder {result.transformersjs['folder']}: "
                  f"{', '.join(result.transformersjs['files'])}")  # fmt: skip
        elif (Path(args.model).parent / "genai_config.json").is_file():
            print("  the model file alone: onnxruntime-genai loads a folder; give --out a new folder to write the "
                  "whole one")  # fmt: skip
        for item in result.replaced:
            if "node" in item:  # a fused reader re-paired (``pairing``)
                print(f"  {item['node']}: {item['replaced_by']}")
                continue
            print(f"  {item['cos']} / {item['sin']}: {item['rows']} rows, {item['dtype']}, regime of L = "
                  f"{item['regime_length']}")  # fmt: skip
        functions = result.functions or {}
        if functions.get("kept"):
            print(f"  model-local functions kept as they were: {', '.join(functions['kept'])}")
        elif functions.get("inlined"):
            print(f"  model-local functions inlined in the written model ({functions['why']}): "
                  f"{', '.join(functions['inlined'])}")  # fmt: skip
        print(f"  audit after: {result.after.verdict if result.after else 'not run'}")
        call = result.short_call
        if call:
            note = " (the schedule was changed on purpose: --trust config)" if result.changed_schedule else ""
            print(f"  short call ({call['tokens']} tokens) against the original: {error(call['relative'])} of the "
                  f"output scale{note}")  # fmt: skip
        if result.decoder is not None:
            truth = result.decoder["truth"]
            print(f"  whole decoder against {truth['words']} ({error(result.decoder['tolerance']['rel'])} of the "
                  f"logit scale; {truth['how']}):")  # fmt: skip
            for call in result.decoder["calls"]:
                why = {m.get("not_run") for m in call["models"].values()}
                if len(why) == 1 and None not in why:  # no model was run on it: why, once
                    print(f"    {call['call']} (positions {call['positions'][0]}..{call['positions'][1]}, "
                          f"{call['regime']}): not run: {why.pop()}")  # fmt: skip
                    continue
                got = "; ".join(
                    f"{label} {error(m['rel'])}{'' if m['passed'] else ' FAIL'}" if "rel" in m
                    else f"{label} cannot prove ({m['cannot_prove']})" if "cannot_prove" in m else f"{label} not run"
                    for label, m in call["models"].items()
                )
                print(f"    {call['call']} (positions {call['positions'][0]}..{call['positions'][1]}, "
                      f"{call['regime']}): {got}")  # fmt: skip
            use = result.decoder.get("use") or {}
            if "relative" in use:  # the original on the runs its users make, against the grafted model
                print(f"  as users run them ({use['how'].removeprefix('as users run it: ')}): the original differs "
                      f"from the grafted model by {error(use['relative'])} of the logit scale at {use['at']} "
                      f"(positions {use['positions'][0]}..{use['positions'][1]})")  # fmt: skip
            elif use:
                print(f"  as users run them: not run ({use['not_measured']})")
            if result.decoder.get("outside_encoding"):
                print(f"  {result.decoder['outside_encoding']}")
            if result.decoder.get("first_difference"):
                where = result.decoder["first_difference"]
                print(f"  on the call {where['call']!r}, {where['text']}")
    return 0 if result.proven else EXIT_SKIPPED if result.verdict == "partial" else 1
