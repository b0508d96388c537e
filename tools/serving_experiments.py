"""Why ropeexport's gqa decoder decodes behind onnxruntime-genai's builder model: node counts and two graph edits.

    python tools/bench_serving.py --shapes small --work /tmp/w --out /tmp/serving   # builds the models first
    python tools/serving_experiments.py --work /tmp/w/small --out /tmp/serving/experiments.json

Reads the models ``tools/bench_serving.py`` built under ``--work`` (``ours/*-gqa`` and ``og``), and:
- counts the nodes of each in ONNX Runtime's optimized graph (``SessionOptions.optimized_model_filepath``), in total
  and per layer (ours: nodes named ``layers.{i}/`` or reading ``layers.{i}.`` weights);
- writes two edited copies of our model: ``3d-rotary`` (each RotaryEmbedding fed the 3-D [b, s, heads x d] tensor
  straight from the Split, with its num_heads attribute, and its output fed straight to GroupQueryAttention: the
  Reshape / Transpose pairs around it gone) and ``3d-rotary-no-bias`` (also no attention_bias input to
  GroupQueryAttention, which a batch-1 prompt without padding, window or bias does not need);
- checks each edit generates the same greedy tokens as our model, then times decode (median ms/token of 16 steps
  after prompts of 128 and 2048 tokens) of ours, both edits and og-builder in alternating rounds in one process,
  and reports og-builder time / entry time per round (median and quartiles), as tools/bench_serving.py does.

The edited models are experiments, not artifacts: they are not verified against the float64 recompute (only their
tokens are compared with the verified model's) and are run through ``DecoderSession`` with its ONNX Runtime session
swapped (their files no longer match the folder's report.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

PASTS, STEPS, ROUNDS = (128, 2048), 16, 7


def optimized_nodes(model: Path, threads: int) -> Counter:
    """Op counts of ONNX Runtime's optimized graph of ``model`` (ORT_ENABLE_ALL, CPU)."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", "optimized.data")
        ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        graph = onnx.load(str(Path(tmp) / "optimized.onnx"), load_external_data=False).graph
        return Counter(n.op_type for n in graph.node)


def edit(source: Path, target: Path, drop_bias: bool) -> int:
    """Write the edited copy of ``source``'s model.onnx into ``target`` (module doc); how many rotary nodes moved."""
    model = onnx.load(str(source / "model.onnx"))
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list[Any]] = {}
    for n in graph.node:
        for name in n.input:
            consumers.setdefault(name, []).append(n)
    constants = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    moved = 0
    for node in [n for n in graph.node if n.op_type == "RotaryEmbedding"]:
        transpose = producer[node.input[0]]
        reshape = producer[transpose.input[0]]
        (back,) = consumers[node.output[0]]
        (flatten,) = consumers[back.output[0]]
        ops = (transpose.op_type, reshape.op_type, back.op_type, flatten.op_type)
        assert ops == ("Transpose", "Reshape", "Transpose", "Reshape"), ops
        heads = int(constants[reshape.input[1]][2])  # [0, 0, heads, d]
        node.input[0] = reshape.input[0]
        for attribute in [a for a in node.attribute if a.name == "num_heads"]:
            node.attribute.remove(attribute)
        node.attribute.append(helper.make_attribute("num_heads", heads))
        for n in graph.node:
            n.input[:] = [node.output[0] if name == flatten.output[0] else name for name in n.input]
        moved += 1
    if drop_bias:
        for n in graph.node:
            if n.op_type == "GroupQueryAttention" and len(n.input) > 10:
                n.input[10] = ""
    needed, kept = {o.name for o in graph.output}, []
    for n in reversed(list(graph.node)):  # drop what no output needs any more
        if any(o in needed for o in n.output):
            kept.append(n)
            needed.update(name for name in n.input if name)
    del graph.node[:]
    graph.node.extend(reversed(kept))
    target.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target / "model.onnx"), save_as_external_data=True, location="model.onnx.data")
    return moved


