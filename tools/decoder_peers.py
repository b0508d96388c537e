"""Decoder peers: ropeexport's decoder next to transformers and torch.onnx's exports of it, at far positions.

    .venv/bin/python tools/decoder_peers.py --out tools/figures
    .venv/bin/python tools/decoder_peers.py --configs llama-3.1-8b --out /tmp/peers      # one config

For each model card (``models/<name>.toml``, its ``[config]`` table) a tiny decoder of the same config is resolved
(2 layers, hidden 256 (192 for head_dim 96: the width must be a multiple of head_dim), vocabulary 512; the positional
schedule untouched) with ropeexport's seeded weights (deterministic). One prompt of 16 seeded token ids, batch 1,
attention_mask all ones, no cache, sits at position_ids P-15..P for P in 4096, 32768, 131071 (P >= the decoder's
max_positions skipped). Every row's logits at all 16 positions are compared with the float64 truth, a no-cache full
recompute in float64 of the same (fp32-stored) weights at exact positions (``ropeexport.decoder.oracle``):

- ``ropeexport``: ``build_decoder_graph`` (fp32, fused), run by ONNX Runtime (CPU);
- ``transformers-eager``: transformers' own model (fp32, eager attention) of the same config and weights;
- ``torch-dynamo`` / ``torch-legacy``: that same transformers model through ``torch.onnx.export(dynamo=True)`` /
  ``(dynamo=False)`` with input_ids, attention_mask, position_ids (use_cache=False), exported ONCE per config at
  16 tokens with position_ids 0..15 (what an export script traces with), then run by ONNX Runtime at every P:
  a table or branch baked at trace time shows up as an error at the far positions.

Errors: max |logits - float64| and that over max |float64 logit| (rel); argmax agreement over the 16 positions.
Verdict: ok when rel <= 1e-4 (ropeexport's fp32 decoder tolerance); over tol when above it but rel <= 1e-2 with
every argmax agreeing (fp32 rounding of the angles, not a wrong schedule); else WRONG. Every exporter runs in its own
subprocess (``--worker``): a dynamo export leaves a fake tensor inside transformers' LongRoPE module, so eager numbers
are never taken in a process that exported. Nothing is downloaded. Writes ``decoder-peers.json`` (numbers, versions,
the command) and ``decoder-peers.md`` (the table) under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

CONFIGS = ("llama-3.1-8b", "phi-3-mini-128k", "qwen2.5-7b")
POSITIONS = (4096, 32768, 131071)
EXPORTERS = ("dynamo", "legacy")
TOKENS, SEED, REL_TOL, WRONG_REL = 16, 1234, 1e-4, 1e-2


def setup(card: str) -> tuple[Any, dict[str, Any], dict[str, np.ndarray]]:
    """(spec, shrunk transformers config, seeded weights) of a model card: identical in every process."""
    from ropeexport.decoder.build import DecoderRequest, resolve
    from ropeexport.decoder.weights import seeded_weights

    config = tomllib.loads((ROOT / "models" / f"{card}.toml").read_text())["config"]
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    hidden = 256 if 256 % head_dim == 0 else 2 * head_dim
    request = DecoderRequest(preset=card, num_layers=2, hidden_size=hidden, vocab_size=512)
    spec, used = resolve(request)
    return spec, used, seeded_weights(spec)


def feeds(spec: Any, last: int) -> dict[str, np.ndarray]:
    """The prompt: 16 seeded ids at position_ids last-15..last, mask all ones."""
    ids = np.random.default_rng(SEED).integers(0, spec.vocab_size, (1, TOKENS), dtype=np.int64)
    pos = np.arange(last - TOKENS + 1, last + 1, dtype=np.int64)[None]
    return {"input_ids": ids, "attention_mask": np.ones((1, TOKENS), np.int64), "position_ids": pos}


def positions(spec: Any) -> list[int]:
    """The target positions below the decoder's max_positions."""
    return [p for p in POSITIONS if p < int(spec.position["max_positions"])]


