"""What auditing and grafting a real-size foreign model costs: peak memory and wall, beside the model's own session.

    python tools/bench_audit.py --work /tmp/audit-sizes --out tools/figures                  # Llama-3.2-1B, 16 layers
    python tools/bench_audit.py --work /tmp/audit-sizes --model llama-3.2-1b:2 --source /work/main   # another tree

The checkpoint is ``tools/write_checkpoint.py``'s (random bf16, kept in ``--work`` and reused); the models are the
onnxruntime-genai builder's of it (``python -m onnxruntime_genai.models.builder -i CKPT -o OUT -p P -e cpu -c
CACHE``, for each of ``--precisions``, kept and reused). Then, each as its own process, one after another:
- ``session``: ONNX Runtime's CPU session of the model and one call of 8 tokens (what serving it costs at least);
- ``audit``: ``ropeexport audit MODEL --hf-config CKPT/config.json`` (with the findings' effects, as a user runs it);
- ``graft``: ``ropeexport graft MODEL --hf-config CKPT/config.json --checkpoint CKPT --out G`` (the whole-decoder
  proof included); G is deleted.

``--source`` runs another checkout's ropeexport (its folder on PYTHONPATH): the figures before a change and after it
come from the same tool. Peak memory is ``bench_sizes.measure``'s: the largest sum of VmRSS over the process tree,
sampled every 0.1 s, file-backed pages of memory-mapped files included (what ``top`` shows); ``--cap-gib`` stops a
run whose tree passes it (reported as stopped, with the time it ran) so that a run the machine cannot hold does not
take the machine down.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

from bench_sizes import PYTHON, ROOT, _free, disk, measure

RUNS = ("session", "audit", "graft")
PRECISIONS = ("fp32", "int4")


def session_call(model: str, config_file: str) -> None:
    """``--runs session``: the model's ORT session and one call of 8 tokens after an empty cache (its heads and width
    from the checkpoint's ``config_file`` where the model leaves them symbolic).
    """  # noqa: D205
    import numpy as np
    import onnxruntime as ort

    config = json.loads(Path(config_file).read_text())
    heads = config["num_key_value_heads"]
    width = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feeds: dict[str, np.ndarray] = {}
    for value in session.get_inputs():
        if value.name == "input_ids":
            feeds[value.name] = np.arange(8, dtype=np.int64).reshape(1, 8)
        elif value.name == "attention_mask":
            feeds[value.name] = np.ones((1, 8), np.int64)
        elif value.name == "position_ids":
            feeds[value.name] = np.arange(8, dtype=np.int64).reshape(1, 8)
        else:  # past_key_values.<i>.key / .value [b, KV, past, d]: empty
            dtype = np.float16 if "float16" in value.type else np.float32
            feeds[value.name] = np.zeros((1, heads, 0, width), dtype)
    print(session.run(None, feeds)[0].shape)


def _builder(checkpoint: Path, precision: str, work: Path) -> Path:
    """The builder's model of ``checkpoint`` in ``precision`` (made once, kept in ``work``)."""
    target = work / "models" / f"{checkpoint.name}-{precision}"
    if (target / "model.onnx").exists():
        return target / "model.onnx"
    shutil.rmtree(target, ignore_errors=True)
    cache = work / "cache" / f"{checkpoint.name}-{precision}"
    command = [PYTHON, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint), "-o", str(target), "-p",
               precision, "-e", "cpu", "-c", str(cache)]  # fmt: skip
    made = measure(command, work / f"builder-{checkpoint.name}-{precision}.log")
    shutil.rmtree(cache, ignore_errors=True)
    if made["exit"] != 0:
        raise SystemExit(f"the builder failed: {(work / f'builder-{checkpoint.name}-{precision}.log').read_text()}")
    (target / "made.json").write_text(json.dumps(made) + "\n")
    return target / "model.onnx"


def bench(model: str, precisions: list[str], runs: list[str], work: Path, source: Path, cap: float) -> dict[str, Any]:
    """Every run of ``runs`` on the builder's model of each precision (module doc)."""
    name, _, layers = model.partition(":")
    checkpoint = work / "checkpoints" / model.replace(":", "-l")
    if not (checkpoint / "config.json").exists():
        shutil.rmtree(checkpoint, ignore_errors=True)
        command = [PYTHON, str(ROOT / "tools" / "write_checkpoint.py"), name, str(checkpoint)]
        command += ["--layers", layers] if layers else []
        if measure(command, work / "write.log")["exit"] != 0:
            raise SystemExit(f"write_checkpoint failed: {(work / 'write.log').read_text()[-2000:]}")
    config = json.loads((checkpoint / "config.json").read_text())
    out: dict[str, Any] = {"model": model, "layers": config["num_hidden_layers"], "checkpoint": str(checkpoint),
                           "checkpoint_bytes": disk(checkpoint), "source": str(source), "precisions": {}}  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(source))
    for precision in precisions:
        onnx_model = _builder(checkpoint, precision, work)
        row: dict[str, Any] = {"model_bytes": disk(onnx_model.parent), "runs": {}}
        for run in runs:
            grafted = work / "grafted" / f"{checkpoint.name}-{precision}.onnx"
            shutil.rmtree(grafted.parent, ignore_errors=True)
            if run == "session":
                command = [PYTHON, str(Path(__file__).resolve()), "--session", str(onnx_model),
                           str(checkpoint / "config.json")]  # fmt: skip
            elif run == "audit":
                command = [PYTHON, "-m", "ropeexport", "audit", str(onnx_model), "--hf-config",
                           str(checkpoint / "config.json")]  # fmt: skip
            else:
                command = [PYTHON, "-m", "ropeexport", "graft", str(onnx_model), "--checkpoint", str(checkpoint),
                           "--out", str(grafted), "--hf-config", str(checkpoint / "config.json")]  # fmt: skip
            log = work / f"{checkpoint.name}-{precision}-{run}.log"
            before = _free()
            result = measure(command, log, env, cap_bytes=int(cap * 2**30))
            result["mem_available_before_gib"] = round(before["MemAvailable"] / 2**30, 1)
            result["log_tail"] = log.read_text()[-1500:]
            row["runs"][run] = result
            stopped = " (stopped at the cap)" if result.get("stopped") else ""
            print(f"{model} {precision} {run}: {result['wall_s']} s, peak {result['peak_rss_gib']} GiB, exit "
                  f"{result['exit']}{stopped}", flush=True)  # fmt: skip
            shutil.rmtree(grafted.parent, ignore_errors=True)
        out["precisions"][precision] = row
    return out


