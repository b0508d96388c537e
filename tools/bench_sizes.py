"""What building a real-size decoder costs: time, peak memory and disk, beside the onnxruntime-genai builder.

The same random-weight checkpoint for both.

    python tools/bench_sizes.py --work /tmp/sizes --out tools/figures                         # Llama-3.2-1B, 16 layers
    python tools/bench_sizes.py --work /tmp/sizes --model llama-3.2-1b:2 --out tools/figures  # the issue's 384M shape
    python tools/bench_sizes.py --work /tmp/sizes --model llama-3.1-8b --dtype fp16 --runs build builder --out ...
    python tools/bench_sizes.py --work /tmp/sizes --model llama-3.1-8b --dtype int4 --out tools/figures  # int4 weights
    python tools/bench_sizes.py --work /tmp/sizes --dtype int4 --graph gqa --runs build genai builder builder-genai \
        --out tools/figures  # served by onnxruntime-genai, ours (GroupQueryAttention, as the builder's) and theirs

Each ``--model NAME[:LAYERS]`` gets a checkpoint from ``tools/write_checkpoint.py`` (bf16, kept in ``--work`` and
reused), then each of ``--runs`` as its own process, one after another (nothing else of ours running):
- ``build``: the build without verification: ``decoder.kind.export_decoder``, the build's export stage (resolve and
  check the request, read the checkpoint one tensor at a time, write model.onnx + model.onnx.data, genai_config.json
  and the tokenizer), as ``python tools/bench_sizes.py --export-only`` runs it;
- ``verified``: ``ropeexport build --artifact decoder --checkpoint DIR --dtype D --no-eager`` (every scenario against
  the float64 truth);
- ``eager``: the same with the transformers reference (its own full copy of the model);
- ``generate``: ``ropeexport generate OUT --prompt-ids 1,..,128 --max-new-tokens 32 --json`` on the ``verified``
  run's decoder (run it first): serving as ropeexport does, its peak RSS and prefill / decode speed;
- ``genai``: the same folder (or, with nothing verified, the ``build`` run's, kept for it), prompt and count served by
  onnxruntime-genai (``og.Model``, greedy);
- ``builder-genai``: the ``builder`` run's folder (run it first, in the same command) served by onnxruntime-genai as
  ``genai`` serves ours: the same prompt and count, the same code;
- ``builder``: ``python -m onnxruntime_genai.models.builder -i DIR -o OUT -p PRECISION -e cpu -c CACHE`` (``-i``: the
  builder's flag for a local folder).

``--dtype int4``: fp32 activations, int4 weights (``MatMulNBits``) in both tools, block 32, symmetric, the builder's
defaults for ``-p int4``: ours ``--dtype fp32 --weight-format int4 --block-size 32 --accuracy-level A --symmetric``.
The builder's CPU model computes at accuracy level 4 (int8 activations: read from its MatMulNBits, onnxruntime-genai
0.18); ours at ``--accuracy-level`` (default 0, fp32 activations: the level the float64 verification judges at the
dtype's tolerance); ``--accuracy-level 4`` is the like for like of serving speed, its rows labelled ``a4``.

Peak memory is the largest sum of VmRSS over the process and its children, sampled every 0.1 s from /proc (the
builder's and ropeexport's figures are taken the same way); disk is the output folder's files (``du``-like, apparent
sizes). The figures are this machine's and depend on what else runs on it: ``free`` is recorded before each run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
RUNS = ("build", "verified", "eager", "builder", "generate", "genai", "builder-genai")
PROMPT, NEW = 128, 32  # the serving runs' prompt (ids 1..128) and new tokens


def _tree(pid: int) -> list[int]:
    """``pid`` and every descendant, from /proc's children lists."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return out


