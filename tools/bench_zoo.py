"""``audit --zoo`` on local Ray against the serial run, on this machine: a zoo of 12 tiny models (4 schedules x
ropeexport's decoder, onnxruntime-genai's builder, torch.onnx.export with dynamo), and Ray's overhead per task.

    python tools/bench_zoo.py --work /tmp/bench-zoo --out tools/figures

Each run is a fresh ``ropeexport audit --zoo`` process (imports, and for Ray the instance's start and stop,
included), serial first, then ``--ray local``, alternating for ``--rounds`` rounds; the two zoo.json files must be
the same bytes. The overhead per task: ``fanout.fan_out`` of ``--tasks`` jobs that do nothing, on a local instance
already started and warm, against the same jobs in this process. The load average is recorded before and after
(``uptime``): the machine is shared, and the wall figures are only as quiet as it was. Writes ``zoo-ray.json``.
Checkpoints: transformers' random tiny models (``audit_peers.checkpoint``); nothing is downloaded.
"""  # noqa: D205

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import audit_peers  # noqa: E402

# Short contexts: the audit measures each finding's effect to the far end of the context, as users run the model.
SCHEDULES: dict[str, tuple[str, dict[str, Any]]] = {
    "default": ("llama", {"max_position_embeddings": 2048, "rope_theta": 10000.0}),
    "linear-x4": ("llama", {"max_position_embeddings": 2048, "rope_theta": 10000.0,
                            "rope_scaling": {"rope_type": "linear", "factor": 4.0}}),
    "llama3": ("llama", {"max_position_embeddings": 4096, "rope_theta": 500000.0,
                         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}}),
    "yarn-x4": ("qwen2", {"max_position_embeddings": 4096, "rope_theta": 1000000.0,
                          "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                           "original_max_position_embeddings": 1024}}),
}  # fmt: skip
SOURCES = {"ropeexport": None, "builder": audit_peers.SOURCES[0], "dynamo": audit_peers.SOURCES[1]}


def load() -> str:
    """``uptime``'s load averages."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def make_zoo(work: Path) -> Path:
    """The 12 models and work/zoo.toml listing them (exports reused from an earlier run with the same --work)."""
    import ropeexport as rx

    lines = []
    for schedule, (model_type, fields) in SCHEDULES.items():
        ckpt = audit_peers.checkpoint(work / "ckpt" / schedule, model_type, fields)
        for source, peer in SOURCES.items():
            name = f"{schedule}-{source}"
            if peer is None:
                folder = work / "models" / name
                if not (folder / "decoder" / "model.onnx").is_file():
                    built = rx.build_decoder(rx.DecoderRequest(checkpoint=ckpt, eager=False, name="decoder"), folder)
                    assert built.passed, built.report
                model = folder / "decoder" / "model.onnx"
            else:
                model, why, _ = audit_peers.export(peer, ckpt, work / "models" / name)
                if model is None:
                    print(f"{name}: not exported: {why}", flush=True)
                    continue
            lines.append(f'[[model]]\nname = "{name}"\nonnx = "{model.relative_to(work)}"\n'
                         f'hf_config = "{(ckpt / "config.json").relative_to(work)}"\n')  # fmt: skip
    (work / "zoo.toml").write_text("\n".join(lines))
    return work / "zoo.toml"


def zoo_run(zoo: Path, out: Path, ray: str | None) -> tuple[float, int]:
    """(wall seconds, exit code) of one fresh ``ropeexport audit --zoo`` process into a new ``out``."""
    argv = [sys.executable, "-m", "ropeexport", "audit", "--zoo", str(zoo), "--out", str(out)]
    start = time.perf_counter()
    done = subprocess.run(argv + (["--ray", ray] if ray else []), capture_output=True, text=True, timeout=3600)
    return round(time.perf_counter() - start, 1), done.returncode


def _nothing(item: int) -> int:
    return item


def overhead(tasks: int) -> dict[str, float]:
    """Seconds per task of ``fan_out`` on a warm local instance, and in this process; the instance's start."""
    from ropeexport.fanout import connected, fan_out, parse_address

    began = time.perf_counter()
    with connected(parse_address("local")):
        started = time.perf_counter() - began
        fan_out(_nothing, list(range(4)), "local")  # workers started and warm
        t = time.perf_counter()
        fan_out(_nothing, list(range(tasks)), "local")
        on_ray = (time.perf_counter() - t) / tasks
    t = time.perf_counter()
    fan_out(_nothing, list(range(tasks)), None)
    serial = (time.perf_counter() - t) / tasks
    return {"start_seconds": round(started, 2), "per_task_seconds_ray": round(on_ray, 5),
            "per_task_seconds_serial": round(serial, 7), "tasks": tasks}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Make the zoo, time the runs, write zoo-ray.json."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=ROOT / "tools" / "figures")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=200)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    zoo = make_zoo(args.work)
    figure: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "load_before": load()}, "rounds": []}
    for r in range(args.rounds):
        row = {}
        for ray in (None, "local"):
            out = args.work / f"out-{r}-{ray or 'serial'}"
            subprocess.run(["rm", "-rf", str(out)], check=True)
            row[ray or "serial"] = dict(zip(("wall_seconds", "exit"), zoo_run(zoo, out, ray), strict=True))
        same = (args.work / f"out-{r}-serial" / "zoo.json").read_bytes() == (
            args.work / f"out-{r}-local" / "zoo.json").read_bytes()  # fmt: skip
        row["same_zoo_json"] = same
        figure["rounds"].append(row)
        print(json.dumps(row), flush=True)
    figure["models"] = len(json.loads((args.work / "out-0-serial" / "zoo.json").read_text())["rows"])
    figure["overhead"] = overhead(args.tasks)
    figure["machine"]["load_after"] = load()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "zoo-ray.json").write_text(json.dumps(figure, indent=2) + "\n")
    print(json.dumps(figure, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
