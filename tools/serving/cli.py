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

from .checkpoints import BUILDER_INT4, OWN_INT4, build_og, build_ours, make_checkpoint
from .limits import decode_bytes
from .report import OURS, PEER, compare, markdown, speed, targets
from .shapes import FULL, QUICK

TOOL = Path(__file__).resolve().parents[1] / "bench_serving.py"


def worker(
    kind: str, job: dict[str, Any], work: Path, tag: str, timeout: int = 3600, reuse: bool = False
) -> dict[str, Any]:
    """Run one job in its own process (``workers``); its result, or {"error": why} when it died.

    ``reuse``: a result the same job already wrote under ``work`` is read back instead (``--work`` kept): for what
    is computed, not timed (the dynamo export, the float64 truth), which no change to ours alters.
    """
    job = job | {"result": str(work / f"{kind}-{tag}.result.json")}
    path = work / f"{kind}-{tag}.job.json"
    if reuse and path.is_file() and json.loads(path.read_text()) == job and Path(job["result"]).is_file():
        found = json.loads(Path(job["result"]).read_text())
        if "error" not in found:
            print(f"  {kind} {tag}: reused", file=sys.stderr, flush=True)
            return found
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


ENTRIES = ("ours-fused", "ours-gqa", "og-builder", "ours-fused@genai", "torch-dynamo", "transformers",
           "ours-fused-nospin", "ours-gqa-nospin", "ours-int4-fused", "ours-int4-gqa", "og-builder-int4",
           "ours-int4-a0-gqa")  # every entry, in the order ``entries`` lists them  # fmt: skip


def entries(ours: dict[str, Any], og: dict[str, Any], dynamo: dict[str, Any], ckpt: Path) -> list[dict[str, Any]]:
    """The entries timed, each with its engine and what it is; an int4 entry says ``int4`` (which float64 truth
    judges it) and ``peer`` (the entry its speed ratios are taken against: the builder's model of the same form).
    """  # noqa: D205
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
        {"name": "ours-int4-fused", "engine": "ours", "path": ours["int4-fused"]["folder"], "int4": True,
         "peer": "og-builder-int4", "what": "ropeexport decoder, int4 as the builder writes it (block 32, symmetric, "
         "accuracy level 4, lm_head included), fused form, DecoderSession"},
        {"name": "ours-int4-gqa", "engine": "ours", "path": ours["int4-gqa"]["folder"], "int4": True,
         "peer": "og-builder-int4", "what": "ropeexport decoder, int4 as the builder writes it, gqa form"},
        {"name": "og-builder-int4", "engine": "genai", "path": og["int4"]["folder"], "int4": True,
         "what": "onnxruntime_genai.models.builder -p int4 -e cpu (its defaults), served by onnxruntime-genai"},
        {"name": "ours-int4-a0-gqa", "engine": "ours", "path": ours["int4-a0-gqa"]["folder"], "int4": True,
         "peer": "og-builder-int4", "what": "ropeexport decoder, int4 at its own defaults (block 32, symmetric, "
         "accuracy level 0: fp32 activations), gqa form"},
    ]  # fmt: skip
    if "error" in dynamo:
        rows[4]["error"] = dynamo["error"]
    assert tuple(r["name"] for r in rows) == ENTRIES
    return rows


