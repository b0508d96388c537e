"""Decoders with int4 weights beside fp32 and fp16: positional fidelity, quantization cost and size, per checkpoint.

    python tools/quantized_figures.py --out tools/figures                  # tiny and medium checkpoints
    python tools/quantized_figures.py --sizes tiny --out /tmp/quantized    # the tiny one alone (a minute)

Each checkpoint is a random Llama written by transformers' ``save_pretrained`` (safetensors, seed 0): ``tiny``
(hidden 64, 2 layers, vocabulary 512) and ``medium`` (hidden 512, 4 layers, 8 query / 4 KV heads of 64, MLP 1408,
vocabulary 8192). Each variant is ``rx.build_decoder(checkpoint=..., eager=False)`` with its dtype and weight format,
every scenario verified. Per variant: the positional fidelity (worst call's max |logit error| over the logit scale
against the float64 recompute with the weights the model holds, judged by the tolerance beside it), the
quantization cost (the same against the float64 recompute with the checkpoint's weights unquantized; reported, not
judged) with the greedy agreement of the model with that recompute, the model's bytes (model.onnx and its data) and
the build's seconds (export and verification). Writes ``quantized.json`` and ``quantized.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ropeexport as rx  # noqa: E402

SIZES = {
    "tiny": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "intermediate_size": 176, "vocab_size": 512},
    "medium": {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
               "intermediate_size": 1408, "vocab_size": 8192},
}  # fmt: skip
# (label, dtype, build_decoder's weight-format arguments)
VARIANTS: list[tuple[str, str, dict[str, Any]]] = [
    ("fp32", "fp32", {}),
    ("fp16", "fp16", {}),
    ("fp32 int4 b32", "fp32", {"weight_format": "int4", "block_size": 32}),
    ("fp32 int4 b128", "fp32", {"weight_format": "int4", "block_size": 128}),
    ("fp16 int4 b32", "fp16", {"weight_format": "int4", "block_size": 32}),
    ("fp32 int4 b32 level 4", "fp32", {"weight_format": "int4", "block_size": 32, "accuracy_level": 4}),
]


def checkpoint(folder: Path, fields: dict[str, Any]) -> Path:
    """A random Llama of ``fields`` saved by transformers (seed 0), with max_position_embeddings 4096."""
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model("llama", **fields, max_position_embeddings=4096, rope_theta=500000.0,
                                               bos_token_id=1, eos_token_id=2)  # fmt: skip
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


def measure(ckpt: Path, out: Path, dtype: str, weights: dict[str, Any]) -> dict[str, Any]:
    """One variant built and verified (module doc), its figures."""
    began = time.perf_counter()
    result = rx.build_decoder(out, checkpoint=ckpt, dtype=dtype, eager=False, **weights)
    seconds = time.perf_counter() - began
    summaries = [s["summary"] for s in result.report["scenarios"]]
    row: dict[str, Any] = {
        "name": result.path.name,
        "passed": result.passed,
        "fidelity": max(s["worst_rel"] for s in summaries),
        "tolerance": result.report["tolerance"]["rel"],
        "bytes": sum(f.stat().st_size for f in result.path.glob("model.onnx*")),
        "seconds": round(seconds, 1),
    }
    if "cost_rel" in summaries[0]:
        agree = [tuple(int(x) for x in s["cost_agreement"].split("/")) for s in summaries]
        row["cost"] = max(s["cost_rel"] for s in summaries)
        row["cost_agreement"] = f"{sum(a for a, _ in agree)}/{sum(b for _, b in agree)}"
    return row


def table(figures: dict[str, Any]) -> str:
    """quantized.md: one table per checkpoint."""
    lines = ["# Quantized decoders: positional fidelity and quantization cost", "",
             f"ONNX Runtime {figures['versions']['onnxruntime']}, {figures['machine']}. Fidelity: against the float64 "
             "recompute with the weights the model holds (judged by the tolerance); cost: against the float64 "
             "recompute with the checkpoint's weights unquantized (reported, not judged); both the worst call's max "
             "|logit error| over the logit scale. Reproduce: `python tools/quantized_figures.py --out tools/figures`.",
             ""]  # fmt: skip
    for size, block in figures["checkpoints"].items():
        lines += [f"## {size}: {block['parameters'] / 1e6:.1f}M parameters ({json.dumps(block['config'])})", "",
                  "| variant | passed | fidelity | tolerance | quantization cost | agreement with unquantized | "
                  "model | build + verify |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for label, row in block["variants"].items():
            cost = f"{row['cost']:.1e}" if "cost" in row else "-"
            lines.append(f"| {label} | {row['passed']} | {row['fidelity']:.1e} | {row['tolerance']:g} | {cost} | "
                         f"{row.get('cost_agreement', '-')} | {row['bytes'] / 2**20:.2f} MiB | {row['seconds']} s |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    """Measure (module doc)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import onnxruntime

    versions = {"onnxruntime": onnxruntime.__version__, "python": platform.python_version()}
    figures: dict[str, Any] = {"versions": versions, "machine": f"{platform.machine()}, {platform.system()}",
                               "checkpoints": {}}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            ckpt = checkpoint(Path(tmp) / size, SIZES[size])
            import safetensors.numpy

            tensors = safetensors.numpy.load_file(str(ckpt / "model.safetensors"))
            block: dict[str, Any] = {"config": SIZES[size], "variants": {},
                                     "parameters": sum(t.size for t in tensors.values())}  # fmt: skip
            for label, dtype, weights in VARIANTS:
                block["variants"][label] = measure(ckpt, Path(tmp) / "out", dtype, weights)
                print(size, label, block["variants"][label], flush=True)
            figures["checkpoints"][size] = block
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "quantized.json").write_text(json.dumps(figures, indent=1) + "\n")
    (args.out / "quantized.md").write_text(table(figures))


if __name__ == "__main__":
    main()
