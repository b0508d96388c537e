"""onnxruntime-genai 0.18 serving ropeexport's int4 mixtures of experts (issue 40): each tiny checkpoint built in int4
(``rx.build_decoder``, every scenario verified), run by ``ropeexport generate --engine onnxruntime-genai`` (its own
loop), its greedy tokens against float64 greedy on the dequantized weights (the whole sequence recomputed each step),
or the one line that says why it cannot serve the decoder.

Each row: the case (checkpoint, form, block), what holds its experts (QMoE or a MatMulNBits per expert), whether the
build wrote genai_config.json, the float64 tokens, the served tokens or the refusal, and the time. A 12-token prompt
at position 0 and 20 new tokens (onnxruntime-genai stops at its eos: a row that stopped early shows a shorter list,
unequal). Run by hand for docs/reference/decoders.md#int4-experts (minutes on 2 cores; one row is in CI:
``tests/decoder/test_int4_experts.py``):

    python tools/genai_int4.py --work /tmp/genai-int4 --out tools/figures
"""  # noqa: D205

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (tiny checkpoint, form, block size): each mixture in QMoE where it builds one and per expert
CASES = [("gpt_oss", "gqa", 16), ("gpt_oss", "fused", 16), ("qwen3_moe-qmoe", "gqa", 16),
         ("qwen3_moe-norm", "gqa", 16), ("llama4", "gqa", 16), ("deepseek_v3", "gqa", 16),
         ("deepseek_v3", "decomposed", 32)]  # fmt: skip
PROMPT, COUNT = [5, 17, 3, 60, 9, 41, 22, 11, 30, 2, 7, 50], 20


def row(work: Path, name: str, graph: str, block: int) -> dict[str, Any]:
    """One case (module doc)."""
    import numpy as np
    import onnx

    import ropeexport as rx
    from ropeexport.cli import main
    from ropeexport.decoder.build import DecoderRequest, resolve
    from ropeexport.decoder.checkpoint import load_checkpoint
    from ropeexport.decoder.oracle import decoder_float64, stored_float64
    from ropeexport.decoder.parts import position_pieces
    from tests.decoder.tiny import checkpoint

    start = time.time()
    ckpt = work / "checkpoints" / name
    if not (ckpt / "config.json").is_file():
        checkpoint(ckpt, name, 0)
    result = rx.build_decoder(work / f"{name}-{graph}-b{block}", checkpoint=ckpt, graph=graph, weight_format="int4",
                              block_size=block, eager=False)  # fmt: skip
    ops = Counter(n.op_type for n in onnx.load(str(result.path / "model.onnx"), load_external_data=False).graph.node)
    out: dict[str, Any] = {"case": f"{name}-{graph}-b{block}", "built_passed": result.passed,
                           "holder": "QMoE" if ops["QMoE"] else "MatMulNBits per expert",
                           "genai_config": (result.path / "genai_config.json").is_file()}  # fmt: skip
    spec, _ = resolve(DecoderRequest(checkpoint=ckpt, graph=graph, weight_format="int4", block_size=block))
    weights64, pieces = stored_float64(spec, load_checkpoint(spec, ckpt)), position_pieces(spec)
    sequence, truth = list(PROMPT), []
    for _ in range(COUNT):
        ids = np.array([sequence])
        logits = decoder_float64(spec, weights64, ids, np.arange(ids.shape[1])[None], np.ones_like(ids),
                                 pieces=pieces)  # fmt: skip
        truth.append(int(logits[0, -1].argmax()))
        sequence.append(truth[-1])
    out["float64"] = truth
    printed, errors = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
        code = main(["generate", str(result.path), "--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens",
                     str(COUNT), "--engine", "onnxruntime-genai", "--json"])  # fmt: skip
    out["exit"] = code
    if code == 0:
        out["served"] = json.loads(printed.getvalue())["tokens"]
        out["equal"] = out["served"] == truth
    else:
        out["refused"] = errors.getvalue().strip()
    out["seconds"] = round(time.time() - start, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    """Every case; the rows as JSON in --out. Exit 1 when a served row's tokens differ from float64's."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, type=Path, help="a folder for checkpoints and builds (emptied)")
    parser.add_argument("--out", required=True, type=Path, help="folder for genai-int4.json")
    args = parser.parse_args(argv)
    import onnxruntime
    import onnxruntime_genai

    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    load = os.getloadavg()
    rows = []
    for case in CASES:
        rows.append(row(args.work, *case))
        print(json.dumps(rows[-1]), flush=True)
    machine = (f"{platform.machine()}, {os.cpu_count()} CPUs, load {load[0]:.1f} at the start and "
               f"{os.getloadavg()[0]:.1f} at the end; onnxruntime {onnxruntime.__version__}, onnxruntime-genai "
               f"{onnxruntime_genai.__version__}")  # fmt: skip
    payload = {"command": "python tools/genai_int4.py " + " ".join(sys.argv[1:] if argv is None else argv),
               "machine": machine, "prompt": PROMPT, "new_tokens": COUNT, "rows": rows}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "genai-int4.json").write_text(json.dumps(payload, indent=1) + "\n")
    return 0 if all(r.get("equal", True) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
