"""A transformers.js package checked: greedy tokens from the package equal the decoder's own.

Two prompts (``PROMPTS``): 12 tokens at position 0, and a long one (256 tokens, or what the context leaves), each
followed by ``STEPS`` greedy steps. The decoder's own tokens are ropeexport's greedy loop (``decoder.greedy``) on the
decoder's model.onnx in ONNX Runtime (Python, CPU) under the ``keep`` policy: one prefill call, then one call per
token with the cache kept, which is what transformers.js's ``generate`` does. They are recorded in the package
(``reference.json``, hashed in its manifest) when it is written.

Each check then runs the package and compares:

- ``onnxruntime``: the packaged model in ONNX Runtime (Python), the same loop: tokens equal, every step's logits
  within ``bound`` of the logit scale (max |logit| of the decoder's row).
- ``transformers.js``: the package loaded by transformers.js itself in Node (``tools/transformersjs/generate.mjs``,
  onnxruntime-node on the CPU): its ``generate`` (greedy, eos not stopping it), tokens equal, and the logits it hands
  its logits processors (it returns no scores; a processor that records them and returns them unchanged reads them)
  within the same bound. Where node or the npm packages are absent the check says so and does not run.

``bound`` is twice the decoder's own tolerance against float64 (``decoder.verify.tolerance``): each runtime's logits
are within it of the float64 truth, so the two are within twice it of each other.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.decoder.greedy import run_scenario
from ropeexport.decoder.scenarios import Scenario
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.decoder.transformersjs import embed_file, suffix
from ropeexport.decoder.verify import tolerance
from ropeexport.runtimes.ort import CPU, OrtRunner

STEPS = 16
LONG = 256
REFERENCE = "reference.json"
# Where generate.mjs and its node_modules are: this variable, else the checkout's tools/transformersjs.
NODE_DIR_VARIABLE = "ROPEEXPORT_TRANSFORMERSJS_DIR"
NODE_TIMEOUT = 900.0


def prompts(spec: DecoderSpec) -> list[tuple[str, int]]:
    """(name, prompt length) of the two prompts (module doc)."""
    top = int(spec.position_spec().max_positions)
    return [("position-0", 12), ("long-prompt", max(12, min(LONG, top - STEPS - 2)))]


def bound(spec: DecoderSpec) -> float:
    """How far two runtimes' logits may be apart, over the logit scale (module doc)."""
    return 2.0 * tolerance(spec)


@dataclass(frozen=True)
class Greedy:
    """One greedy run: the prompt's ids, the new tokens, and each step's last-position logits [steps, vocab]."""

    name: str
    prompt: list[int]
    tokens: list[int]
    logits: np.ndarray