def _rss(pid: int, field: str = "VmRSS") -> int:
    """``field`` of ``pid``'s /proc status in bytes (VmRSS: everything resident, RssAnon: its anonymous part, what
    cannot be dropped for a file's; 0 when it is gone).
    """  # noqa: D205
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _expendable() -> None:
    """In the child: the first the kernel kills when memory runs out (a run past this machine's memory must fail
    alone, never take the machine's other processes with it: an out-of-memory exit is a figure too).
    """  # noqa: D205
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def measure(command: list[str], log: Path, env: dict[str, str] | None = None,
            cap_bytes: int | None = None) -> dict[str, Any]:  # fmt: skip
    """Run ``command``; wall seconds, exit code and peak RSS of its process tree (module doc), and the peak of its
    anonymous part. ``cap_bytes``: the tree is killed once its RSS passes it (``stopped``: a run the machine could
    not hold, measured until then).
    """  # noqa: D205
    peak, anon, stopped = [0], [0], [False]
    with open(log, "w") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                                start_new_session=cap_bytes is not None, preexec_fn=_expendable)  # fmt: skip

        def sample() -> None:
            while proc.poll() is None:
                tree = _tree(proc.pid)
                peak[0] = max(peak[0], sum(_rss(p) for p in tree))
                anon[0] = max(anon[0], sum(_rss(p, "RssAnon") for p in tree))
                if cap_bytes is not None and peak[0] > cap_bytes and not stopped[0]:
                    stopped[0] = True
                    os.killpg(proc.pid, signal.SIGKILL)  # its own session: the tree, nothing else
                time.sleep(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = proc.wait()
        wall = time.perf_counter() - start
        sampler.join()
    return {"command": " ".join(command), "exit": code, "wall_s": round(wall, 1), "peak_rss_bytes": peak[0],
            "peak_rss_gib": round(peak[0] / 2**30, 2), "peak_anon_gib": round(anon[0] / 2**30, 2),
            **({"stopped": True} if stopped[0] else {})}  # fmt: skip


def disk(folder: Path) -> int:
    """Bytes of every file under ``folder``."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def _free() -> dict[str, int]:
    """MemAvailable and MemTotal in bytes."""
    fields = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":")
            if key in ("MemTotal", "MemAvailable"):
                fields[key] = int(value.split()[0]) * 1024
    return fields


def export_only(checkpoint: str, out: str, dtype: str, graph: str = "fused", level: str = "0") -> None:
    """The build's export stage alone (``--runs build``): the request resolved and checked as ``build`` does (its
    memory estimate aside: that is the verification's), then ``decoder.kind.export_decoder`` into ``out`` (a new
    folder).
    """  # noqa: D205
    sys.path.insert(0, str(ROOT))
    from ropeexport.decoder.build import DecoderRequest, resolve
    from ropeexport.decoder.genai import check_tokenizer
    from ropeexport.decoder.kind import export_decoder, weights_of
    from ropeexport.decoder.scenarios import check_positions

    request = DecoderRequest(checkpoint=checkpoint, graph=graph, **_request_fields(dtype, int(level)))
    spec, config = resolve(request)
    check_positions(spec, spec.sources.get("position.max_positions"))
    check_tokenizer(checkpoint)
    folder = Path(out)
    folder.mkdir(parents=True)
    ckpt = Path(checkpoint)
    print(export_decoder(spec, config, weights_of(spec, ckpt), ckpt, folder))


# onnxruntime-genai serving a folder: argv DIR IDS NEW; prints the prefill and decode speed as one JSON line
# (``tools/genai_ab.py``'s ``serve``).
GENAI = f"""
import json, sys
sys.path.insert(0, {str(ROOT / "tools")!r})
import onnxruntime_genai as og
from genai_ab import serve
model = og.Model(sys.argv[1])
prefill, decode, steps = serve(model, [int(i) for i in sys.argv[2].split(",")], int(sys.argv[3]))
print(json.dumps({{"prefill_tokens_per_second": prefill, "decode_ms_per_token": decode, "steps": steps}}))
"""


def _last_json(text: str) -> dict[str, Any]:
    """The serving figures of the last JSON object in ``text`` (one line, or indented from a ``{`` line), else {}."""
    lines = text.strip().splitlines()
    for start in reversed([i for i, line in enumerate(lines) if line.startswith("{")]):
        try:
            found = json.loads("\n".join(lines[start:]))
        except ValueError:
            continue
        if isinstance(found, dict):
            keys = ("prefill_tokens_per_second", "decode_ms_per_token", "steps")
            return {k: len(found[k]) if isinstance(found[k], list) else found[k] for k in keys if k in found}
    return {}


def _served(work: Path, tag: str, run: str) -> Path:
    """The decoder folder a serving run serves: the ``verified`` run's; for ``genai`` (which reads no report) the
    ``build`` run's when nothing was verified (a size whose float64 truth takes hours: served, not verified).
    """  # noqa: D205
    if run == "builder-genai":
        theirs = work / "out" / f"{tag}-builder"
        if not (theirs / "genai_config.json").exists():
            raise SystemExit("--runs builder-genai serves the builder run's folder: run builder before it")
        return theirs
    found = sorted((work / "out" / f"{tag}-verified").glob("*/report.json"))
    if found:
        return found[0].parent
    built = work / "out" / f"{tag}-build"
    if run == "genai" and (built / "genai_config.json").exists():
        return built
    raise SystemExit(f"--runs {run} serves the verified run's decoder (genai: or the build run's): run it first")


def _request_fields(dtype: str, level: int = 0) -> dict[str, Any]:
    """DecoderRequest's fields for ``--dtype`` (int4: the builder's ``-p int4`` block and symmetry at accuracy level
    ``level``, module doc).
    """  # noqa: D205
    if dtype == "int4":
        return {"dtype": "fp32", "weight_format": "int4", "block_size": 32, "accuracy_level": level, "symmetric": True}
    return {"dtype": dtype}


def _cli_fields(dtype: str, level: int = 0) -> list[str]:
    """``ropeexport build``'s options for ``--dtype`` (as ``_request_fields``)."""
    if dtype == "int4":
        return ["--dtype", "fp32", "--weight-format", "int4", "--block-size", "32", "--accuracy-level", str(level),
                "--symmetric"]  # fmt: skip
    return ["--dtype", dtype]