def markdown(document: dict[str, Any]) -> str:
    """The figures as one table (every checkout measured), with the machine and the commands."""
    machine = document["machine"]
    lines = ["# Audit and graft of a real-size model: peak memory and wall", "",
             f"Machine: {machine['platform']}, {machine['cpus']} CPUs, {machine['mem_total_gib']} GiB, shared with "
             "other jobs (MemAvailable before each run is in the JSON). Peak RSS: the largest sum of VmRSS over the "
             "run's process tree, sampled every 0.1 s (anon: its anonymous part, without the pages of mapped "
             f"files); a run passing {document['cap_gib']} GiB is stopped (`--cap-gib`).", "",
             "Reproduce (the checkpoint and the builder's models are made on the first run, kept in --work):", "",
             "    python tools/bench_audit.py --work /tmp/audit-sizes --label after --out tools/figures",
             "    git worktree add /tmp/before <commit>; python tools/bench_audit.py --work /tmp/audit-sizes "
             "--source /tmp/before --label 'before (<commit>)' --out tools/figures", "",
             "| ropeexport | model (layers) | precision | model on disk (GiB) | run | wall (s) | peak RSS (GiB) | "
             "anon (GiB) | exit |", "|---|---|---|---:|---|---:|---:|---:|---|"]  # fmt: skip
    for label, results in document["results"].items():
        for r in results:
            for precision, row in r["precisions"].items():
                for run, m in row["runs"].items():
                    code = f"stopped past {document['cap_gib']} GiB" if m.get("stopped") else str(m["exit"])
                    lines.append(f"| {label} | {r['model']} ({r['layers']}) | {precision} | "
                                 f"{row['model_bytes'] / 2**30:.2f} | {run} | {m['wall_s']} | {m['peak_rss_gib']} | "
                                 f"{m.get('peak_anon_gib', '')} | {code} |")  # fmt: skip
    lines += ["", "Exit 1 of audit: findings; of graft: not proven (the log tail of each run is in the JSON)."]
    if document.get("notes"):  # what the runs said, written beside the figures (``--note``)
        lines += ["", "What the runs said:", "", *(f"- {note}" for note in document["notes"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line (module doc)."""
    if argv is None and len(sys.argv) > 3 and sys.argv[1] == "--session":
        session_call(sys.argv[2], sys.argv[3])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--work", type=Path, required=True, help="checkpoint, models and logs")
    p.add_argument("--model", default="llama-3.2-1b", help="NAME[:LAYERS] of tools/write_checkpoint.py")
    p.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    p.add_argument("--runs", nargs="+", default=list(RUNS), choices=RUNS)
    p.add_argument("--source", type=Path, default=ROOT, help="the ropeexport checkout to run (default this one)")
    p.add_argument("--label", default="this checkout", help="the figures' label for --source (before / after)")
    p.add_argument("--cap-gib", type=float, default=8.0, help="stop a run whose process tree passes this RSS")
    p.add_argument("--out", type=Path, help="folder for audit-sizes.json and audit-sizes.md (rows added)")
    p.add_argument("--note", action="append", default=[], help="a line on what the runs said (replaces the notes)")
    args = p.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    result = bench(args.model, args.precisions, args.runs, args.work, args.source.resolve(), args.cap_gib)
    if args.out is not None:
        path = args.out / "audit-sizes.json"
        document = json.loads(path.read_text()) if path.exists() else {"results": {}}
        document.update({"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                                     "mem_total_gib": round(_free()["MemTotal"] / 2**30, 1)},
                         "cap_gib": args.cap_gib})  # fmt: skip
        if args.note:
            document["notes"] = args.note
        rows = document["results"].setdefault(args.label, [])
        old = next((r for r in rows if r["model"] == args.model), None)
        if old is None:
            rows.append(result)
        else:  # a run adds or replaces its rows; the other runs' stay
            for precision, row in result["precisions"].items():
                kept = old["precisions"].setdefault(precision, row)
                kept["runs"] = {**kept["runs"], **row["runs"]}
        path.write_text(json.dumps(document, indent=1) + "\n")
        (args.out / "audit-sizes.md").write_text(markdown(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