def ort_greedy(model: Path, spec: DecoderSpec, embed: Path | None = None) -> list[Greedy]:
    """Both prompts on ``model`` in ONNX Runtime (Python, CPU), ropeexport's loop under ``keep`` (module doc). With
    ``embed`` (a two-file package: ``transformersjs_split``), each call's input_ids go through it first and the model
    is fed its outputs, as transformers.js feeds them. A package model that takes one row of positions where the decoder
    takes three (a Qwen-VL text decoder: ``transformersjs_rows``) is fed that row, the one the three equal rows repeat.
    """  # noqa: D205
    runner = OrtRunner(model, providers=[CPU])
    infer = runner.infer
    if embed is not None:
        first = OrtRunner(embed, providers=[CPU])

        def infer(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            ids = {"input_ids": feeds["input_ids"]}
            rest = {k: v for k, v in feeds.items() if k != "input_ids"}
            return runner.infer(first.infer(ids) | rest)
    positions = spec.positions
    taken = next((i for i in runner.session.get_inputs() if i.name == positions.name), None)
    # a Qwen-VL package: its prefix makes the three rows from one (transformersjs_rows)
    if not positions.one_axis and taken is not None and len(taken.shape) == 2:
        axes = infer

        def infer(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            fed = feeds[positions.name]  # [axes, b, s], text only: the same row on every axis
            assert (fed == fed[:1]).all(), "a text-only prompt's position rows are equal"
            return axes(feeds | {positions.name: fed[0]})

    out = []
    for name, length in prompts(spec):
        calls = run_scenario(infer, spec, Scenario(name, (length,), STEPS, policy="keep"))
        rows = np.stack([np.asarray(c.logits[0, -1], np.float64) for c in calls])
        out.append(Greedy(name, calls[0].input_ids[0, :length].tolist(), rows.argmax(-1).tolist(), rows))
    return out


def reference_record(runs: Sequence[Greedy]) -> dict[str, Any]:
    """reference.json: each prompt's ids and the decoder's own tokens."""
    return {"engine_loop": "ropeexport greedy, policy keep, ONNX Runtime (Python, CPU), on the decoder's model.onnx",
            "prompts": [{"name": r.name, "prompt": r.prompt, "tokens": r.tokens} for r in runs]}  # fmt: skip


def node_dir() -> Path:
    """The folder of generate.mjs (module doc)."""
    given = os.environ.get(NODE_DIR_VARIABLE)
    return Path(given) if given else Path(__file__).resolve().parents[2] / "tools" / "transformersjs"


def node_missing() -> str | None:
    """Why transformers.js cannot run here (node, the script or its npm packages absent), or None."""
    folder = node_dir()
    if shutil.which("node") is None:
        return "node is not installed (transformers.js runs in Node 20)"
    if not (folder / "generate.mjs").is_file():
        return f"{folder / 'generate.mjs'} is absent (set {NODE_DIR_VARIABLE} to the folder holding it)"
    if not (folder / "node_modules" / "@huggingface" / "transformers").is_dir():
        return (f"the npm packages are not installed in {folder} (ONNXRUNTIME_NODE_INSTALL=skip npm ci "
                f"--prefix {folder})")  # fmt: skip
    return None


def node_greedy(package: Path, spec: DecoderSpec, prompt: Sequence[int], count: int) -> tuple[list[int], np.ndarray]:
    """transformers.js's greedy tokens and the logits its processors saw [count, vocab], from ``package`` in Node."""
    command = ["node", str(node_dir() / "generate.mjs"), str(package.resolve()), "--prompt-ids",
               ",".join(map(str, prompt)), "--max-new-tokens", str(count), "--dtype", suffix(spec)[0]]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=NODE_TIMEOUT, check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["(no output)"]
        # Node prints the throwing source line ("throw new Error(") before the error itself, and ends with its version
        errors = [line for line in lines if re.match(r"\s*\w*Error: ", line)]
        said = errors[0] if errors else next((line for line in lines if "Error" in line), lines[-1])
        raise RuntimeError(f"transformers.js failed (exit {done.returncode}): {said.strip()}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return [int(t) for t in result["tokens"]], np.asarray(result["logits"], np.float64).reshape(len(result["tokens"]),
                                                                                                -1)


def compare(reference: Greedy, tokens: list[int], logits: np.ndarray | None, limit: float) -> dict[str, Any]:
    """One prompt's verdict: tokens equal (the first that differs named), worst logit error over the logit scale."""
    row: dict[str, Any] = {"name": reference.name, "prompt_tokens": len(reference.prompt), "tokens": tokens,
                           "expected": reference.tokens}  # fmt: skip
    differs = next((i for i, (a, b) in enumerate(zip(tokens, reference.tokens, strict=False)) if a != b), None)
    if differs is None and len(tokens) != len(reference.tokens):
        differs = min(len(tokens), len(reference.tokens))
    row["first_difference"] = differs
    worst = None
    if logits is not None and reference.logits.size:
        n = min(len(logits), len(reference.logits))
        scale = np.maximum(np.abs(reference.logits[:n]).max(-1), 1e-30)
        worst = float((np.abs(logits[:n] - reference.logits[:n]).max(-1) / scale).max())
    row["worst_rel"] = worst
    row["passed"] = differs is None and (worst is None or worst <= limit)
    return row


def check(package: Path, model: Path, spec: DecoderSpec, expected: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The package's check (module doc): report.json's ``engines`` and verdict. ``expected``: reference.json's
    prompts (the decoder's own tokens); the packaged ``model`` is run in ONNX Runtime first, its logits the ones
    transformers.js's are compared with.
    """  # noqa: D205
    limit = bound(spec)
    embed = embed_file(spec)
    ours = ort_greedy(model, spec, None if embed is None else package / embed)
    recorded = [Greedy(e["name"], list(e["prompt"]), list(e["tokens"]), np.zeros((0, 0))) for e in expected]
    ort_rows = [compare(want, run.tokens, None, limit) | {"worst_rel": None}
                for want, run in zip(recorded, ours, strict=True)]  # fmt: skip
    for row, want, run in zip(ort_rows, recorded, ours, strict=True):
        if want.prompt != run.prompt:
            row["passed"], row["first_difference"] = False, "prompt"
    engines: list[dict[str, Any]] = [{"name": "onnxruntime", "status": "ran", "prompts": ort_rows,
                                      "passed": all(r["passed"] for r in ort_rows)}]  # fmt: skip
    missing = node_missing()
    if missing is not None:
        engines.append({"name": "transformers.js", "status": "skipped", "reason": missing, "passed": None})
    else:
        rows: list[dict[str, Any]] = []
        reason = None
        for run in ours:
            try:
                tokens, logits = node_greedy(package, spec, run.prompt, len(run.tokens))
            except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as exc:
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                break
            rows.append(compare(run, tokens, logits, limit))
        engine: dict[str, Any] = {"name": "transformers.js", "version": "4.3.1", "status": "ran", "prompts": rows,
                                  "passed": reason is None and all(r["passed"] for r in rows)}  # fmt: skip
        if reason is not None:
            engine["reason"] = reason
        engines.append(engine)
    passed = all(e["passed"] is not False for e in engines)
    return {"bound": limit, "steps": STEPS, "engines": engines, "passed": passed}
