"""The newest-versions check: the default build and the fast tier on newer versions than constraints.txt pins.

onnxruntime, transformers and torch newer than ``constraints.txt``'s pins, in a virtual environment of its own (not
CI's gate, which is README's pinned command)::

    python tools/newest_versions.py --venv /tmp/newest-venv --out tools/figures/newest-versions.json
    python tools/newest_versions.py --onnxruntime 1.32.0 --transformers 5.24.0 --venv DIR --out FILE

What it installs, in a fresh ``--venv`` (removed first when it exists):
- onnxruntime and transformers at the versions named (defaults below), onnxruntime-genai at ``--onnxruntime-genai``
  (default: constraints.txt's pin);
- torch's newest *CPU* build it can reach: a ``torch-*.whl`` in pip's ``--find-links`` folders (``PIP_FIND_LINKS``,
  ``--wheels``) whose metadata requires no CUDA package, or the newest ``+cpu`` wheel of ``--torch-index``
  (download.pytorch.org/whl/cpu) when that answers. PyPI's Linux torch is the CUDA build (several GB with its nvidia
  packages), so it is never taken;
- every other direct dependency at constraints.txt's pin; what those bring in is left to pip (its newest that fits).

Then, as a user runs them: ``ropeexport build`` (the embedded default) in a new empty folder, and ``pytest -q -m fast``
in this checkout, both with the new environment's python. It writes the versions pip installed (``pip list``), the
torch wheels it weighed and why each was or was not taken, each step's exit code, counts and wall time, and the load
average before and after (wall time on a shared machine grows with the load). Exit 0 when both steps passed, 1 when
one failed, 2 for bad arguments or an install pip refused (its last lines are written too).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ONNXRUNTIME = "1.32.0"
TRANSFORMERS = "5.24.0"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# The packages set by this check rather than by constraints.txt's pins.
OVERRIDDEN = {"onnxruntime", "transformers", "torch"}
# A requirement naming one of these makes a torch wheel the CUDA build (torch 2.14.1's PyPI wheel requires
# cuda-toolkit, cuda-bindings and nvidia-*-cu13).
CUDA_REQUIREMENT = re.compile(r"^Requires-Dist:\s*(nvidia-|cuda-)", re.IGNORECASE | re.MULTILINE)
WHEEL = re.compile(r"torch-(?P<version>[0-9][^-]*)-(?P<python>cp\d+)-(?P=python)-(?P<platform>[^/\"#<]+)\.whl")


def version_key(version: str) -> tuple[Any, ...]:
    """Sort key of a version such as ``2.13.0+cpu`` (the local part after ``+`` ignored; packaging is not needed)."""
    public = version.split("+")[0]
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.]", public))


def _python_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def local_wheels(folders: list[Path]) -> list[dict[str, Any]]:
    """The torch wheels in ``folders`` for this python and platform, each with whether it is a CPU build and why."""
    found = []
    for folder in folders:
        for path in sorted(folder.glob("torch-*.whl")) if folder.is_dir() else []:
            match = WHEEL.fullmatch(path.name)
            if not match or match["python"] != _python_tag() or "x86_64" not in match["platform"]:
                continue
            with zipfile.ZipFile(path) as wheel:
                name = next((n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")), "")
                metadata = wheel.read(name).decode("utf-8", "replace") if name else ""
            cuda = CUDA_REQUIREMENT.search(metadata)
            found.append({"version": match["version"], "source": str(path), "cpu": not cuda,
                          "why": f"requires {cuda.group(1)}* (the CUDA build)" if cuda else
                          "requires no CUDA package"})  # fmt: skip
    return found


def index_wheels(url: str, timeout: float = 20.0) -> tuple[list[dict[str, Any]], str]:
    """The ``+cpu`` torch wheels ``url``'s simple index lists for this python (Linux x86_64), and a note on the
    index (empty when it answered).
    """  # noqa: D205
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/torch/", timeout=timeout) as response:  # noqa: S310
            page = response.read().decode("utf-8", "replace")
    except OSError as exc:
        return [], f"{url} not reachable ({type(exc).__name__}: {exc})"
    ours = [m for m in WHEEL.finditer(page) if m["python"] == _python_tag() and "linux_x86_64" in m["platform"]]
    versions = {m["version"] for m in ours if "+cpu" in m["version"]}
    return [{"version": v, "source": url, "cpu": True, "why": "a +cpu wheel of the CPU index"} for v in versions], ""


def newest_cpu_torch(candidates: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest CPU build among ``candidates`` (None when there is none)."""
    cpu = [c for c in candidates if c["cpu"]]
    return max(cpu, key=lambda c: version_key(c["version"])) if cpu else None


