"""``ropeexport package DECODER --for transformers.js --out DIR``: a built decoder as another engine loads it.

DECODER is a decoder folder (``ropeexport build --artifact decoder``), checked against the sha256 its manifest lists.
DIR receives the folder transformers.js 4.3.1 (``@huggingface/transformers``) loads with
``AutoModelForCausalLM.from_pretrained``: config.json, generation_config.json, the tokenizer files the decoder has,
onnx/model.onnx (model_fp16.onnx for fp16, model_q4.onnx / model_q4f16.onnx for int4; external data as
model.onnx_data), the batch dimension named batch_size as transformers.js sizes its first cache from it. It is written
whole or not at all, with a manifest.json naming the decoder (its name, folder, model sha256 and spec) and every file's
sha256, and reference.json: the decoder's own greedy tokens on two prompts (12 tokens at position 0, and a long one).

The package is then run and its tokens compared with the decoder's: in ONNX Runtime (Python), and in transformers.js
itself in Node (onnxruntime-node, CPU) through tools/transformersjs/generate.mjs, tokens equal and each step's logits
within twice the decoder's tolerance of the logit scale. Without node or the npm packages (``npm ci`` in
tools/transformersjs) that engine is skipped with the reason and the exit is 3. ``ropeexport verify DIR`` checks the
hashes and runs the same comparison again.

glm4 and exaone4, which transformers.js 4.3.1 has no class for, are packaged with config.json's model_type glm and
exaone: those classes are bare, so transformers.js runs the decoder as it is (input_ids, attention_mask, position_ids
and the cache), and exaone's config gets the num_layers it reads; the output says so, and the manifest and report keep
the decoder's own type with why (their model_type). gemma3_text is packaged as gemma2, whose class is bare too: under
its own type transformers.js feeds position_ids counted from 1 (transformers and the decoder count from 0), so a prompt
filling the context would be fed max_positions, which the decoder refuses. gemma4_text is packaged as transformers.js
runs Gemma 4: config.json a gemma4 wrapper (architectures Gemma4ForConditionalGeneration) around the text config, and
the decoder split in two, onnx/embed_tokens.onnx (input_ids to inputs_embeds, and per_layer_inputs with per-layer input
embeddings) and onnx/decoder_model_merged.onnx fed them. The Qwen-VL text decoders (qwen2_vl_text, qwen2_5_vl_text,
qwen3_vl_text) are packaged as qwen2 or qwen3, their text model but for multimodal RoPE: under their own wrapper's type
transformers.js places text-only decode steps 2 x the prompt length past transformers' positions
(src/models/qwen2_vl/modeling_qwen2_vl.js:44), while the plain class feeds position_ids [b, s] from 0, which one Expand
in front of the graph turns into the three equal rows [3, b, s] of a text-only prompt. Text only: image positions cannot
be fed (ropeexport builds no vision tower), and the output says so. An int4 mixture of experts is packaged in both its
forms (ONNX Runtime's QMoE in the gqa form, a MatMulNBits per expert elsewhere), but QMoE at an accuracy level
(--accuracy-level 1-4) is refused: onnxruntime-node 1.30, which transformers.js runs on, has no accuracy_level on QMoE
and refuses the model; the message names the forms that load (--accuracy-level 0, or --graph fused). Refused too: a
DECODER that is not a decoder folder or whose files changed, a DIR that exists and is not a package.

Examples:
  ropeexport package out/llama-decoder-fp32-fused --for transformers.js --out web/llama
  ropeexport verify web/llama

Written whole or not at all: kill -9 at any moment leaves the package that was at DIR (or nothing). A package whose
check fails does not replace one that passed: DIR stays as it was and the failed one is kept at _failed/NAME beside it.
Two package commands writing one DIR at once: one writes; the other, kept waiting over 3 s, is refused in one line
(exit 2), and one that gets in after it finished writes as any later command does. DIR is one whole package.

Exit codes: 0 written and checked; 1 written, the tokens differ; 2 bad input; 3 written, transformers.js could not
run here.

"""

from __future__ import annotations

import argparse
from typing import Any

from ropeexport.cli import EXIT_SKIPPED, subcommand
from ropeexport.decoder.transformersjs import ENGINES


def add_parser(sub: Any) -> None:
    """Register ``package``."""
    p = subcommand(sub, "package", __doc__, run)
    p.add_argument("decoder", metavar="DECODER", help="a decoder folder written by ropeexport build --artifact decoder")
    p.add_argument("--for", dest="engine", choices=ENGINES, required=True, help="the engine: transformers.js")
    p.add_argument("--out", required=True, metavar="DIR", help="the package's folder (new, or a package to rewrite)")
    p.add_argument("--replace", action="store_true", help="replace a package at DIR made from another decoder")


def print_result(result: Any) -> int:
    """One line per engine and prompt; the exit code (0 passed, 1 failed, 3 an engine skipped)."""
    report = result.report
    print(f"{'PASS' if result.passed else 'FAIL'} {report['engine']} package of {report['decoder']['name']} "
          f"({report['model']}, bound {report['bound']:.1e} of the logit scale, {result.seconds:.1f}s)")  # fmt: skip
    types = report.get("model_type") or {}  # absent from a report written before it was recorded
    if types.get("why"):
        print(f"  config.json says model_type {types['config']!r}, the decoder is {types['decoder']!r}: "
              f"{report['engine']} has no class for {types['decoder']!r} and runs it under the class of "
              f"{types['config']!r} (why: report.json's model_type)")  # fmt: skip
    if types.get("text_only"):
        print(f"  {types['text_only']}")
    for engine in report["engines"]:
        if engine["status"] == "skipped":
            print(f"  {engine['name']}: skipped: {engine['reason']}")
            continue
        for row in engine["prompts"]:
            worst = "" if row["worst_rel"] is None else f", worst logit error {row['worst_rel']:.2e}"
            same = ("same tokens" if row["first_difference"] is None
                    else f"tokens differ at step {row['first_difference']}")  # fmt: skip
            print(f"  {engine['name']}: {row['name']} ({row['prompt_tokens']}-token prompt, {len(row['expected'])} "
                  f"steps): {'ok  ' if row['passed'] else 'FAIL'} {same}{worst}")  # fmt: skip
        if engine.get("reason"):
            print(f"  {engine['name']}: raised: {engine['reason']}")
    print(f"  -> {result.path}")
    if result.kept is not None:
        print(f"  a package that passed was there: it stays at {result.kept}; this one is kept apart at {result.path}")
    if not result.passed:
        return 1
    return EXIT_SKIPPED if result.skipped else 0


def run(args: argparse.Namespace) -> int:
    """Write the package and print the check (module doc)."""
    from ropeexport.api.packages import package

    return print_result(package(args.decoder, args.out, args.engine, args.replace))
