"""The audit's effect at the far end of a 131072-position context, against an independent measurement (issue 41 item 2).

A tiny Qwen3 with YaRN x4 over 131072 positions (original 32768; 2 layers, hidden 64, 4 / 2 heads, head_dim 16,
initializer_range 0.1), exported by torch.onnx (dynamo) with its float32 angles, as every exporter of transformers
models computes them. Measured twice, by two different pieces of code:
- independent: the export against the same export with its Cos and Sin taking float64 angles (inverse frequencies
  written from transformers' YaRN definition in ``tests/audits/test_uses.py``, not from ropeexport's schedules), each
  fed its own cache to the far end (``tests/audits/uses_planted.users_run_cached``: every 8-token window of the
  prompt, 3 draws at the end);
- the audit: ``rx.audit`` (its effect: ``audits.runs``, the model's own cache from its own prefill to the far end,
  4 draws there).
The test of the same at 32768 positions is ``test_uses.py::test_float32_angles_of_a_qwen3_yarn_export_weigh_what_they
_weigh_as_users_run_it`` (slow); this runs the full 131072, which is four prefills of 131064 tokens (minutes each).

    python tools/far_end_effect.py --work /tmp/far --out tools/figures/far-end-131072.json [--positions 131072]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    """Measure (module doc) and write the JSON record to ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="folder for the checkpoint and the exports")
    parser.add_argument("--out", type=Path, required=True, help="the JSON record")
    parser.add_argument("--positions", type=int, default=131072, help="max_position_embeddings (a power of two)")
    args = parser.parse_args(argv)
    if args.positions < 4096 or args.positions & (args.positions - 1):
        print(f"error: --positions: must be a power of two of at least 4096, got {args.positions}", file=sys.stderr)
        return 2

    import torch
    import transformers

    import ropeexport as rx
    from tests.audits.test_uses import QWEN3_YARN, _float64_angles, _yarn_inv_freq64
    from tests.audits.uses_planted import dynamo_export, save_as, users_run_cached

    original = args.positions // 4
    fields = {**QWEN3_YARN, "max_position_embeddings": args.positions,
              "rope_parameters": {**QWEN3_YARN["rope_parameters"], "original_max_position_embeddings": original}}
    checkpoint = args.work / "qwen3-yarn"
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model("qwen3", **fields)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(checkpoint)
    model = dynamo_export(checkpoint, args.work / "export")
    exact = save_as(model, args.work / "exact" / "model.onnx",
                    _float64_angles(_yarn_inv_freq64(16, 1e6, 4.0, original)))  # fmt: skip
    started = time.perf_counter()
    independent = users_run_cached(model, exact, args.positions)
    independent_s = time.perf_counter() - started
    started = time.perf_counter()
    result = rx.audit(model, checkpoint / "config.json")
    audit_s = time.perf_counter() - started
    (found,) = result.findings
    effect = found["effect"]
    far = [p for p in effect["places"] if p["name"].startswith("the far end")]
    record = {
        "command": f"python tools/far_end_effect.py --work {args.work} --out {args.out} --positions {args.positions}",
        "model": {"type": "qwen3", "fields": fields, "export": "torch.onnx.export dynamo, float32 angles"},
        "independent": {"relative": independent, "how": "uses_planted.users_run_cached: own cache, chunks of 512, "
                        "every 8-token window of the prompt and 3 draws at the end", "seconds": round(independent_s)},
        "audit": {"finding": found["name"], "relative": effect["relative"], "level": found["severity"]["level"],
                  "how": effect["how"], "far_end": far, "short": effect.get("short"), "seconds": round(audit_s)},
        "ratio": effect["relative"] / independent if independent else None,
        "within_2x": bool(independent / 2 <= effect["relative"] <= 2 * independent),
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "load": os.getloadavg()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("independent", "ratio", "within_2x")}, indent=1))
    print(f"audit: {found['text']} ({effect['relative']:.3g}; {effect['how']})")
    return 0 if record["within_2x"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
