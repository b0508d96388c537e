"""Every architecture's tiny decoder packaged for transformers.js and run in Node: the table of issue 42.

For each row (a tiny checkpoint of tests/decoder/tiny.py, its graph form, dtype and weight settings) this builds the
decoder (``rx.build_decoder``, verified as every build is), packages it (``ropeexport.api.packages.package``: Node
runs transformers.js 4.3.1's ``generate`` on both prompts of the check, 12 tokens at position 0 and the long prompt),
and prints one line per row: the package's file, whether Node's greedy tokens equal ONNX Runtime (Python)'s on both
prompts, the worst logit difference transformers.js handed its logits processors as a fraction of the logit scale, and
the bound the check holds it to. A row that is refused (``package`` exits 2) prints the one line it gives. Exit 0
when every row ran in Node and passed, else 1; 2 for bad arguments.

    python tools/transformersjs_every.py WORK_DIR [--rows NAME ...] [--json OUT.json]

Rows are named ``checkpoint-graph-dtype-variant`` (``--list`` prints them). The npm packages must be installed first
(``ONNXRUNTIME_NODE_INSTALL=skip npm ci --prefix tools/transformersjs``). Tiny random checkpoints, nothing downloaded.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.decoder.tiny: the tiny checkpoints

import onnx  # noqa: E402

import ropeexport as rx  # noqa: E402
from ropeexport.api.packages import package  # noqa: E402
from ropeexport.errors import SpecError  # noqa: E402

# variant -> the build's weight settings. "int4": MatMulNBits blocks of 32 (QMoE where the gqa form holds a mixture
# that fits it); a head tied to the embedding is then int4 too, the embedding gathered from its bytes
# (com.microsoft GatherBlockQuantized: ``decoder.build.resolve``).
VARIANTS: dict[str, dict[str, object]] = {"": {}, "int4": {"weight_format": "int4"}}
# Every architecture ropeexport builds but the Qwen-VL text decoders (refused: docs/how-to/transformers-js.md), in
# int4 with fp32 activations (model_q4.onnx), fused form (tied heads, where the checkpoint ties it: gemma2, gemma3,
# cohere2, gemma4); Gemma 4's mixture in fp32 and in int4, fused and gqa, and gqa q4f16 (fp16 activations).
ROWS: list[tuple[str, str, str, str]] = [
    ("llama", "fused", "fp32", "int4"), ("mistral-window", "fused", "fp32", "int4"),
    ("qwen2-yarn", "fused", "fp32", "int4"), ("phi3-longrope", "fused", "fp32", "int4"),
    ("gpt_neox", "fused", "fp32", "int4"), ("gptj", "fused", "fp32", "int4"), ("bloom", "fused", "fp32", "int4"),
    ("qwen3", "fused", "fp32", "int4"), ("gemma3", "fused", "fp32", "int4"), ("gemma2", "fused", "fp32", "int4"),
    ("smollm3-nope", "fused", "fp32", "int4"), ("gpt_oss", "fused", "fp32", "int4"),
    ("cohere2", "fused", "fp32", "int4"), ("olmo3", "fused", "fp32", "int4"), ("qwen3_moe", "fused", "fp32", "int4"),
    ("ministral3", "fused", "fp32", "int4"), ("llama4", "fused", "fp32", "int4"),
    ("deepseek_v3", "fused", "fp32", "int4"), ("glm4", "fused", "fp32", "int4"), ("exaone4", "fused", "fp32", "int4"),
    ("gemma4", "fused", "fp32", "int4"), ("gemma4-ple", "fused", "fp32", "int4"),
    ("gemma4-moe", "fused", "fp32", ""), ("gemma4-moe", "fused", "fp32", "int4"),
    ("gemma4-moe", "gqa", "fp32", "int4"), ("gemma4-moe", "gqa", "fp16", "int4"),
]  # fmt: skip


def row_name(row: tuple[str, str, str, str]) -> str:
    """``checkpoint-graph-dtype[-variant]``."""
    return "-".join(filter(None, row))


def run_row(row: tuple[str, str, str, str], work: Path) -> dict[str, Any]:
    """Build, package and check one row (module doc): a dict of what the table prints."""
    from tests.decoder.tiny import checkpoint  # torch and transformers: imported only when a row runs

    name, graph, dtype, variant = row
    folder = work / row_name(row)
    shutil.rmtree(folder, ignore_errors=True)
    ckpt = checkpoint(folder / "checkpoint", name)
    start = time.perf_counter()
    try:
        built = rx.build_decoder(folder / "decoders", checkpoint=ckpt, graph=graph, dtype=dtype, eager=False,
                                 **VARIANTS[variant])  # fmt: skip
    except SpecError as error:
        return {"row": row_name(row), "status": "not built", "why": str(error)}
    if not built.passed:
        return {"row": row_name(row), "status": "build failed", "why": str(built.path)}
    build_s = time.perf_counter() - start
    try:
        result = package(built.path, folder / "web")
    except SpecError as error:
        return {"row": row_name(row), "status": "refused", "why": str(error)}
    engines = {e["name"]: e for e in result.report["engines"]}
    node = engines["transformers.js"]
    prompts = node.get("prompts") or []
    files = sorted(str(p.relative_to(result.path)) for p in (result.path / "onnx").glob("*.onnx"))
    ops = sorted({n.op_type for f in files for n in onnx.load(str(result.path / f), load_external_data=False).graph.node
                  if n.domain == "com.microsoft"})  # fmt: skip
    return {"row": row_name(row), "status": node["status"], "passed": result.passed, "files": files, "ms_ops": ops,
            "tokens_equal": bool(prompts) and all(p["tokens"] == p["expected"] for p in prompts),
            "prompt_tokens": [p.get("prompt_tokens") for p in prompts],
            "generated": [len(p["tokens"]) for p in prompts],
            "worst_rel": max((p["worst_rel"] for p in prompts if p["worst_rel"] is not None), default=None),
            "bound": result.report["bound"], "build_s": round(build_s, 1),
            "package_s": result.seconds, "why": node.get("why")}  # fmt: skip


def main() -> int:
    """Run the rows asked for and print the table (module doc)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work", nargs="?", type=Path)
    parser.add_argument("--rows", nargs="*", help="row names (default: every row)")
    parser.add_argument("--list", action="store_true", help="print the row names and exit")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    names = {row_name(r): r for r in ROWS}
    if args.list:
        print("\n".join(names))
        return 0
    unknown = [n for n in args.rows or [] if n not in names]
    if unknown or args.work is None:
        print(f"error: --rows: unknown {', '.join(unknown)}; the rows are the names --list prints" if unknown else
              "error: WORK: give the folder to build the rows in", file=sys.stderr)  # fmt: skip
        return 2
    results = []
    for name in args.rows or list(names):
        out = run_row(names[name], args.work)
        results.append(out)
        print(json.dumps(out), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    # a row passes only where Node ran it (``package`` passes with transformers.js skipped where node is absent)
    return 0 if all(r.get("passed") and r["status"] == "ran" for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