def bench(model: str, dtype: str, runs: list[str], work: Path, tag: str, graph: str = "fused",
          level: int = 0, cap_gib: float | None = None) -> dict[str, Any]:  # fmt: skip
    """Every run of ``runs`` on one checkpoint (module doc); ``graph``: our decoder's form, ``level`` its int4
    accuracy level; ``cap_gib``: each run stopped once its peak RSS passes it (``measure``'s ``stopped``).
    """  # noqa: D205
    name, _, layers = model.partition(":")
    checkpoint = work / "checkpoints" / model.replace(":", "-l")
    if not (checkpoint / "config.json").exists():
        if checkpoint.exists():
            shutil.rmtree(checkpoint)
        command = [PYTHON, str(ROOT / "tools" / "write_checkpoint.py"), name, str(checkpoint)]
        command += ["--layers", layers] if layers else []
        log = work / f"write-{model.replace(':', '-l')}.log"
        written = measure(command, log)
        if written["exit"] != 0:
            raise SystemExit(f"write_checkpoint failed: {log.read_text()[-2000:]}")
        (checkpoint / "written.json").write_text(json.dumps(written) + "\n")
    config = json.loads((checkpoint / "config.json").read_text())
    out: dict[str, Any] = {"model": model, "dtype": dtype, "graph": graph, "level": level,
                           "checkpoint": str(checkpoint),
                           "checkpoint_bytes": disk(checkpoint), "layers": config["num_hidden_layers"],
                           "runs": {}}  # fmt: skip
    if (checkpoint / "written.json").exists():  # what writing the checkpoint cost (tools/write_checkpoint.py)
        out["write_checkpoint"] = json.loads((checkpoint / "written.json").read_text())
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for run in runs:
        target = work / "out" / f"{tag}-{run}"
        if target.exists():
            shutil.rmtree(target)
        cache = work / "cache" / f"{tag}-{run}"
        shutil.rmtree(cache, ignore_errors=True)
        if run == "build":
            command = [PYTHON, str(Path(__file__).resolve()), "--export-only", str(checkpoint), str(target), dtype,
                       graph, str(level)]  # fmt: skip
        elif run in ("verified", "eager"):
            command = [PYTHON, "-m", "ropeexport", "build", "--artifact", "decoder", "--checkpoint", str(checkpoint),
                       *_cli_fields(dtype, level), "--graph", graph, "--out", str(target)]  # fmt: skip
            command += ["--no-eager"] if run == "verified" else []
        elif run in ("generate", "genai", "builder-genai"):
            served = _served(work, tag, run)
            target = work / "out" / f"{tag}-{run}"  # nothing is written there: its disk figure is 0
            ids = ",".join(str(i) for i in range(1, PROMPT + 1))
            command = ([PYTHON, "-m", "ropeexport", "generate", str(served), "--prompt-ids", ids, "--max-new-tokens",
                        str(NEW), "--json"] if run == "generate" else
                       [PYTHON, "-c", GENAI, str(served), ids, str(NEW)])  # fmt: skip
        else:
            command = [PYTHON, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint), "-o", str(target),
                       "-p", dtype, "-e", "cpu", "-c", str(cache)]  # fmt: skip
        before = _free()
        cap = int(cap_gib * 2**30) if cap_gib is not None else None
        result = measure(command, work / f"{tag}-{run}.log", env, cap)
        result["mem_available_before_gib"] = round(before["MemAvailable"] / 2**30, 1)
        result["disk_bytes"] = disk(target)
        result["disk_gib"] = round(result["disk_bytes"] / 2**30, 2)
        result["log_tail"] = (work / f"{tag}-{run}.log").read_text()[-600:]
        out["runs"][run] = result
        print(f"{tag} {run}: {result['wall_s']} s, peak {result['peak_rss_gib']} GiB, disk {result['disk_gib']} GiB, "
              f"exit {result['exit']}", flush=True)  # fmt: skip
        shutil.rmtree(cache, ignore_errors=True)
        if run in ("generate", "genai", "builder-genai"):  # the speed the run printed last, as one JSON line
            result["served"] = _last_json((work / f"{tag}-{run}.log").read_text())
        kept = (run == "build" and "genai" in runs) or (run == "builder" and "builder-genai" in runs)
        if run != "verified" and not kept:  # keep disk free; what is served stays
            shutil.rmtree(target, ignore_errors=True)
    return out