def first_line(exc: BaseException) -> str:
    """The error's type and first non-empty line."""
    lines = [s for s in str(exc).splitlines() if s.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def ort_session(path: Path) -> Any:
    """An ONNX Runtime CPU session."""
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def worker(exporter: str, card: str, result: Path) -> None:
    """Export the transformers model with one torch.onnx exporter, run it in ONNX Runtime at every P; write npz."""
    import torch

    from ropeexport.decoder.reference import TransformersReference

    spec, used, weights = setup(card)
    model = TransformersReference(spec, used, weights).model
    out: dict[str, Any] = {}
    example = {k: torch.from_numpy(v) for k, v in feeds(spec, TOKENS - 1).items()}  # positions 0..15
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        start = time.perf_counter()
        try:
            with torch.no_grad():
                if exporter == "dynamo":
                    torch.onnx.export(model, (), str(path), kwargs=example | {"use_cache": False}, dynamo=True,
                                      input_names=list(example), output_names=["logits"])  # fmt: skip
                else:
                    names = list(example)

                    class Wrapped(torch.nn.Module):  # the legacy exporter takes positional inputs only
                        def __init__(self) -> None:
                            super().__init__()
                            self.inner = model

                        def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any) -> Any:
                            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                                              position_ids=position_ids, use_cache=False).logits  # fmt: skip

                    torch.onnx.export(Wrapped(), tuple(example.values()), str(path), dynamo=False,
                                      input_names=names, output_names=["logits"], opset_version=17)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the table records any failure
            out["error"] = f"fails to export: {first_line(exc)}"
            out["traceback"] = traceback.format_exc()[-3000:]
        out["export_s"] = round(time.perf_counter() - start, 2)
        if "error" not in out:
            try:
                session = ort_session(path)
                wanted = {i.name for i in session.get_inputs()}
                for p in positions(spec):
                    out[f"P{p}"] = session.run(None, {k: v for k, v in feeds(spec, p).items() if k in wanted})[0]
            except Exception as exc:  # noqa: BLE001
                out["error"] = f"fails in ONNX Runtime: {first_line(exc)}"
    np.savez(result, **{k: np.asarray(v) for k, v in out.items()})


def compare(got: np.ndarray, truth: np.ndarray) -> dict[str, Any]:
    """Errors of one row's logits against the float64 truth, and the verdict."""
    got = np.asarray(got, np.float64).reshape(truth.shape)
    err = float(np.abs(got - truth).max())
    rel = err / float(np.abs(truth).max())
    agree = int((got.argmax(-1) == truth.argmax(-1)).sum())
    verdict = "ok" if rel <= REL_TOL else "over tol" if rel <= WRONG_REL and agree == truth.shape[1] else "WRONG"
    return {"max_abs": err, "rel": rel, "argmax_agree": f"{agree}/{truth.shape[1]}", "verdict": verdict}