def main(argv: list[str] | None = None) -> int:
    """Count, edit, check tokens, time; write ``--out`` (JSON) and print a summary."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="one checkpoint's folder under tools/bench_serving.py's --work")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pasts", type=int, nargs="+", default=list(PASTS), help="prompt lengths (default 128 2048)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"alternating rounds (default {ROUNDS})")
    args = parser.parse_args(argv)
    import onnxruntime as ort
    from serving.engines import Genai

    from ropeexport.decoder.serve import DecoderSession
    from ropeexport.runtimes.iobinding import session_options

    work = Path(args.work)
    ours = next((work / "ours").glob("*-gqa"))
    og = work / "og"
    edits = {"3d-rotary": work / "experiments" / "3d-rotary", "3d-rotary-no-bias": work / "experiments" / "no-bias"}
    result: dict[str, Any] = {"command": " ".join(["python", "tools/serving_experiments.py", *sys.argv[1:]]),
                              "models": {}}  # fmt: skip
    for name, folder in edits.items():
        result["models"][name] = {"rotary_nodes_moved": edit(ours, folder, name.endswith("no-bias"))}
    layers = json.loads((ours / "decoder.json").read_text())["spec"]["num_layers"]
    for name, model in {"ours-gqa": ours / "model.onnx", "og-builder": og / "model.onnx",
                        **{k: v / "model.onnx" for k, v in edits.items()}}.items():  # fmt: skip
        counts = optimized_nodes(model, args.threads)
        total = sum(counts.values())
        row = result["models"].setdefault(name, {})
        row |= {"optimized_nodes": total, "per_layer": round(total / layers, 1), "ops": dict(counts.most_common())}
    sessions = {"ours-gqa": DecoderSession(ours, threads=args.threads)}
    for name, folder in edits.items():
        session = DecoderSession(ours, threads=args.threads)
        session.session = ort.InferenceSession(str(folder / "model.onnx"), session_options(args.threads, spinning=True),
                                               providers=["CPUExecutionProvider"])  # fmt: skip
        session.binding = session.session.io_binding()
        sessions[name] = session
    genai = Genai(str(og), args.threads)
    vocab = sessions["ours-gqa"].spec.vocab_size
    result["decode"] = {}
    for past in args.pasts:
        prompt = np.random.default_rng(past).integers(3, vocab, past).tolist()
        reference = sessions["ours-gqa"].generate(prompt, STEPS + 1).tokens
        same = {k: s.generate(prompt, STEPS + 1).tokens == reference for k, s in sessions.items()}
        times: dict[str, list[float]] = {k: [] for k in [*sessions, "og-builder"]}
        for r in range(args.rounds):
            order = list(times) if r % 2 else list(times)[::-1]
            for k in order:
                if k == "og-builder":
                    times[k].append(1000 * float(np.median(genai.generate(np.array(prompt), STEPS)[1])))
                else:
                    times[k].append(sessions[k].generate(prompt, STEPS + 1).decode_ms_per_token)
        og_ms = np.array(times["og-builder"][1:])  # the first round warms up
        result["decode"][f"past {past}"] = {
            k: {"ms": float(np.median(v[1:])), "same_tokens_as_ours": same.get(k),
                "og_over_entry": [float(q) for q in np.percentile(og_ms / np.array(v[1:]), (50, 25, 75))]}
            for k, v in times.items()
        }  # fmt: skip
    Path(args.out).write_text(json.dumps(result, indent=2))
    for name, model in result["models"].items():
        print(f"{name}: {model['optimized_nodes']} nodes in ORT's optimized graph ({model['per_layer']} per layer)")
    for past, row in result["decode"].items():
        for k, v in row.items():
            ratio = v["og_over_entry"]
            print(f"{past} {k}: {v['ms']:.2f} ms/token, og-builder / entry {ratio[0]:.3f} [{ratio[1]:.3f}, "
                  f"{ratio[2]:.3f}], same tokens: {v['same_tokens_as_ours']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
