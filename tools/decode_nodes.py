"""How many kernels ONNX Runtime runs a decode step of ropeexport's decoder, per graph form.

Profiled, not counted from the file: ORT's fusions and constant folding applied.

    python tools/decode_nodes.py            # the serving benchmark's "small" shape: 4 layers, hidden 512, GQA 8/2

A seeded Llama-3.1-style decoder of that shape is built per form, one token is fed after a 128-entry cache five
times with profiling on, and the kernel events of a run are counted (the builder's model of the same shape runs 49,
``tools/bench_serving.py``).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ropeexport.decoder.build import DecoderRequest, resolve  # noqa: E402
from ropeexport.decoder.export import build_decoder_graph, cache_names  # noqa: E402
from ropeexport.decoder.weights import geometry, seeded_weights  # noqa: E402
from ropeexport.graph.onnx_io import save_model  # noqa: E402

CONFIG = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
          "num_key_value_heads": 2, "intermediate_size": 1536, "vocab_size": 32000, "max_position_embeddings": 4096}
PAST, RUNS = 128, 5


def kernels(graph: str) -> int:
    """Kernels a decode step runs in the ``graph`` form."""
    spec, _ = resolve(DecoderRequest(config=CONFIG, name="nodes", graph=graph))
    folder = Path(tempfile.mkdtemp())
    save_model(build_decoder_graph(spec, seeded_weights(spec), "seeded"), folder)
    options = ort.SessionOptions()
    options.enable_profiling, options.profile_file_prefix = True, str(folder / "profile")
    session = ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])
    feeds = {"input_ids": np.array([[5]], np.int64), "attention_mask": np.ones((1, PAST + 1), np.int64),
             "position_ids": np.array([[PAST]], np.int64)}  # fmt: skip
    for i in range(spec.num_layers):
        _, kv, d = geometry(spec, i)
        key, value, _, _ = cache_names(i)
        feeds[key] = feeds[value] = np.zeros((1, kv, PAST, d), np.float32)
    for _ in range(RUNS):
        session.run(None, feeds)
    events = json.loads(Path(session.end_profiling()).read_text())
    return sum(e.get("cat") == "Node" and e["name"].endswith("_kernel_time") for e in events) // RUNS


if __name__ == "__main__":
    for form in ("gqa", "fused", "decomposed"):
        print(f"{form}: {kernels(form)} kernels a decode step")
