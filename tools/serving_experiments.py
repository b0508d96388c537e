"""Where ropeexport's gqa decoder's decode time goes, against onnxruntime-genai's builder model of the same checkpoint.

    python tools/bench_serving.py --shapes small --work /tmp/w --out /tmp/serving   # builds the models first
    python tools/serving_experiments.py --work /tmp/w/small --out /tmp/serving/experiments.json

Reads the models ``tools/bench_serving.py`` built under ``--work`` (``ours/*-decoder-fp32-gqa`` and ``og``) and
splits a decode step in two, each measured in alternating rounds in one process, reported as og-builder time / ours
per round (median and quartiles), as tools/bench_serving.py does:
- ``nodes``: each model's node count in ONNX Runtime's optimized graph (``SessionOptions.optimized_model_filepath``),
  in total, per layer (the median layer's: nodes named ``layers.{i}/`` or reading ``layers.{i}.`` weights) and once
  per call (the rest: embedding, position guard, mask, head);
- ``graph``: the model alone: ``InferenceSession.run`` of one decode step (same harness, numpy feeds, a cache of
  ``past`` tokens of random values, 2 threads, spinning) for both models: what the graphs cost ONNX Runtime;
- ``served``: the serving loops: ``DecoderSession.generate`` (IO binding, preallocated cache) against
  onnxruntime-genai's ``Generator`` (median ms/token of 16 steps after the prompt), with the share of our step
  spent outside ``run_with_iobinding`` (Python: binding, argmax, bookkeeping).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

PASTS, STEPS, ROUNDS, CALLS = (128, 2048), 16, 7, 20


def optimized_graph(model: Path, threads: int) -> onnx.GraphProto:
    """ONNX Runtime's optimized graph of ``model`` (ORT_ENABLE_ALL, CPU), initializers left out."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", "optimized.data")
        ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        return onnx.load(str(Path(tmp) / "optimized.onnx"), load_external_data=False).graph


def _decode_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes a decode step runs: an If with the nodes of its then_branch after it (ropeexport's gqa form branches
    on t > s, and a decode step, with a cache, takes then_branch), recursively.
    """  # noqa: D205
    out = []
    for node in graph.node:
        out.append(node)
        if node.op_type == "If":
            then = next(a.g for a in node.attribute if a.name == "then_branch")
            out += _decode_nodes(then)
    return out


def node_counts(graph: onnx.GraphProto, layers: int) -> dict[str, Any]:
    """Total, per-layer and once-per-call node counts of a decode step (``_decode_nodes``), and the op histogram."""
    named, weight = re.compile(r"layers\.(\d+)/"), re.compile(r"layers\.(\d+)\.")
    per_layer, layer_of = Counter(), {}
    nodes = _decode_nodes(graph)
    for node in nodes:  # topological order: a node without a name or weight of its own takes its input's layer
        found = named.search(node.name) or next((m for i in node.input for m in [weight.search(i)] if m), None)
        layer = int(found.group(1)) if found else next((layer_of[i] for i in node.input if i in layer_of), None)
        if layer is not None:
            per_layer[layer] += 1
            layer_of.update({o: layer for o in node.output})
    total = len(nodes)
    # ORT keeps one copy of what every layer computes alike (the mask, say), under the first layer's name: a
    # layer's own nodes are the median layer's count, the rest run once per call
    own = float(np.median([per_layer.get(i, 0) for i in range(layers)]))
    return {"optimized_nodes": total, "per_layer": own, "once_per_call": int(total - own * layers),
            "ops": dict(Counter(n.op_type for n in nodes).most_common())}  # fmt: skip


def step_feeds(session: Any, past: int, kv: int, d: int) -> dict[str, np.ndarray]:
    """One decode step's inputs for either model: token 5 at position ``past`` after ``past`` cached tokens."""
    rng = np.random.default_rng(past)
    feeds = {}
    for value in session.get_inputs():
        if value.name == "input_ids":
            feeds[value.name] = np.array([[5]], np.int64)
        elif value.name == "position_ids":
            feeds[value.name] = np.array([[past]], np.int64)
        elif value.name == "attention_mask":
            feeds[value.name] = np.ones((1, past + 1), np.int64)
        else:  # a cache input: [1, KV, past, d]
            feeds[value.name] = rng.standard_normal((1, kv, past, d)).astype(np.float32)
    return feeds


