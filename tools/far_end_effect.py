"""The audit's effect at the far end of a 131072-position context, against an independent measurement (issue 41 item 2).

A tiny model (``TINY``: 1 layer, hidden 64, 2 / 1 heads, head_dim 16, vocab 160, initializer_range 0.1, seed 0)
of one of the issue's cases (``CASES``): ``qwen3-yarn``, Qwen3 with YaRN x4 (original E / 4); ``llama3-x32``, Llama
3.2's llama3 scaling (factor 32, low / high frequency factors 1 / 4, theta 5e5, original E / 16: 8192 of 131072),
each exported by torch.onnx (dynamo) with its float32 angles, as every exporter of transformers models computes
them. Measured twice, by two different pieces of code:
- independent: the export against the same export with its Cos and Sin taking float64 angles (inverse frequencies
  written here and in ``tests/audits/test_uses.py`` from transformers' definitions, not from ropeexport's schedules),
  each fed its own cache to the far end (``tests/audits/uses_planted.users_run_cached``: the prompt in calls of
  ``chunk`` tokens, each given the presents of the call before, every 8-token window of the prompt scored, then one
  draw of 8 tokens at the far end);
- the audit: ``rx.audit`` (its effect: ``audits.runs``, the model's own cache from its own prefill to the far end,
  4 draws there).
The cost is the prefills' attention (quadratic in E): four prefills of E - 8 tokens, the two independent ones in calls
whose attention scores (chunk x E x heads, float32) stay under ``SCORES_BYTES``, the audit's too, so that the
131072 case fits a 2-core, 23.5 GiB machine shared with others (the 2-layer, 4-head checkpoint took about 4 minutes a
prefill there when it was quiet).
The test of the same at 32768 positions is ``test_uses.py::test_float32_angles_of_a_qwen3_yarn_export_weigh_what_they
_weigh_as_users_run_it`` (slow); ``tests/tools/test_far_end_effect.py`` runs this at a small E.

    python tools/far_end_effect.py --case qwen3-yarn --work /tmp/far --out tools/figures/far-end-qwen3-yarn.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SMALLEST = 1024  # the smallest context run: its original (E / 16 for llama3 x32) still leaves every regime a row
# One prefill call's attention scores, at most, for the independent run and (set for this run) the audit's: a quarter
# of the audit's own 2**29, whose calls of 512 tokens made ONNX Runtime's arena hold 6.6 GiB at 131072 (the kernel's
# OOM killer stopped the run on the shared machine); the calls' length changes what is computed first, not what is
# measured (each call is given the cache the one before gave back)
SCORES_BYTES = 2**27
HEADS = 2
# One layer of 2 query heads (1 key-value head) of 16 channels: the prefill's attention, its cost, is a quarter of
# the 2-layer, 4-head checkpoint of docs/status/peers.md's Qwen3 rows (about 1.1e12 floating-point operations at
# 131072), so that four prefills to the far end fit an evening's shared 2-core machine.
TINY = {"vocab_size": 160, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": HEADS, "num_key_value_heads": 1, "initializer_range": 0.1, "head_dim": 16,
        "bos_token_id": 1, "eos_token_id": 2}  # fmt: skip


def _llama3_inv_freq64(dim: int, base: float, factor: float, low: float, high: float, original: int) -> np.ndarray:
    """llama3's inverse frequencies [dim / 2] in float64, as transformers' ``_compute_llama3_parameters`` defines
    them (long wavelengths divided by ``factor``, short ones kept, the band between smoothed): written here from that
    definition, not from ropeexport's schedules.
    """  # noqa: D205
    inv = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > original / low, inv / factor, inv)
    smooth = (original / wavelen - low) / (high - low)
    medium = (wavelen >= original / high) & (wavelen <= original / low)
    return np.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)


class Case(NamedTuple):
    """One of the issue's cases: its model type, its config fields at a context of E positions, and its float64
    inverse frequencies [head_dim / 2] at that E.
    """  # noqa: D205

    model_type: str
    fields: Callable[[int], dict[str, Any]]
    inv64: Callable[[int], np.ndarray]


def _qwen3_yarn(end: int) -> dict[str, Any]:
    return {**TINY, "max_position_embeddings": end,
            "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6,
                                "original_max_position_embeddings": end // 4}}  # fmt: skip


def _llama3_x32(end: int) -> dict[str, Any]:
    return {**TINY, "max_position_embeddings": end,
            "rope_parameters": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "rope_theta": 5e5, "original_max_position_embeddings": end // 16}}  # fmt: skip


def _yarn64(end: int) -> np.ndarray:
    from tests.audits.test_uses import _yarn_inv_freq64

    return _yarn_inv_freq64(16, 1e6, 4.0, end // 4)


CASES = {
    "qwen3-yarn": Case("qwen3", _qwen3_yarn, _yarn64),
    "llama3-x32": Case("llama", _llama3_x32, lambda end: _llama3_inv_freq64(16, 5e5, 32.0, 1.0, 4.0, end // 16)),
}


def chunk_for(end: int, heads: int = HEADS) -> int:
    """Tokens per independent prefill call: the largest power of two up to 1024 whose attention scores
    (chunk x ``end`` x ``heads``, float32) stay under ``SCORES_BYTES`` (8 at least).
    """  # noqa: D205
    chunk = 8
    while chunk < 1024 and 2 * chunk * end * heads * 4 <= SCORES_BYTES:
        chunk *= 2
    return chunk


def main(argv: list[str] | None = None) -> int:
    """Measure (module doc) and write the JSON record to ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), default="qwen3-yarn", help="the model measured (module doc)")
    parser.add_argument("--work", type=Path, required=True, help="folder for the checkpoint and the exports")
    parser.add_argument("--out", type=Path, required=True, help="the JSON record")
    parser.add_argument("--positions", type=int, default=131072, help="max_position_embeddings (a power of two)")
    args = parser.parse_args(argv)
    if args.positions < SMALLEST or args.positions & (args.positions - 1):
        print(f"error: --positions: must be a power of two of at least {SMALLEST}, got {args.positions}",
              file=sys.stderr)  # fmt: skip
        return 2

    import torch
    import transformers

    import ropeexport as rx
    from ropeexport.audits import runs
    from tests.audits.test_uses import _float64_angles
    from tests.audits.uses_planted import dynamo_export, save_as, users_run_cached

    case = CASES[args.case]
    fields = case.fields(args.positions)
    checkpoint = args.work / args.case
    load = [os.getloadavg()]
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(case.model_type, **fields)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(checkpoint)
    model = dynamo_export(checkpoint, args.work / "export")
    exact = save_as(model, args.work / "exact" / "model.onnx", _float64_angles(case.inv64(args.positions)))
    chunk = chunk_for(args.positions)
    runs.SCORES_BYTES = SCORES_BYTES  # the audit's calls kept as short (module doc)
    started = time.perf_counter()
    independent = users_run_cached(model, exact, args.positions, chunk=chunk, draws=1)
    independent_s = time.perf_counter() - started
    load.append(os.getloadavg())
    started = time.perf_counter()
    result = rx.audit(model, checkpoint / "config.json")
    audit_s = time.perf_counter() - started
    load.append(os.getloadavg())
    (found,) = result.findings
    effect = found["effect"]
    far = [p for p in effect["places"] if p["name"].startswith("the far end")]
    record = {
        "command": (f"python tools/far_end_effect.py --case {args.case} --work {args.work} --out {args.out} "
                    f"--positions {args.positions}"),  # fmt: skip
        "model": {"type": case.model_type, "fields": fields, "export": "torch.onnx.export dynamo, float32 angles"},
        "independent": {"relative": independent, "seconds": round(independent_s),
                        "how": f"uses_planted.users_run_cached: own cache, calls of {chunk}, every 8-token window of "
                        "the prompt and 1 draw at the far end"},
        "audit": {"finding": found["name"], "relative": effect["relative"], "level": found["severity"]["level"],
                  "how": effect["how"], "at": effect.get("at"), "far_end": far, "short": effect.get("short"),
                  "seconds": round(audit_s), "scores_bytes": runs.SCORES_BYTES},
        "ratio": effect["relative"] / independent if independent else None,
        "within_2x": bool(independent / 2 <= effect["relative"] <= 2 * independent),
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                 "load": [[round(x, 2) for x in one] for one in load],  # 1/5/15-min: start, after each measurement
                 "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("independent", "ratio", "within_2x")}, indent=1))
    print(f"audit: {found['text']} ({effect['relative']:.3g}; {effect['how']})")
    return 0 if record["within_2x"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