def _form(result: dict[str, Any]) -> str:
    """The dtype column: ``int4``; ``int4 gqa a4`` for a form other than fused, an accuracy level other than 0."""
    graph, level = result.get("graph", "fused"), result.get("level", 0)
    return " ".join([result["dtype"], *([graph] if graph != "fused" else []), *([f"a{level}"] if level else [])])


def _key(result: dict[str, Any]) -> str:
    """``MODEL/DTYPE[/GRAPH][/aLEVEL]`` (``_form``): the rows a run adds or replaces."""
    return "/".join([result["model"], *_form(result).split()])


def markdown(results: list[dict[str, Any]]) -> str:
    """The figures as a table, with the targets' ratios."""
    lines = ["| model (layers, parameters) | dtype | run | wall (s) | peak RSS (GiB) | disk (GiB) | exit |",
             "|---|---|---|---:|---:|---:|---:|"]  # fmt: skip
    notes = []
    for r in results:
        label = f"{r['model']} ({r['layers']} layers)"
        for run, m in r["runs"].items():
            lines.append(f"| {label} | {_form(r)} | {run} | {m['wall_s']} | {m['peak_rss_gib']} | {m['disk_gib']} | "
                         f"{m['exit']} |")  # fmt: skip
        for run, m in r["runs"].items():
            if m.get("served"):
                f = m["served"]
                notes.append(f"- {r['model']} {_form(r)} {run}: prefill {f['prefill_tokens_per_second']:.0f} "
                             f"tokens/s ({PROMPT}-token prompt), decode {f['decode_ms_per_token']:.0f} ms/token "
                             f"(median of {NEW} new tokens)")  # fmt: skip
            if m.get("stopped"):
                notes.append(f"- {r['model']} {_form(r)} {run}: stopped at {m['peak_rss_gib']} GiB, past --cap-gib "
                             "(the machine shared)")  # fmt: skip
            elif m["exit"] == -9:
                notes.append(f"- {r['model']} {_form(r)} {run}: killed by the kernel, out of memory, at "
                             f"{m['peak_rss_gib']} GiB (of {_free()['MemTotal'] / 2**30:.1f} GiB)")  # fmt: skip
        ours, theirs = (r["runs"].get(k, {}).get("served") for k in ("genai", "builder-genai"))
        if ours and theirs:  # both served by onnxruntime-genai, one after the other (not alternating rounds)
            notes.append(f"- {r['model']} {_form(r)}: served by onnxruntime-genai, ropeexport / builder: decode "
                         f"speed x{theirs['decode_ms_per_token'] / ours['decode_ms_per_token']:.2f}, prefill "
                         f"x{ours['prefill_tokens_per_second'] / theirs['prefill_tokens_per_second']:.2f} "
                         "(target >= 1)")  # fmt: skip
        build, builder = r["runs"].get("build"), r["runs"].get("builder")
        if build and builder and builder["exit"] == 0 and build["exit"] == 0:
            notes.append(f"- {r['model']} {_form(r)}: ropeexport build / builder: wall "
                         f"x{build['wall_s'] / builder['wall_s']:.2f} (target <= 2), peak RSS "
                         f"x{build['peak_rss_bytes'] / builder['peak_rss_bytes']:.2f} (target <= 1.5)")  # fmt: skip
    return "\n".join(lines + [""] + notes) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line (module doc)."""
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--export-only":
        export_only(*sys.argv[2:7])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--work", type=Path, required=True, help="checkpoints, outputs and logs")
    p.add_argument("--model", action="append", help="NAME[:LAYERS] of tools/write_checkpoint.py (default "
                   "llama-3.2-1b)")  # fmt: skip
    p.add_argument("--dtype", default="fp32", choices=("fp32", "fp16", "int4"),
                   help="int4: fp32 activations, int4 weights, the builder's -p int4 settings (module doc)")
    p.add_argument("--runs", nargs="+", default=list(RUNS), choices=RUNS)
    p.add_argument("--accuracy-level", type=int, default=0, choices=(0, 1, 2, 3, 4),
                   help="int4: our MatMulNBits' accuracy level (the builder's CPU model: 4; module doc)")
    p.add_argument("--graph", default="fused", choices=("fused", "gqa", "decomposed"),
                   help="our decoder's graph form (the builder writes GroupQueryAttention: gqa is the like for like)")
    p.add_argument("--cap-gib", type=float, help="stop a run once its peak RSS passes this (a machine shared: the "
                   "run's figure is then its peak until stopped, exit -9, 'stopped')")  # fmt: skip
    p.add_argument("--out", type=Path, help="folder for sizes.json and sizes.md")
    args = p.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    results = []
    for model in args.model or ["llama-3.2-1b"]:
        level = args.accuracy_level if args.dtype == "int4" else 0
        tag = _key({"model": model.replace(":", "-l"), "dtype": args.dtype, "graph": args.graph, "level": level})
        results.append(bench(model, args.dtype, args.runs, args.work, tag.replace("/", "-"), args.graph, level,
                             args.cap_gib))  # fmt: skip
    document = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                            "mem_total_gib": round(_free()["MemTotal"] / 2**30, 1)},
                "python": platform.python_version(), "results": results}  # fmt: skip
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "sizes.json"
        old = json.loads(path.read_text()) if path.exists() else {}
        merged = {_key(r): r for r in old.get("results", [])}
        for r in results:  # a run adds or replaces its rows; the other models' and runs' stay
            key = _key(r)
            merged[key] = {**r, "runs": {**merged.get(key, {}).get("runs", {}), **r["runs"]}}
        document["results"] = list(merged.values())
        if old.get("load_note"):  # what the rows' machine carried besides (kept with the rows it speaks of)
            document["load_note"] = old["load_note"]
        path.write_text(json.dumps(document, indent=1) + "\n")
        note = f"\n{document['load_note']}\n" if document.get("load_note") else ""
        (args.out / "sizes.md").write_text(markdown(document["results"]) + note)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
