"""One mixture-of-experts layer in int4, QMoE against a MatMulNBits per expert: bytes and time per token.

Each shape's layer is built twice from the same seeded weights (block 32, symmetric, fp32 activations): the experts
packed for ``com.microsoft.QMoE`` (``components.qmoe`` / ``grouped_qmoe``) and the portable graph with one
``MatMulNBits`` per expert (``components.linear``); both run on ONNX Runtime's CPU provider, a decode call (1 token,
the median of ``--decode`` calls) and a prefill of 64 tokens (the median of ``--prefill``), after 3 warm-up calls. The
initializers' bytes are the graph's own; the two outputs' largest difference over the output's scale is printed
beside (they hold the same values). The load average is recorded before and after: on a shared machine the times
are inflated, their ratio only roughly held.

    python tools/bench_int4_experts.py             # writes tools/figures/int4-experts.json, prints the table
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

# name: (hidden, expert width, experts, chosen, router): gpt-oss-20b's router and expert at a third of its width,
# Qwen3-30B-A3B's mixture whole, DeepSeek-V2-Lite's mixture whole (one group, 2 shared experts)
SHAPES = {
    "gpt-oss-like (n 1024, m 1024, 32 experts, 4 chosen)": (1024, 1024, 32, 4, "gpt_oss"),
    "Qwen3-30B-A3B's (n 2048, m 768, 128 experts, 8 chosen)": (2048, 768, 128, 8, "qwen3"),
    "DeepSeek-V2-Lite's (n 2048, m 1408, 64 experts, 6 chosen, 2 shared)": (2048, 1408, 64, 6, "deepseek"),
}
TOKENS = 64


def _layer(n: int, m: int, E: int, k: int, kind: str, qmoe_form: bool) -> tuple[Any, int]:
    """(the ONNX model of one layer x [1, s, n] -> y, its initializers' bytes)."""
    from onnx import helper

    from ropeexport.components import qmoe
    from ropeexport.components.grouped_moe import GroupedRouter, shared_moe
    from ropeexport.components.grouped_qmoe import grouped_qmoe, interleaved
    from ropeexport.components.linear import WeightFormat, is_weight
    from ropeexport.components.moe import MoESpec, moe, to_graph
    from ropeexport.graph.onnx_io import GraphBuilder, make_model
    from ropeexport.numerics import round_once

    rng = np.random.default_rng(1)
    normal = lambda *shape: rng.standard_normal(shape) / np.sqrt(shape[-2] if len(shape) > 1 else 1)  # noqa: E731
    w = {"router_proj": normal(n, E), "experts_gate_proj": normal(E, n, m), "experts_up_proj": normal(E, n, m),
         "experts_down_proj": normal(E, m, n)}  # fmt: skip
    fmt, g = WeightFormat.int4("fp32", 32), GraphBuilder()
    if kind == "deepseek":
        w |= {"router_correction": 0.1 * rng.standard_normal(E), "shared_gate_proj": normal(n, 2 * m),
              "shared_up_proj": normal(n, 2 * m), "shared_down_proj": normal(2 * m, n)}  # fmt: skip
        router = GroupedRouter(E, k, 1, 1, True, 1.0)
        if qmoe_form:
            arrays = interleaved(w)
        else:
            arrays = {a: v for a, v in w.items() if a not in ("experts_gate_proj", "experts_up_proj")}
            arrays["experts_gate_up_proj"] = np.concatenate([w["experts_gate_proj"], w["experts_up_proj"]], -1)
    else:
        if kind == "gpt_oss":
            w |= {"router_bias": 0.1 * rng.standard_normal(E), "experts_gate_bias": 0.1 * rng.standard_normal((E, m)),
                  "experts_up_bias": 0.1 * rng.standard_normal((E, m)),
                  "experts_down_bias": 0.1 * rng.standard_normal((E, n))}  # fmt: skip
            spec = MoESpec(E, k, m, 1.702, 7.0, "fp32", "contrib" if qmoe_form else "portable")
        else:
            spec = MoESpec(E, k, m, 0.0, 0.0, "fp32", "contrib" if qmoe_form else "portable", router="topk_softmax",
                           expert="gated", bias=False)  # fmt: skip
        arrays = to_graph(spec, w)
    names = {}
    for name, value in arrays.items():
        if qmoe_form and name in ("experts_gate_up_proj", "experts_down_proj"):
            names[name] = qmoe.store(g, fmt, name, value)
        elif is_weight(name):
            names[name] = fmt.store(g, name, value)
        else:
            names[name] = g.const(name, round_once(value, "fp32"))
    if kind == "deepseek":
        out = (grouped_qmoe(g, router, "fp32", "x", names) if qmoe_form
               else shared_moe(g, router, m, "fp32", "x", names))  # fmt: skip
    else:
        out = moe(g, spec, "x", names)
    g.name_output(out, "y")
    io = helper.make_tensor_value_info
    graph = helper.make_graph(g.nodes, "layer", [io("x", 1, [1, "s", n])], [io("y", 1, None)], g.initializers)
    return make_model(graph, 23, {}, {"com.microsoft": 1}), sum(t.ByteSize() for t in g.initializers)


def _time(model: Any, n: int, tokens: int, reps: int) -> tuple[float, np.ndarray]:
    """(median seconds of a call on ``tokens`` tokens, its output)."""
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, tokens, n)).astype(np.float32)
    for _ in range(3):
        y = session.run(None, {"x": x})[0]
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        session.run(None, {"x": x})
        times.append(time.perf_counter() - start)
    return float(np.median(times)), y


def main() -> None:
    """Measure every shape both ways; write the JSON and print the table."""
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decode", type=int, default=30, help="decode calls timed (median)")
    parser.add_argument("--prefill", type=int, default=5, help="prefills of 64 tokens timed (median)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "figures" / "int4-experts.json")
    args = parser.parse_args()
    rows = []
    load_before = os.getloadavg()
    for label, (n, m, E, k, kind) in SHAPES.items():
        outputs = {}
        for way, fused in (("QMoE", True), ("MatMulNBits per expert", False)):
            model, size = _layer(n, m, E, k, kind, fused)
            decode, y1 = _time(model, n, 1, args.decode)
            prefill, y2 = _time(model, n, TOKENS, args.prefill)
            outputs[way] = (y1, y2)
            rows.append({"shape": label, "way": way, "bytes": size, "decode_ms": 1e3 * decode,
                         "prefill_ms_per_token": 1e3 * prefill / TOKENS})  # fmt: skip
        (a1, a2), (b1, b2) = outputs.values()
        agree = max(float(np.abs(a1 - b1).max() / np.abs(b1).max()), float(np.abs(a2 - b2).max() / np.abs(b2).max()))
        rows[-1]["agree_rel"] = rows[-2]["agree_rel"] = agree
    record = {"onnxruntime": ort.__version__, "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
              "load_before": load_before, "load_after": os.getloadavg(), "rows": rows}  # fmt: skip
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"onnxruntime {record['onnxruntime']}; {record['machine']}; load {load_before} -> {record['load_after']}")
    print("| shape | experts held as | bytes | decode (1 token) | prefill (64 tokens), per token |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['shape']} | {r['way']} | {r['bytes'] / 2**20:.1f} MiB | {r['decode_ms']:.2f} ms | "
              f"{r['prefill_ms_per_token']:.2f} ms |")  # fmt: skip


if __name__ == "__main__":
    main()
