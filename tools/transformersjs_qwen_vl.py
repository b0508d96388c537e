"""Why a Qwen-VL text decoder is packaged for transformers.js 4.3.1 as qwen2 / qwen3, not as its own type: measured.

transformers.js runs Qwen2-VL / Qwen2.5-VL / Qwen3-VL text-only as ``Qwen2_5_VLForCausalLM`` (model_type
``qwen2_5_vl``) from two files: ``onnx/embed_tokens.onnx`` (input_ids -> inputs_embeds) and
``onnx/decoder_model_merged.onnx`` (inputs_embeds, attention_mask, position_ids [3, batch, seq], the cache). It
computes the [3, b, s] positions itself (``models/qwen2_vl/modeling_qwen2_vl.js``). This script splits a built
qwen2_5_vl_text decoder so (its embedding Gather becomes the first file; the decoder reads inputs_embeds instead),
runs it in transformers.js (Node, tools/transformersjs/generate.mjs), and runs the decoder itself in ONNX Runtime
twice: with the positions transformers (Python) gives (prefill 0..n-1, then n, n+1, ...), and with the ones
transformers.js 4.3.1's text-only ``_get_text_only_rope_index`` implies (its rope delta is max + 1 + n where
transformers' is max + 1 - n, so each decode step sits 2n further). It prints the three token lists.

    python tools/transformersjs_qwen_vl.py DECODER_DIR CHECKPOINT_DIR WORK_DIR [--prompt-ids 1,5,9,3,7]

Measured on the tiny qwen2_5_vl checkpoint of tests/decoder/tiny.py (5-token prompt, 8 tokens): transformers.js
[26, 88, 9, 59, 59, 81, 58, 59]; the decoder with transformers' positions (what ``ropeexport generate`` gives)
[26, 59, 59, 59, 59, 59, 59, 33]; the decoder with positions shifted by 2n [26, 88, 9, 59, 59, 81, 58, 59]. The first
token (prefill) agrees; from the first decode step transformers.js's positions are not transformers'. The package
``ropeexport package --for transformers.js`` writes (model_type qwen2, position_ids [b, s] made three rows in the
graph: ``decoder.transformersjs_rows``), run by tools/transformersjs/generate.mjs on the same prompt, gave
[26, 59, 59, 59, 59, 59, 59, 33], the decoder's. tests/decoder/test_transformersjs.py keeps the positions
transformers.js feeds this split measured
(``test_transformersjs_places_qwen_vl_decode_steps_where_transformers_does_only_as_packaged``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent


def split(decoder: Path, checkpoint: Path, out: Path) -> Path:
    """The two-file folder transformers.js loads for model_type qwen2_5_vl (module doc)."""
    shutil.rmtree(out, ignore_errors=True)
    (out / "onnx").mkdir(parents=True)
    model = onnx.load(str(decoder / "model.onnx"))
    for value in (*model.graph.input, *model.graph.output):
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param == "batch":
                dim.dim_param = "batch_size"  # what transformers.js sizes its first cache from
    gather = next(n for n in model.graph.node if n.op_type == "Gather" and "input_ids" in n.input)
    weight = next(i for i in model.graph.initializer if i.name == gather.input[0])
    hidden = weight.dims[1]
    embed = helper.make_graph(
        [helper.make_node("Gather", [weight.name, "input_ids"], ["inputs_embeds"])], "embed_tokens",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"])],
        [helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, ["batch_size", "sequence_length", hidden])],
        [weight])  # fmt: skip
    onnx.save(helper.make_model(embed, opset_imports=[helper.make_opsetid("", 21)], ir_version=model.ir_version),
              str(out / "onnx" / "embed_tokens.onnx"))  # fmt: skip
    index = next(i for i, v in enumerate(model.graph.input) if v.name == "input_ids")
    del model.graph.input[index]
    model.graph.input.insert(index, helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT,
                                                                  ["batch_size", "seq", hidden]))  # fmt: skip
    gather.op_type = "Identity"  # the embedding's output now comes in
    del gather.input[:]
    del gather.attribute[:]
    gather.input.append("inputs_embeds")
    if not any(weight.name in n.input for n in model.graph.node):  # a tied head still reads it
        model.graph.initializer.remove(weight)
    onnx.save(model, str(out / "onnx" / "decoder_model_merged.onnx"))
    shutil.copyfile(checkpoint / "config.json", out / "config.json")  # the wrapper's: text_config, vision_config
    (out / "generation_config.json").write_text("{}\n")
    return out


def ort_tokens(model: Path, prompt: list[int], count: int, shift: int) -> list[int]:
    """Greedy tokens of the decoder in ONNX Runtime, three equal position rows, each decode step ``shift`` further."""
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    n = len(prompt)
    feeds: dict[str, np.ndarray] = {"input_ids": np.array([prompt], np.int64),
                                    "attention_mask": np.ones((1, n), np.int64),
                                    "position_ids": np.tile(np.arange(n, dtype=np.int64), (3, 1, 1))}  # fmt: skip
    for name in (k for k in inputs if k.startswith("past_key_values")):
        feeds[name] = np.zeros([1 if d == "batch" else 0 if isinstance(d, str) else d for d in inputs[name].shape],
                               np.float32)  # fmt: skip
    tokens: list[int] = []
    for _ in range(count):
        out = dict(zip(names, session.run(None, feeds), strict=True))
        tokens.append(int(out["logits"][0, -1].argmax()))
        total = n + len(tokens) - 1
        feeds = {"input_ids": np.array([[tokens[-1]]], np.int64), "attention_mask": np.ones((1, total + 1), np.int64),
                 "position_ids": np.full((3, 1, 1), total + shift, np.int64)}  # fmt: skip
        feeds |= {k: out[k.replace("past_key_values", "present")] for k in inputs if k.startswith("past_key_values")}
    return tokens


def main() -> int:
    """Split, run in transformers.js and in ONNX Runtime, print the three token lists (module doc)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("decoder")
    parser.add_argument("checkpoint")
    parser.add_argument("work")
    parser.add_argument("--prompt-ids", default="1,5,9,3,7")
    parser.add_argument("--max-new-tokens", type=int, default=8)
    args = parser.parse_args()
    prompt = [int(t) for t in args.prompt_ids.split(",")]
    folder = split(Path(args.decoder), Path(args.checkpoint), Path(args.work) / "package")
    done = subprocess.run(["node", str(HERE / "transformersjs" / "generate.mjs"), str(folder.resolve()), "--prompt-ids",
                           args.prompt_ids, "--max-new-tokens", str(args.max_new_tokens)], capture_output=True,
                          text=True, check=True)  # fmt: skip
    model = Path(args.decoder) / "model.onnx"
    print("transformers.js 4.3.1:                 ", json.loads(done.stdout.strip().splitlines()[-1])["tokens"])
    print("decoder, transformers' positions:      ", ort_tokens(model, prompt, args.max_new_tokens, 0))
    print("decoder, decode positions shifted by 2n:", ort_tokens(model, prompt, args.max_new_tokens, 2 * len(prompt)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
