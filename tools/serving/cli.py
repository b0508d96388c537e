"""The command line: per checkpoint, make it, build every model, run the workers, write serving.json and .md."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.report import cpu_name

from .checkpoints import build_og, build_ours, make_checkpoint
from .limits import decode_bytes
from .report import compare, markdown, speed, targets
from .shapes import FULL, QUICK

TOOL = Path(__file__).resolve().parents[1] / "bench_serving.py"


def worker(kind: str, job: dict[str, Any], work: Path, tag: str, timeout: int = 3600) -> dict[str, Any]:
    """Run one job in its own process (``workers``); its result, or {"error": why} when it died."""
    job = job | {"result": str(work / f"{kind}-{tag}.result.json")}
    path = work / f"{kind}-{tag}.job.json"
    path.write_text(json.dumps(job))
    Path(job["result"]).unlink(missing_ok=True)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(TOOL), "--worker", kind, "--job", str(path)], capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip
    print(f"  {kind} {tag}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    if done.returncode != 0 or not Path(job["result"]).is_file():
        tail = [s for s in (done.stderr or done.stdout).strip().splitlines() if s.strip()]
        return {"error": f"worker died (rc {done.returncode}): {tail[-1][:300] if tail else ''}"}
    return json.loads(Path(job["result"]).read_text())


def entries(ours: dict[str, Any], og: dict[str, Any], dynamo: dict[str, Any], ckpt: Path) -> list[dict[str, Any]]:
    """The entries timed, each with its engine and what it is."""
    rows = [
        {"name": "ours-fused", "engine": "ours", "path": ours["fused"]["folder"],
         "what": "ropeexport decoder (fused RotaryEmbedding), DecoderSession: IO binding, preallocated cache"},
        {"name": "ours-gqa", "engine": "ours", "path": ours["gqa"]["folder"],
         "what": "ropeexport decoder (GroupQueryAttention form), DecoderSession"},
        {"name": "og-builder", "engine": "genai", "path": og["folder"],
         "what": "onnxruntime_genai.models.builder -p fp32 -e cpu, served by onnxruntime-genai"},
        {"name": "ours-fused@genai", "engine": "genai", "path": ours["fused"]["folder"],
         "what": "ropeexport fused decoder served by onnxruntime-genai (same engine as og-builder)"},
        {"name": "torch-dynamo", "engine": "dynamo", "path": dynamo.get("path"), "layers": dynamo.get("layers"),
         "what": "torch.onnx.export(dynamo=True) with its cache, ONNX Runtime, IO binding (present bound as past)"},
        {"name": "transformers", "engine": "eager", "path": str(ckpt),
         "what": "transformers eager PyTorch, fp32, sdpa attention, DynamicCache, inference_mode"},
        {"name": "ours-fused-nospin", "engine": "ours", "path": ours["fused"]["folder"], "spin": False,
         "what": "experiment: ours-fused with ORT's idle threads sleeping (DecoderSession(spinning=False))"},
        {"name": "ours-gqa-nospin", "engine": "ours", "path": ours["gqa"]["folder"], "spin": False,
         "what": "experiment: ours-gqa with ORT's idle threads sleeping"},
    ]  # fmt: skip
    if "error" in dynamo:
        rows[4]["error"] = dynamo["error"]
    return rows


def checkpoint(shape: str, work: Path, sizes: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Every figure of one checkpoint."""
    work.mkdir(parents=True, exist_ok=True)
    ckpt = work / "checkpoint"
    made = make_checkpoint(ckpt, shape, args.seed)
    print(f"{shape}: {made['parameters'] / 1e6:.1f}M parameters in {ckpt}", file=sys.stderr, flush=True)
    ours = {g: build_ours(ckpt, work / "ours", g) for g in ("fused", "gqa")}
    og = build_og(ckpt, work / "og")
    dynamo = worker("export", {"checkpoint": str(ckpt), "threads": args.threads, "out": str(work / "dynamo")}, work,
                    shape, timeout=1800)  # fmt: skip
    longest = max(sizes["near"], *sizes["prefill"], *sizes["past"])
    common = {"seed": args.seed, "vocab": made["config"]["vocab_size"], "longest": longest, "threads": args.threads}
    truth_job = common | {"checkpoint": str(ckpt), "ours": ours["fused"]["folder"], "og": og["folder"],
                          "near": sizes["near"], "far": sizes["far"], "tail": sizes["tail"]}  # fmt: skip
    truth = worker("truth", truth_job, work, shape)
    rows = entries(ours, og, dynamo, ckpt)
    live = [e for e in rows if "error" not in e]
    timing = worker("time", common | {"entries": live, "sizes": sizes, "made": made}, work, shape)
    result: dict[str, Any] = {"checkpoint": made, "builds": {"ours": ours, "og": og},
                              "dynamo_export": {k: v for k, v in dynamo.items() if k != "path"},
                              "truth": truth}  # fmt: skip
    figures = speed(timing, sizes) if "rounds" in timing else {}
    result["basis"], result["limit"] = figures.pop("_basis", None), figures.pop("_limit", {})
    truths = np.load(work / f"truth-{shape}.result.npz") if "error" not in truth else None
    got = np.load(work / f"time-{shape}.result.npz") if "rounds" in timing else None
    out: dict[str, Any] = {}
    for e in rows:
        item: dict[str, Any] = {"what": e["what"]}
        error = e.get("error") or timing.get("errors", {}).get(e["name"]) or timing.get("error")
        if error:
            out[e["name"]] = item | {"error": error}
            continue
        item |= figures.get(e["name"], {})
        item["accuracy"] = {}
        for label in ("near", "far"):
            key = f"{e['name']}|{label}"
            if got is not None and truths is not None and key in got.files:
                item["accuracy"][label] = compare(got[key], truths[label])
            else:
                item["accuracy"][label] = timing.get("accuracy_errors", {}).get(e["name"], {}).get(label, "-")
        if e["name"] == "og-builder" and isinstance(truth.get("tables", {}).get("far"), dict):
            table = truth["tables"]["far"]  # its logits at 100k need 100k real tokens: the stored rows instead
            if "max_abs" in table:
                item["accuracy"]["far"] = {"table_max_abs": table["max_abs"], "position": table["position"]}
        for label, why in (("far", "n/a: genai takes no position_ids"),):
            if e["engine"] == "genai" and isinstance(item["accuracy"].get(label), str):
                item["accuracy"][label] = why
        if e.get("spin") is False:
            out[e["name"]] = item  # the same model and memory as its entry with spinning
            continue
        mem = worker("memory", common | {"entry": e, "length": longest if args.quick else max(sizes["prefill"]),
                                         "steps": sizes["memory_steps"]}, work, f"{shape}-{e['name']}")  # fmt: skip
        item["memory"] = mem
        out[e["name"]] = item
    result["entries"] = out
    result["targets"] = targets(shape, out, sizes)
    result["decode_bytes"] = {f"past {p}": decode_bytes(made, p) for p in sizes["past"]}
    result["profiles"] = {}
    for e in rows[:2]:
        job = common | {"entry": e, "length": max(sizes["past"]), "steps": sizes["steps"]}
        result["profiles"][e["name"]] = worker("profile", job, work, f"{shape}-{e['name']}")
    return result