def checkpoint(shape: str, work: Path, sizes: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Every figure of one checkpoint."""
    work.mkdir(parents=True, exist_ok=True)
    ckpt = work / "checkpoint"
    made = make_checkpoint(ckpt, shape, args.seed)
    print(f"{shape}: {made['parameters'] / 1e6:.1f}M parameters in {ckpt}", file=sys.stderr, flush=True)
    ours = {g: build_ours(ckpt, work / "ours", g) for g in ("fused", "gqa")}
    ours |= {f"int4-{g}": build_ours(ckpt, work / "ours", g, BUILDER_INT4) for g in ("fused", "gqa")}
    ours["int4-a0-gqa"] = build_ours(ckpt, work / "ours", "gqa", OWN_INT4)
    og = build_og(ckpt, work / "og") | {"int4": build_og(ckpt, work / "og-int4", "int4")}
    dynamo = worker("export", {"checkpoint": str(ckpt), "threads": args.threads, "out": str(work / "dynamo")}, work,
                    shape, timeout=1800, reuse=True)  # fmt: skip
    longest = max(sizes["near"], *sizes["prefill"], *sizes["past"])
    common = {"seed": args.seed, "vocab": made["config"]["vocab_size"], "longest": longest, "threads": args.threads}
    truth_job = common | {"checkpoint": str(ckpt), "ours": ours["fused"]["folder"], "og": og["folder"],
                          "near": sizes["near"], "far": sizes["far"], "tail": sizes["tail"]}  # fmt: skip
    truth = worker("truth", truth_job, work, shape, reuse=True)
    # int4: the float64 recompute with the weights the models hold (the builder's are the same values: the same
    # quantizer on the same fp32 weights, RTN block 32 symmetric, checked in the result)
    truth4 = worker("truth", truth_job | {"ours": ours["int4-gqa"]["folder"], "og": og["int4"]["folder"]}, work,
                    f"{shape}-int4", reuse=True)  # fmt: skip
    rows = [e for e in entries(ours, og, dynamo, ckpt) if not args.entries or e["name"] in args.entries]
    live = [e for e in rows if "error" not in e]
    timing = worker("time", common | {"entries": live, "sizes": sizes, "made": made}, work, shape)
    result: dict[str, Any] = {"checkpoint": made, "builds": {"ours": ours, "og": og},
                              "dynamo_export": {k: v for k, v in dynamo.items() if k != "path"},
                              "truth": truth, "truth_int4": truth4}  # fmt: skip
    figures = speed(timing, sizes, {e["name"]: e for e in rows}) if "rounds" in timing else {}
    result["basis"], result["limit"] = figures.pop("_basis", None), figures.pop("_limit", {})
    truths = np.load(work / f"truth-{shape}.result.npz") if "error" not in truth else None
    truths4 = np.load(work / f"truth-{shape}-int4.result.npz") if "error" not in truth4 else None
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
        own = truths4 if e.get("int4") else truths  # int4: fidelity against the weights held; cost apart
        if e.get("int4"):
            item["quantization_cost"] = {}
        for label in ("near", "far"):
            key = f"{e['name']}|{label}"
            if got is not None and own is not None and key in got.files:
                item["accuracy"][label] = compare(got[key], own[label])
                if e.get("int4") and truths is not None:
                    item["quantization_cost"][label] = compare(got[key], truths[label])
            else:
                item["accuracy"][label] = timing.get("accuracy_errors", {}).get(e["name"], {}).get(label, "-")
        tables = (truth4 if e.get("int4") else truth).get("tables", {})
        if e["name"].startswith("og-builder") and isinstance(tables.get("far"), dict):
            table = tables["far"]  # its logits at 100k need 100k real tokens: the stored rows instead
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
    for e in [r for r in rows if r["name"] in (*OURS, PEER, f"{PEER}-int4")]:
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
    parser.add_argument("--name", default="serving", help="the files' stem under --out (default serving: NAME.json, "
                        "NAME.md)")
    parser.add_argument("--work", help="folder for checkpoints and models (kept; default: a temporary folder)")
    parser.add_argument("--quick", "--tiny", action="store_true", help="tiny checkpoint, few steps (the test)")
    parser.add_argument("--shapes", nargs="+", choices=("small", "100m", "tiny"), help="checkpoints to measure")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads of every engine (default 2)")
    parser.add_argument("--rounds", type=int, help="alternating rounds (default 9; quick 3)")
    parser.add_argument("--seed", type=int, default=0, help="weights and prompts seed")
    parser.add_argument("--entries", nargs="+", metavar="NAME", help="time only these entries (default: every "
                        f"one; a peer's ratios need the peer too): {', '.join(ENTRIES)}")  # fmt: skip
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--job", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        from .workers import main as work

        return work(args.worker, args.job)
    if not args.out:
        parser.error("--out is required: the folder for serving.json and serving.md")
    unknown = [n for n in args.entries or () if n not in ENTRIES]
    if unknown:
        parser.error(f"--entries: {unknown[0]!r} is not an entry; allowed: {', '.join(ENTRIES)}")
    sizes = asdict(QUICK if args.quick else FULL) | ({"rounds": args.rounds} if args.rounds else {})
    shapes = args.shapes or (["tiny"] if args.quick else ["small", "100m"])
    started, load_before = time.perf_counter(), [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        work = Path(args.work or tmp)
        results = {s: checkpoint(s, work / s, sizes, args) for s in shapes}
    command = "python tools/bench_serving.py " + " ".join(sys.argv[1:] if argv is None else argv)
    report = {"tool": "tools/bench_serving.py", "command": command, "versions": versions(), "cpu": cpu_name(),
              "cpu_count": os.cpu_count(), "threads": args.threads, "sizes": sizes,
              "load_average_before": load_before, "load_average_after": [round(x, 2) for x in os.getloadavg()],
              "elapsed_s": round(time.perf_counter() - started, 1), "checkpoints": results}  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
    text = [f"Command: `{command}`  ", f"{report['cpu']}, {report['cpu_count']} cores, {args.threads} threads; "
            + ", ".join(f"{k} {v}" for k, v in report["versions"].items()) + "  ",
            f"Load average (1, 5, 15 min; the machine is shared with other work) before: "
            f"{', '.join(map(str, report['load_average_before']))}; after: "
            f"{', '.join(map(str, report['load_average_after']))}; {report['elapsed_s']:.0f} s in all", "",
            "Peak RSS: VmHWM of a fresh process that loads one entry and runs a prefill of the largest prompt plus "
            "decode steps: the whole process's high-water mark (Python, the libraries, the weights, the cache). "
            "ru_maxrss is in the JSON too, but Linux carries it across exec: it reports the parent's size.",
            ""]  # fmt: skip
    text += [markdown(s, r, sizes) for s, r in results.items()]
    (out / f"{args.name}.md").write_text("\n".join(text))
    print("\n".join(text))
    return 0