def measure(card: str, exporters: list[str]) -> list[dict[str, Any]]:
    """Every row of one config (eager in this process, which never exports; each exporter in a subprocess)."""
    from ropeexport.catalog import recipe_for
    from ropeexport.decoder.export import build_decoder_graph, cache_names
    from ropeexport.decoder.oracle import decoder_float64, stored_float64
    from ropeexport.decoder.reference import TransformersReference
    from ropeexport.graph.onnx_io import save_model

    spec, used, weights = setup(card)
    piece = recipe_for(spec.position_spec()).piece(spec.position_spec())
    w64 = stored_float64(spec, weights)
    kv, head_dim = spec.position["num_kv_heads"], spec.position["head_dim"]
    empty = np.zeros((1, kv, 0, head_dim), np.float32)
    ps = positions(spec)
    peers: dict[str, dict[str, Any]] = {}
    for exporter in exporters:
        with tempfile.TemporaryDirectory() as tmp:
            result = Path(tmp) / "result.npz"
            command = [sys.executable, __file__, "--worker", exporter, "--configs", card, "--out", str(result)]
            run = subprocess.run(command, capture_output=True, text=True, timeout=900)
            if not result.exists():
                tail = (run.stderr or run.stdout).strip().splitlines()
                peers[exporter] = {"error": f"worker died (rc {run.returncode}): {tail[-1] if tail else ''}"}
                continue
            with np.load(result) as z:
                peers[exporter] = {k: z[k] if k.startswith("P") else z[k].item() for k in z.files}
    with tempfile.TemporaryDirectory() as tmp:
        save_model(build_decoder_graph(spec, weights, "seeded"), Path(tmp))
        session = ort_session(Path(tmp) / "model.onnx")
        reference = TransformersReference(spec, used, weights)
        rows = []
        for p in ps:
            f = feeds(spec, p)
            truth = decoder_float64(spec, w64, f["input_ids"], f["position_ids"], f["attention_mask"],
                                    piece.rotate64, piece.bias64)  # fmt: skip
            past = {n: empty for i in range(spec.num_layers) for n in cache_names(i)[:2]}
            got = {"ropeexport": session.run(["logits"], f | past)[0]}
            reference.fresh()
            got["transformers-eager"] = reference.logits(f["input_ids"], f["position_ids"], f["attention_mask"])
            for exporter, peer in peers.items():
                got[f"torch-{exporter}"] = peer.get(f"P{p}", peer.get("error", "no output"))
            for row, value in got.items():
                record = {"config": card, "position": p, "row": row, "decoder": spec.name}
                if isinstance(value, str):
                    record |= {"max_abs": None, "rel": None, "argmax_agree": None, "verdict": value}
                else:
                    record |= compare(value, truth)
                if row.startswith("torch-"):
                    peer = peers[row.removeprefix("torch-")]
                    record |= {"export_s": peer.get("export_s"), "traceback": peer.get("traceback")}
                rows.append(record)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table."""
    out = ["| config | position | row | max abs err | rel err | argmax | verdict |",
           "|---|---:|---|---:|---:|---:|---|"]  # fmt: skip
    for r in rows:
        num = lambda x: "-" if x is None else f"{x:.2e}"  # noqa: E731
        out.append(f"| {r['config']} | {r['position']} | {r['row']} | {num(r['max_abs'])} | {num(r['rel'])} | "
                   f"{r['argmax_agree'] or '-'} | {r['verdict']} |")  # fmt: skip
    return "\n".join(out) + "\n"


def versions() -> dict[str, str]:
    """Versions of everything measured."""
    import onnx
    import onnxruntime
    import torch
    import transformers

    from ropeexport.version import __version__

    found = {
        "python": platform.python_version(),
        "ropeexport": __version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
    }
    try:
        import onnxscript

        found["onnxscript"] = onnxscript.__version__
    except ImportError:
        pass
    return found


def main() -> None:
    """Measure every config (or, with --worker, one exporter of one config) and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "tools" / "figures"), help="folder for decoder-peers.json/.md")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), help="model cards under models/")
    parser.add_argument("--exporters", nargs="*", default=list(EXPORTERS), choices=EXPORTERS)
    parser.add_argument("--worker", choices=EXPORTERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.configs[0], Path(args.out))
    start, rows = time.perf_counter(), []
    for card in args.configs:
        rows += measure(card, args.exporters)
    table = markdown(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = " ".join([".venv/bin/python", str(Path(__file__).resolve().relative_to(ROOT))] + sys.argv[1:])
    record = {"command": command, "versions": versions(), "platform": platform.platform(), "tokens": TOKENS,
              "seed": SEED, "positions": list(POSITIONS), "rel_tolerance": REL_TOL, "wrong_rel": WRONG_REL,
              "reference": "float64 no-cache full recompute, exact positions (ropeexport.decoder.oracle)",
              "export_example": "batch 1, 16 tokens, position_ids 0..15, mask ones, use_cache=False",
              "seconds": round(time.perf_counter() - start, 1), "rows": rows}  # fmt: skip
    (out / "decoder-peers.json").write_text(json.dumps(record, indent=2) + "\n")
    (out / "decoder-peers.md").write_text(f"Command: `{command}`\n\n" + table)
    print(table)


if __name__ == "__main__":
    main()