def versions() -> dict[str, str]:
    """Versions of everything measured."""
    import onnxruntime
    import onnxruntime_genai
    import torch
    import transformers

    from ropeexport.version import __version__

    return {"python": platform.python_version(), "ropeexport": __version__, "torch": torch.__version__,
            "transformers": transformers.__version__, "onnxruntime": onnxruntime.__version__,
            "onnxruntime_genai": onnxruntime_genai.__version__}  # fmt: skip


def main(argv: list[str] | None = None, description: str | None = None) -> int:
    """Parse flags, measure every checkpoint, write serving.json and serving.md under --out."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="folder for serving.json and serving.md (required)")
    parser.add_argument("--work", help="folder for checkpoints and models (kept; default: a temporary folder)")
    parser.add_argument("--quick", "--tiny", action="store_true", help="tiny checkpoint, few steps (the test)")
    parser.add_argument("--shapes", nargs="+", choices=("small", "100m", "tiny"), help="checkpoints to measure")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads of every engine (default 2)")
    parser.add_argument("--rounds", type=int, help="alternating rounds (default 9; quick 3)")
    parser.add_argument("--seed", type=int, default=0, help="weights and prompts seed")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--job", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        from .workers import main as work

        return work(args.worker, args.job)
    if not args.out:
        parser.error("--out is required: the folder for serving.json and serving.md")
    sizes = asdict(QUICK if args.quick else FULL) | ({"rounds": args.rounds} if args.rounds else {})
    shapes = args.shapes or (["tiny"] if args.quick else ["small", "100m"])
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        work = Path(args.work or tmp)
        results = {s: checkpoint(s, work / s, sizes, args) for s in shapes}
    command = "python tools/bench_serving.py " + " ".join(sys.argv[1:] if argv is None else argv)
    report = {"tool": "tools/bench_serving.py", "command": command, "versions": versions(), "cpu": cpu_name(),
              "cpu_count": os.cpu_count(), "threads": args.threads, "sizes": sizes,
              "load_average_after": [round(x, 2) for x in os.getloadavg()],
              "elapsed_s": round(time.perf_counter() - started, 1), "checkpoints": results}  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "serving.json").write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
    text = [f"Command: `{command}`  ", f"{report['cpu']}, {report['cpu_count']} cores, {args.threads} threads; "
            + ", ".join(f"{k} {v}" for k, v in report["versions"].items()), "",
            "Peak RSS: VmHWM of a fresh process that loads one entry and runs a prefill of the largest prompt plus "
            "decode steps: the whole process's high-water mark (Python, the libraries, the weights, the cache). "
            "ru_maxrss is in the JSON too, but Linux carries it across exec: it reports the parent's size.",
            ""]  # fmt: skip
    text += [markdown(s, r, sizes) for s, r in results.items()]
    (out / "serving.md").write_text("\n".join(text))
    print("\n".join(text))
    return 0
