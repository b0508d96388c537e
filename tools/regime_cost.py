"""The per-call cost of each batch row taking its own RoPE regime (issue 28), on a small Phi-3 LongRoPE decoder.

    python tools/regime_cost.py --baseline e4bc88e --out tools/figures      # regime-cost.json and regime-cost.md

The baseline revision (the whole call in the longest row's regime: one scalar L) is exported from a ``git archive``
of it, in a subprocess; this tree's export beside it. The decoder: Phi-3 with LongRoPE (original 1024 of 4096
positions), 4 layers, hidden 512, 8 query / 2 key-value heads, 1024 words, seeded weights (``seeded_weights``: the
same in both trees), fp32, in each form. Timed in one process, ONNX Runtime CPU with 2 intra-op threads: a decode
step (one token per row after a cache of 128 positions) at batch 1 and 4, the two models in alternating rounds
(A B, then B A), each round's figure the median of its block of calls; reported: the median over rounds of each, and
of the per-round ratio this / baseline. Also the graphs' node counts. The machine's load (1-minute load average
before and after) is written beside the figures: a shared machine's noise is of the same order as what is measured.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIG: dict[str, Any] = {
    "model_type": "phi3", "vocab_size": 1024, "hidden_size": 512, "num_attention_heads": 8,
    "num_key_value_heads": 2, "num_hidden_layers": 4, "intermediate_size": 1024, "max_position_embeddings": 4096,
    "original_max_position_embeddings": 1024, "pad_token_id": 0,
    "rope_scaling": {"type": "longrope", "short_factor": [1.0 + i / 64 for i in range(32)],
                     "long_factor": [2.0 + i / 8 for i in range(32)]},
}  # fmt: skip
EXPORT = """
import json, sys
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.checkpoint import seeded_weights
from ropeexport.decoder.export import build_decoder_graph
from ropeexport.graph.onnx_io import save_model
from pathlib import Path
config, graph, out = json.loads(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
spec, _ = resolve(DecoderRequest(config=config, name="phi3-small", graph=graph))
save_model(build_decoder_graph(spec, seeded_weights(spec), "seeded"), out)
"""
FORMS = ("fused", "decomposed", "tensorrt", "gqa")
PAST = 128


def export(tree: Path, graph: str, out: Path) -> Path:
    """The decoder of ``tree``'s code in ``out`` (a subprocess: the two trees never share a process)."""
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run([sys.executable, "-c", EXPORT, json.dumps(CONFIG), graph, str(out)], check=True, env=env,
                   cwd=tempfile.gettempdir())  # fmt: skip
    return out / "model.onnx"


def baseline_tree(revision: str, where: Path) -> Path:
    """``revision``'s files (git archive) under ``where``."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", revision], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(where, filter="data")
    return where


def decode_feeds(model: Path, batch: int) -> dict[str, np.ndarray]:
    """One token per row after ``PAST`` cached positions; rows at PAST (every row before the switch)."""
    import onnx

    proto = onnx.load(str(model), load_external_data=False)
    rng = np.random.default_rng(0)
    feeds: dict[str, np.ndarray] = {}
    for value in proto.graph.input:
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.name == "input_ids":
            feeds[value.name] = rng.integers(1, CONFIG["vocab_size"], (batch, 1))
        elif value.name == "position_ids":
            feeds[value.name] = np.full((batch, 1), PAST, np.int64)
        elif value.name == "attention_mask":
            feeds[value.name] = np.ones((batch, PAST + 1), np.int64)
        else:  # past_key_values.{i}.key / .value [b, KV, past, d]
            feeds[value.name] = rng.standard_normal((batch, dims[1], PAST, dims[3])).astype(np.float32)
    return feeds


def timed(session: Any, feeds: dict[str, np.ndarray], calls: int) -> float:
    """Median seconds of ``calls`` runs."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    """Export both, time them in alternating rounds, write the figures (module doc)."""
    import onnx
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="the git revision before the change")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=40, help="calls per block")
    parser.add_argument("--forms", default=",".join(FORMS))
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = baseline_tree(args.baseline, Path(tmp) / "baseline")
        for graph in args.forms.split(","):
            models = {"baseline": export(base, graph, Path(tmp) / "old" / graph),
                      "per-row": export(ROOT, graph, Path(tmp) / "new" / graph)}  # fmt: skip
            options = ort.SessionOptions()
            options.intra_op_num_threads = 2
            sessions = {k: ort.InferenceSession(str(m), options, providers=["CPUExecutionProvider"])
                        for k, m in models.items()}  # fmt: skip
            nodes = {k: sum(1 for _ in onnx.load(str(m), load_external_data=False).graph.node)
                     for k, m in models.items()}  # fmt: skip
            for batch in (1, 4):
                feeds = decode_feeds(models["per-row"], batch)
                for s in sessions.values():
                    timed(s, feeds, 5)  # warm-up
                per: dict[str, list[float]] = {k: [] for k in sessions}
                ratios = []
                for r in range(args.rounds):
                    order = list(sessions) if r % 2 == 0 else list(sessions)[::-1]
                    got = {k: timed(sessions[k], feeds, args.calls) for k in order}
                    for k, v in got.items():
                        per[k].append(v)
                    ratios.append(got["per-row"] / got["baseline"])
                rows.append({"graph": graph, "batch": batch, "nodes": nodes,
                             "ms": {k: 1000 * statistics.median(v) for k, v in per.items()},
                             "ratio": statistics.median(ratios),
                             "ratio_quartiles": [float(q) for q in np.percentile(ratios, [25, 75])]})  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
    result = {"command": " ".join(["python", "tools/regime_cost.py", *sys.argv[1:]]), "baseline": args.baseline,
              "config": CONFIG, "past": PAST, "rounds": args.rounds, "calls": args.calls,
              "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                          "load_1min_before": load_before, "load_1min_after": os.getloadavg()[0]},
              "onnxruntime": ort.__version__, "rows": rows}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "regime-cost.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# Per-row RoPE regimes: the cost of a decode step", "",
             f"`{result['command']}` (ONNX Runtime {ort.__version__} CPU, 2 threads; {os.cpu_count()} cores, 1-minute "
             f"load {load_before:.1f} before, {result['machine']['load_1min_after']:.1f} after). Phi-3 LongRoPE, "
             f"4 layers, hidden 512, one token per row after {PAST} cached positions; medians of {args.rounds} "
             "alternating rounds.", "",
             "| form | batch | nodes before -> after | ms before | ms after | after / before (quartiles) |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['graph']} | {r['batch']} | {r['nodes']['baseline']} -> {r['nodes']['per-row']} | "
                     f"{r['ms']['baseline']:.3f} | {r['ms']['per-row']:.3f} | {r['ratio']:.3f} "
                     f"({r['ratio_quartiles'][0]:.3f}-{r['ratio_quartiles'][1]:.3f}) |")  # fmt: skip
    (args.out / "regime-cost.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