def ratios(times: dict[str, list[float]], peer: str) -> dict[str, Any]:
    """Median ms per entry and the peer's time / the entry's per round (median, quartiles); round 0 warms up."""
    base = np.array(times[peer][1:])
    return {k: {"ms": float(np.median(v[1:])),
                "og_over_entry": [float(q) for q in np.percentile(base / np.array(v[1:]), (50, 25, 75))]}
            for k, v in times.items()}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Count, time the graphs, time the serving loops; write ``--out`` (JSON) and print a summary."""
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
    from ropeexport.decoder.weights import geometry
    from ropeexport.runtimes.iobinding import session_options

    work = Path(args.work)
    ours_folder = next((work / "ours").glob("*-decoder-fp32-gqa"))  # the fp32 one, not an int4 beside it
    models = {"ours-gqa": ours_folder / "model.onnx", "og-builder": work / "og" / "model.onnx"}
    ours = DecoderSession(ours_folder, threads=args.threads)
    layers = ours.spec.num_layers
    _, kv, d = geometry(ours.spec)
    result: dict[str, Any] = {"command": " ".join(["python", "tools/serving_experiments.py", *sys.argv[1:]]),
                              "nodes": {k: node_counts(optimized_graph(v, args.threads), layers)
                                        for k, v in models.items()},
                              "graph": {}, "served": {}}  # fmt: skip
    plain = {k: ort.InferenceSession(str(v), session_options(args.threads, spinning=True),
                                     providers=["CPUExecutionProvider"]) for k, v in models.items()}  # fmt: skip
    genai = Genai(str(work / "og"), args.threads)
    inside: list[float] = []
    run = ours.session.run_with_iobinding

    def timed_run(binding: Any) -> None:
        start = time.perf_counter()
        run(binding)
        inside.append(time.perf_counter() - start)

    ours.session.run_with_iobinding = timed_run  # the ORT call's share of each served step
    for past in args.pasts:
        feeds = {k: step_feeds(s, past, kv, d) for k, s in plain.items()}
        graph_times: dict[str, list[float]] = {k: [] for k in plain}
        served: dict[str, list[float]] = {"ours-gqa": [], "og-builder": []}
        outside: list[float] = []
        prompt = np.random.default_rng(past).integers(3, ours.spec.vocab_size, past)
        for r in range(args.rounds):
            for k in list(plain) if r % 2 else list(plain)[::-1]:
                for _ in range(3):
                    plain[k].run(None, feeds[k])
                start = time.perf_counter()
                for _ in range(CALLS):
                    plain[k].run(None, feeds[k])
                graph_times[k].append(1000 * (time.perf_counter() - start) / CALLS)
            for k in list(served) if r % 2 else list(served)[::-1]:
                if k == "og-builder":
                    served[k].append(1000 * float(np.median(genai.generate(prompt, STEPS)[1])))
                    continue
                inside.clear()
                g = ours.generate(prompt.tolist(), STEPS + 1)
                served[k].append(g.decode_ms_per_token)
                steps = [s.seconds for s in g.steps[1:]]
                outside.append(1000 * float(np.median(np.array(steps) - np.array(inside[1:]))))
        result["graph"][f"past {past}"] = ratios(graph_times, "og-builder")
        result["served"][f"past {past}"] = ratios(served, "og-builder") | {
            "ours_outside_ort_ms": float(np.median(outside[1:]))
        }
    Path(args.out).write_text(json.dumps(result, indent=2))
    for name, counts in result["nodes"].items():
        print(f"{name}: {counts['optimized_nodes']} nodes in ORT's optimized graph ({counts['per_layer']} per layer, "
              f"{counts['once_per_call']} once per call)")  # fmt: skip
    for part in ("graph", "served"):
        for past, row in result[part].items():
            for k in ("ours-gqa", "og-builder"):
                v = row[k]
                q = v["og_over_entry"]
                print(f"{part} {past} {k}: {v['ms']:.2f} ms/token, og-builder / entry {q[0]:.3f} [{q[1]:.3f}, "
                      f"{q[2]:.3f}]")  # fmt: skip
            if part == "served":
                print(f"served {past}: ours outside run_with_iobinding {row['ours_outside_ort_ms']:.3f} ms/step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
