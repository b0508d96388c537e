"""GPU check of the Triton RoPE kernel: correctness, bandwidth against a device copy, torch eager, TensorRT.

    python tools/gpu_check.py --out gpu-check.json               # on a CUDA host
    python tools/gpu_check.py --out gpu-check.json --block-s 16,32,64   # also sweep tokens per program

Shape: the prefill shape of the speed issue, batch 1, seq 2048, 32 query heads, 8 key heads, head_dim 128 (full
rotation), positions 0..2047 of a 4096-row table, fp32 and fp16, half and interleaved layouts.

For each case (layout x dtype x tensor, query and key being separate launches):
- correctness: the kernel's output against the eager reference module (run on the CPU), per-dtype tolerances;
- bandwidth: bytes = x read + output written + position ids + the table rows touched (cos and sin), divided by the
  median kernel time (CUDA events around the launch, 5 warm-up launches, 50 timed ones, L2 flushed before each by
  zeroing a 256 MiB buffer, then a GPU spin of 1e6 cycles queued so the host's launch is never on the clock: the
  flush alone left it there for small kernels); the same number of bytes is moved by
  a device-to-device copy in the same run (half read, half written) and timed the same way. Target: the kernel
  reaches >= 85% of the copy's bandwidth;
- torch CUDA eager (table gather + ``rotate_pairs``), timed the same way and checked against the reference.
TensorRT stage, when ``tensorrt`` imports: the fused, decomposed and plugin artifacts of the same shape are built
into engines with the project's TensorRT runner (Polygraphy loaders), run and checked; a failure to parse or build
(for example the fused graph before TensorRT 10.15) is recorded with its reason. Their wall time includes host <->
device copies and is not comparable with the kernel times.

Exit status: 0 when everything measured is correct (the bandwidth target is reported, not enforced, unless
``--require-target``) and also when there is no CUDA device (then nothing is measured: the JSON says so and no figure
is written); 1 when an output is wrong (or, with ``--require-target``, a case misses the bandwidth target).
Nothing in the JSON is estimated: every figure comes from this run.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from ropeexport.dtypes import DTYPES
from ropeexport.families.rope.reference import reference_module, rotate_pairs, table_regimes  # noqa: E402
from ropeexport.families.rope.spec import RopeSpec  # noqa: E402
from ropeexport.numerics import round_once  # noqa: E402
from ropeexport.tensors import to_torch  # noqa: E402
from ropeexport.verification.compare import TOLERANCES  # noqa: E402

BATCH, SEQ, HEADS, KV_HEADS, HEAD_DIM, MAX_POSITIONS = 1, 2048, 32, 8, 128, 4096
CHECKED_DTYPES = ("fp32", "fp16")
LAYOUTS = ("half", "interleaved")
TARGET = 0.85
WARMUP, REPEATS = 5, 50
FLUSH_BYTES = 256 * 2**20
# After the flush the GPU spins this many cycles (about 0.5 ms at 2 GHz) before the timed launch: the host's launch
# of a small kernel (Python checks plus Triton's launcher, tens of microseconds) is then queued before the GPU gets
# to it, so the events time the kernel and not the host. Without it a 4-microsecond kernel timed 13-89% of copy
# from one launch configuration to the next, at random (the first H200 run).
SPIN_CYCLES = 1_000_000


def environment() -> dict[str, Any]:
    """Versions and device of this run."""
    env: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    try:
        import tensorrt

        env["tensorrt"] = tensorrt.__version__
    except ImportError:
        env["tensorrt"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env["gpu"] = props.name
        env["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        env["sm_count"] = props.multi_processor_count
    return env


def median_ms(fn: Callable[[], object], flush: torch.Tensor) -> float:
    """Median GPU time of ``fn`` in ms over REPEATS runs after WARMUP, L2 flushed before each."""
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPEATS):
        flush.zero_()  # evicts L2
        torch.cuda._sleep(SPIN_CYCLES)  # keeps the GPU busy while the launch below is queued (SPIN_CYCLES)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(statistics.median(times))


def traffic_bytes(x: torch.Tensor, position_ids: torch.Tensor, rotary_dim: int, table_itemsize: int) -> int:
    """Bytes the rotation must move: x read, output written, position ids, and the cos/sin rows it touches."""
    rows = int(torch.unique(position_ids).numel())
    return 2 * x.numel() * x.element_size() + position_ids.numel() * 8 + 2 * rows * (rotary_dim // 2) * table_itemsize


def check(got: torch.Tensor, want: torch.Tensor, dtype: str) -> dict[str, Any]:
    """Max absolute error and pass/fail under the dtype's tolerance (atol and rtol both exceeded = failure)."""
    g, w = got.detach().cpu().double().numpy(), want.detach().cpu().double().numpy()
    err = np.abs(g - w)
    tol = TOLERANCES[dtype]
    bad = int(((err > tol.atol) & (err > tol.rtol * np.abs(w))).sum() + np.isnan(g).sum())
    return {"max_abs_err": float(err.max()), "failing_elements": bad, "correct": bad == 0}