def constraints(pins: Path, torch: str, onnxruntime: str, transformers: str, genai: str | None) -> str:
    """constraints.txt's direct pins (the part above "Brought in by those") with this check's versions in place."""
    text = pins.read_text()
    direct = text.split("# Brought in by those:")[0]
    lines = []
    for line in direct.splitlines():
        name = re.split(r"[=<>!~ ]", line.strip(), maxsplit=1)[0].lower()
        if not line.strip() or line.startswith("#") or name in OVERRIDDEN or (genai and name == "onnxruntime-genai"):
            continue
        lines.append(line.strip())
    lines += [f"torch=={torch}", f"onnxruntime=={onnxruntime}", f"transformers=={transformers}"]
    if genai:
        lines.append(f"onnxruntime-genai=={genai}")
    return "\n".join(lines) + "\n"


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def step(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """One command run to its end: exit code, wall seconds, load before and after, the last lines it printed."""
    before, start = _load(), time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    tail = (done.stdout + done.stderr).strip().splitlines()[-25:]
    return {"command": " ".join(argv), "exit": done.returncode, "wall_s": round(wall, 1),
            "load_average_1min": {"before": before[0], "after": _load()[0]}, "tail": tail}  # fmt: skip


def fast_tier_counts(tail: list[str]) -> dict[str, int]:
    """passed / failed / skipped / error counts from pytest's summary line."""
    summary = next((line for line in reversed(tail) if re.search(r"\d+ (passed|failed)", line)), "")
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", summary)}


def main(argv: list[str] | None = None) -> int:
    """Install, run, write (module doc)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venv", type=Path, required=True, help="the environment to make (removed first)")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--onnxruntime", default=ONNXRUNTIME)
    parser.add_argument("--transformers", default=TRANSFORMERS)
    parser.add_argument("--onnxruntime-genai", default=None, help="default: constraints.txt's pin")
    parser.add_argument("--torch-index", default=TORCH_INDEX, help="a simple index of CPU torch wheels")
    parser.add_argument("--wheels", type=Path, action="append", default=[], help="a folder of wheels (repeatable)")
    parser.add_argument("--skip-fast-tier", action="store_true", help="install and build only")
    args = parser.parse_args(argv)
    if args.venv.resolve() in (ROOT, ROOT / ".venv"):
        print("--venv: must not be this checkout or its .venv (the check's environment is its own)", file=sys.stderr)
        return 2
    folders = args.wheels + [Path(p) for p in os.environ.get("PIP_FIND_LINKS", "").split() if p]
    candidates = local_wheels(folders)
    remote, unreachable = index_wheels(args.torch_index)
    candidates += remote
    torch = newest_cpu_torch(candidates)
    document: dict[str, Any] = {
        "tool": "tools/newest_versions.py",
        "command": "python tools/newest_versions.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip(),  # fmt: skip
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "python": platform.python_version(),
        "asked": {"onnxruntime": args.onnxruntime, "transformers": args.transformers,
                  "onnxruntime-genai": args.onnxruntime_genai or "constraints.txt's pin"},
        "torch_candidates": candidates, "torch_index": unreachable or f"{args.torch_index} answered",
    }  # fmt: skip
    if torch is None:
        document["error"] = "no CPU build of torch reachable (find-links folders and the CPU index)"
        return _write(args.out, document, 2)
    document["torch_taken"] = torch
    shutil.rmtree(args.venv, ignore_errors=True)
    python = str(args.venv / "bin" / "python")
    pins = Path(tempfile.mkdtemp(prefix="newest-versions-")) / "constraints.txt"
    pins.write_text(constraints(ROOT / "constraints.txt", torch["version"], args.onnxruntime, args.transformers,
                                args.onnxruntime_genai))  # fmt: skip
    extra = ["--extra-index-url", args.torch_index] if torch["source"] == args.torch_index else []
    install = step([sys.executable, "-m", "venv", str(args.venv)], ROOT)
    if install["exit"] == 0:
        install = step([python, "-m", "pip", "install", "-q", "-c", str(pins), *extra, "-e", ".[cpu,test]"], ROOT)
    document["install"] = install | {"constraints": pins.read_text().splitlines()}
    if install["exit"] != 0:
        return _write(args.out, document, 2)
    listed = subprocess.run([python, "-m", "pip", "list", "--format", "json"], capture_output=True, text=True)
    installed = {p["name"].lower(): p["version"] for p in json.loads(listed.stdout or "[]")}
    document["installed"] = installed
    document["got"] = {n: installed.get(n) for n in ("torch", "onnxruntime", "onnxruntime-genai", "transformers",
                                                    "onnx", "numpy", "tokenizers", "safetensors")}  # fmt: skip
    cuda = sorted(n for n in installed if n.startswith(("nvidia-", "cuda-")))
    document["cuda_packages"] = cuda  # none expected: the CPU torch was asked for
    work = Path(tempfile.mkdtemp(prefix="newest-build-"))
    build = step([str(args.venv / "bin" / "ropeexport"), "build", "--quiet"], work)
    index = work / "ropeexport-out" / "index.json"
    entries = json.loads(index.read_text())["artifacts"] if index.is_file() else []
    build |= {"artifacts": len(entries), "passed": sum(bool(e.get("passed")) for e in entries)}
    shutil.rmtree(work, ignore_errors=True)
    document["default_build"] = build
    passed = build["exit"] == 0
    if not args.skip_fast_tier:
        fast = step([python, "-m", "pytest", "-q", "-m", "fast", "-p", "no:cacheprovider"], ROOT)
        fast["counts"] = fast_tier_counts(fast["tail"])
        fast["failures"] = [line for line in fast["tail"] if line.startswith(("FAILED", "ERROR"))]
        document["fast_tier"] = fast
        passed = passed and fast["exit"] == 0
    document["passed"] = passed
    return _write(args.out, document, 0 if passed else 1)


def _write(out: Path, document: dict[str, Any], code: int) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2) + "\n")
    got = document.get("got", {})
    print(f"newest versions: {', '.join(f'{k} {v}' for k, v in got.items()) or 'not installed'}; "
          f"build exit {document.get('default_build', {}).get('exit')}, fast tier "
          f"{document.get('fast_tier', {}).get('counts')}; written {out}", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