def spec_for(layout: str, dtype: str, graph: str = "fused") -> RopeSpec:
    """The prefill geometry (full rotation) for a layout, dtype and graph style."""
    return RopeSpec(
        layout=layout,
        dtype=dtype,
        graph=graph,
        head_dim=HEAD_DIM,
        num_heads=HEADS,
        num_kv_heads=KV_HEADS,
        max_positions=MAX_POSITIONS,
    )


def inputs(spec: RopeSpec) -> dict[str, torch.Tensor]:
    """CPU query, key (standard normal, rounded to the dtype) and position_ids 0..SEQ-1."""
    g = torch.Generator().manual_seed(0)
    dtype = DTYPES[spec.dtype].torch
    return {
        "query": torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, generator=g).to(dtype),
        "key": torch.randn(BATCH, KV_HEADS, SEQ, HEAD_DIM, generator=g).to(dtype),
        "position_ids": torch.arange(SEQ, dtype=torch.int64)[None].repeat(BATCH, 1),
    }


def tensor_case(
    spec: RopeSpec,
    x: torch.Tensor,
    want: torch.Tensor,
    tables: tuple[torch.Tensor, torch.Tensor],
    pos: torch.Tensor,
    flush: torch.Tensor,
    block_sizes: list[int | None],
    warps: list[int | None],
) -> dict[str, Any]:
    """One tensor (query or key) of one layout x dtype: correctness, kernel / copy / eager bandwidth.

    The kernel is timed at each launch configuration swept: tokens per program x warps per program (None: the
    kernel's own choice).
    """
    from ropeexport.trt.triton_rope import NUM_WARPS, launch_config, rope_triton

    cos, sin = tables
    interleaved = spec.layout == "interleaved"
    out = torch.empty_like(x)
    nbytes = traffic_bytes(x, pos, spec.rotary_dim, cos.element_size())
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src), flush)
    copy_gbs = 2 * (nbytes // 2) / copy_ms / 1e6
    rope_triton(x, cos, sin, pos, interleaved=interleaved, rotary_dim=spec.rotary_dim, out=out)
    case: dict[str, Any] = {
        "layout": spec.layout,
        "dtype": spec.dtype,
        "shape": list(x.shape),
        "bytes": nbytes,
        "copy": {"ms": copy_ms, "gb_per_s": copy_gbs},
        "correctness": check(out, want, spec.dtype),
        "kernel": [],
    }
    for block_s, num_warps in itertools.product(block_sizes, warps):
        config = launch_config(x.shape[2], x.shape[3], spec.rotary_dim)
        if block_s is not None:
            config["BLOCK_S"] = block_s
        num_warps = NUM_WARPS if num_warps is None else num_warps
        launch = functools.partial(rope_triton, x, cos, sin, pos, interleaved=interleaved, rotary_dim=spec.rotary_dim,
                                   out=out, block_s=block_s, num_warps=num_warps)  # fmt: skip
        ms = median_ms(functools.partial(launch, check=False), flush)  # positions were checked by the first call
        gbs = nbytes / ms / 1e6
        case["kernel"].append(
            {
                "block_s": config["BLOCK_S"],
                "num_warps": num_warps,
                "ms": ms,
                "gb_per_s": gbs,
                "fraction_of_copy": gbs / copy_gbs,
                "meets_target": gbs / copy_gbs >= TARGET,
                "correct": check(out, want, spec.dtype)["correct"],
            }
        )
    eager_ms = median_ms(lambda: rotate_pairs(x, cos[pos], sin[pos], interleaved), flush)
    eager_out = rotate_pairs(x, cos[pos], sin[pos], interleaved)
    case["torch_eager"] = {"ms": eager_ms, "gb_per_s": nbytes / eager_ms / 1e6} | check(eager_out, want, spec.dtype)
    return case


def kernel_cases(flush: torch.Tensor, block_sizes: list[int | None], warps: list[int | None]) -> list[dict[str, Any]]:
    """Correctness and bandwidth of the kernel, the copy and torch eager, for every layout x dtype x tensor."""
    results = []
    for layout in LAYOUTS:
        for dtype in CHECKED_DTYPES:
            spec = spec_for(layout, dtype)
            ((cos64, sin64),) = table_regimes(spec)
            tables = (to_torch(round_once(cos64, dtype)).cuda(), to_torch(round_once(sin64, dtype)).cuda())
            feeds = inputs(spec)
            with torch.no_grad():  # on the CPU: the reference computes its tables with NumPy
                want = reference_module(spec)(feeds["query"], feeds["key"], position_ids=feeds["position_ids"])
            pos = feeds["position_ids"].cuda()
            for name, w in zip(("query", "key"), want, strict=True):
                x = feeds[name].cuda()
                case = {"tensor": name} | tensor_case(spec, x, w, tables, pos, flush, block_sizes, warps)
                results.append(case)
                best = max(case["kernel"], key=lambda k: k["fraction_of_copy"])
                print(
                    f"{layout:11s} {dtype} {name:5s}: kernel {best['gb_per_s']:7.1f} GB/s "
                    f"({100 * best['fraction_of_copy']:.1f}% of copy {case['copy']['gb_per_s']:.1f} GB/s, "
                    f"BLOCK_S {best['block_s']}, {best['num_warps']} warps), "
                    f"eager {case['torch_eager']['gb_per_s']:7.1f} GB/s, "
                    f"max err {case['correctness']['max_abs_err']:.3g}"
                )
    return results


def trt_stage() -> dict[str, Any]:
    """Engines from the fused, decomposed and plugin artifacts (half layout), run and checked; failures with reasons."""
    try:
        import tensorrt
    except ImportError as exc:
        return {"status": "skipped", "reason": f"TensorRT is not installed ({exc})"}
    from ropeexport.families.rope.export import build_rope_graph
    from ropeexport.families.rope.plugin import build_rope_plugin_graph
    from ropeexport.graph.onnx_io import save_model
    from ropeexport.runtimes.trt import TrtRunner
    from ropeexport.trt import plugin as trt_plugin

    stage: dict[str, Any] = {"status": "ran", "tensorrt": tensorrt.__version__, "artifacts": []}
    for dtype in CHECKED_DTYPES:
        for graph in ("fused", "decomposed", "plugin"):
            spec = spec_for("half", dtype, "fused" if graph == "plugin" else graph)
            entry: dict[str, Any] = {"graph": graph, "dtype": dtype}
            try:
                if graph == "plugin":
                    trt_plugin.register()
                    model = build_rope_plugin_graph(spec)
                else:
                    model = build_rope_graph(spec)
                feeds = {k: v.numpy() for k, v in inputs(spec).items()}  # fp32 / fp16: NumPy has both
                with torch.no_grad():
                    want = reference_module(spec)(
                        torch.from_numpy(feeds["query"]),
                        torch.from_numpy(feeds["key"]),
                        position_ids=torch.from_numpy(feeds["position_ids"]),
                    )
                with tempfile.TemporaryDirectory() as tmp:
                    save_model(model, Path(tmp))
                    start = time.perf_counter()
                    with TrtRunner(Path(tmp) / "model.onnx") as runner:
                        entry["build_s"] = time.perf_counter() - start
                        walls = []
                        for _ in range(10):
                            start = time.perf_counter()
                            got = runner.infer(feeds)
                            walls.append(1e3 * (time.perf_counter() - start))
                entry["infer_wall_ms_incl_host_copies"] = float(statistics.median(walls))
                for name, w in zip(("query_out", "key_out"), want, strict=True):
                    entry[name] = check(torch.from_numpy(np.asarray(got[name])), w, dtype)
                entry["status"] = "ok" if all(entry[n]["correct"] for n in ("query_out", "key_out")) else "wrong"
            except Exception as exc:  # a parser or builder refusal is a result to record, with its reason
                entry["status"] = "failed"
                entry["reason"] = f"{type(exc).__name__}: {exc}"
            print(f"TensorRT {graph:10s} {dtype}: {entry['status']} {entry.get('reason', '')}")
            stage["artifacts"].append(entry)
    return stage


def main(argv: list[str] | None = None) -> int:
    """Run the check; write the JSON; return the exit status (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("gpu-check.json"), help="results JSON (default %(default)s)")
    parser.add_argument("--block-s", default="", help="comma-separated tokens per program to sweep (default: auto)")
    parser.add_argument("--num-warps", default="", help="comma-separated warps per program to sweep (default: auto)")
    parser.add_argument("--require-target", action="store_true", help="exit 1 when a case misses 85%% of copy")
    parser.add_argument("--no-trt", action="store_true", help="skip the TensorRT stage")
    args = parser.parse_args(argv)
    block_sizes: list[int | None] = [int(b) for b in args.block_s.split(",") if b] or [None]
    warps: list[int | None] = [int(w) for w in args.num_warps.split(",") if w] or [None]

    result: dict[str, Any] = {
        "tool": "tools/gpu_check.py",
        "environment": environment(),
        "target_fraction_of_copy": TARGET,
    }
    if not torch.cuda.is_available():
        message = "no CUDA device: nothing measured"
        result |= {"measured": False, "status": "skipped", "reason": message}
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"gpu_check: {message} (wrote {args.out})", file=sys.stderr)
        return 0
    if os.environ.pop("TRITON_INTERPRET", None) not in (None, "0"):
        result["note"] = "TRITON_INTERPRET was set; unset for this run (the kernel must be compiled for the GPU)"
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    result["measured"] = True
    result["method"] = {
        "timing": f"CUDA events, median of {REPEATS} after {WARMUP} warm-up runs, L2 flushed "
                  f"({FLUSH_BYTES >> 20} MiB), then {SPIN_CYCLES} cycles of GPU spin so the launch is queued ahead",
        "bytes": "x read + output written + position_ids + cos/sin rows touched",
        "copy": "torch device-to-device copy of the same number of bytes (half read, half written)",
    }
    result["kernel"] = kernel_cases(flush, block_sizes, warps)
    result["tensorrt"] = {"status": "skipped", "reason": "--no-trt"} if args.no_trt else trt_stage()
    correct = all(c["correctness"]["correct"] and all(k["correct"] for k in c["kernel"]) for c in result["kernel"])
    correct &= all(a.get("status") != "wrong" for a in result["tensorrt"].get("artifacts", []))
    on_target = all(max(k["fraction_of_copy"] for k in c["kernel"]) >= TARGET for c in result["kernel"])
    result["status"] = "correct" if correct else "wrong"
    result["all_cases_meet_target"] = on_target
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"gpu_check: outputs {result['status']}, bandwidth target met in every case: {on_target} (wrote {args.out})")
    return 0 if correct and (on_target or not args.require_target) else 1


if __name__ == "__main__":
    sys.exit(main())
