"""From the workers' raw results to figures: medians over the basis rounds, per-round ratios, accuracy, targets.

The basis rounds are the quiet ones (other processes under ``bench.timing.QUIET`` of the machine) when at least
``MIN_QUIET`` rounds were quiet, else every round, as tools/bench.py does.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.timing import MIN_QUIET, QUIET, iqr  # noqa: E402

REL_TOL = 1e-4  # "exact": ropeexport's fp32 decoder tolerance, max |err| / max |float64 logit|
PEER = "og-builder"
OURS = ("ours-fused", "ours-gqa")
EXPERIMENTS = ("ours-fused-nospin", "ours-gqa-nospin", "ours-fused@genai")


def basis(others: list[float | None]) -> list[int]:
    """The rounds figures rest on (module doc)."""
    quiet = [r for r, o in enumerate(others) if o is not None and o < QUIET]
    return quiet if len(quiet) >= MIN_QUIET else list(range(len(others)))


def compare(got: np.ndarray, truth: np.ndarray) -> dict[str, Any]:
    """Errors of logits [n, vocab] against the float64 truth."""
    got = np.asarray(got, np.float64).reshape(truth.shape)
    err = float(np.abs(got - truth).max())
    agree = int((got.argmax(-1) == truth.argmax(-1)).sum())
    return {"max_abs": err, "rel": err / float(np.abs(truth).max()), "argmax_agree": f"{agree}/{truth.shape[0]}"}


def speed(timing: dict[str, Any], sizes: dict[str, Any]) -> dict[str, Any]:
    """Per entry: prefill tokens/s and decode ms/token (medians over basis rounds), decode / limit ratios."""
    used = basis(timing["others_cpu"])
    rounds = [timing["rounds"][r] for r in used]
    quiet = len([o for o in timing["others_cpu"] if o is not None and o < QUIET]) >= MIN_QUIET
    others = [None if o is None else round(o, 3) for o in timing["others_cpu"]]
    out: dict[str, Any] = {"_basis": {"rounds": "quiet" if quiet else "all", "used": len(used),
                                      "of": len(timing["rounds"]), "quiet_threshold": QUIET,
                                      "others_cpu_by_round": others}}  # fmt: skip
    limit = {p: [min(r["_limit"][f"copy_1t@{p}"], r["_limit"][f"copy_mt@{p}"]) for r in rounds] for p in sizes["past"]}
    read = {p: [r["_limit"][f"read@{p}"] for r in rounds] for p in sizes["past"]}
    out["_limit"] = {f"past {p}": {"bytes": timing["limit_bytes"][str(p)],
                                   "copy_ms": round(1000 * statistics.median(limit[p]), 3),
                                   "read_ms": round(1000 * statistics.median(read[p]), 3),
                                   "copy_GBps": round(timing["limit_bytes"][str(p)] / statistics.median(limit[p]) / 1e9,
                                                      2)} for p in sizes["past"]}  # fmt: skip
    names = [n for n in rounds[0] if n != "_limit"] if rounds else []
    for name in names:
        item: dict[str, Any] = {}
        for n in sizes["prefill"]:
            ts = [r[name][f"prefill@{n}"] for r in rounds]
            item[f"prefill_tok_s@{n}"] = round(n / statistics.median(ts), 1)
        for p in sizes["past"]:
            ts = [r[name][f"decode@{p}"] for r in rounds]
            item[f"decode_ms@{p}"] = round(1000 * statistics.median(ts), 3)
            ratios = [t / c for t, c in zip(ts, limit[p], strict=True)]
            item[f"decode_over_copy@{p}"] = round(statistics.median(ratios), 3)
            item[f"decode_over_copy_iqr@{p}"] = iqr(ratios)
            item[f"decode_over_read@{p}"] = round(statistics.median(
                t / c for t, c in zip(ts, read[p], strict=True)), 3)  # fmt: skip
        out[name] = item
    for name in [*OURS, *EXPERIMENTS]:
        if name not in names or PEER not in names:
            continue
        ratios = {}
        keys = [f"prefill@{n}" for n in sizes["prefill"]] + [f"decode@{p}" for p in sizes["past"]]
        for key in keys:  # peer time / our time, per round: >= 1 means ours is at least as fast
            per = [r[PEER][key] / r[name][key] for r in rounds]
            ratios[key] = {"median": round(statistics.median(per), 3), "iqr": iqr(per)}
        out[name]["speedup_vs_og_builder"] = ratios
    return out


def targets(shape: str, entries: dict[str, Any], sizes: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets for one checkpoint, each with its value and whether it is met."""
    rows = []
    for name in OURS:
        e = entries.get(name, {})
        acc = [e.get("accuracy", {}).get(k, {}) for k in ("near", "far")]
        exact = all(isinstance(a, dict) and a.get("rel") is not None and a["rel"] <= REL_TOL for a in acc)
        rows.append({"checkpoint": shape, "target": f"{name} exact (rel err <= {REL_TOL:g} at 4k and 100k)",
                     "value": [a.get("rel") if isinstance(a, dict) else None for a in acc], "met": exact})  # fmt: skip
        for key, r in e.get("speedup_vs_og_builder", {}).items():
            rows.append({"checkpoint": shape, "target": f"{name} {key} at least as fast as og-builder (ratio >= 1)",
                         "value": r["median"], "iqr": r["iqr"], "met": r["median"] >= 1.0})  # fmt: skip
        for p in sizes["past"]:
            v = e.get(f"decode_over_copy@{p}")
            rows.append({"checkpoint": shape, "target": f"{name} decode@{p} within 2x of the bytes limit",
                         "value": v, "met": v is not None and v <= 2.0})  # fmt: skip
    return rows


def cell(x: Any, fmt: str) -> str:
    """A number formatted, or '-' (None), or the reason (a string)."""
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return format(x, fmt) if math.isfinite(x) else str(x)


def markdown(shape: str, result: dict[str, Any], sizes: dict[str, Any]) -> str:
    """One checkpoint's table, its ratios to og-builder and the targets' verdicts."""
    made = result["checkpoint"]
    pre, past = sizes["prefill"], sizes["past"]
    head = (["entry"] + [f"prefill tok/s @{n}" for n in pre] + [f"decode ms/tok @past {p}" for p in past]
            + ["peak RSS MiB", f"logits err @{sizes['near'] // 1024}k" if sizes["near"] >= 1024 else
               f"logits err @{sizes['near']}", f"logits err @{sizes['far'] // 1000}k"]
            + [f"decode / copy limit @{p}" for p in past])  # fmt: skip
    lines = [f"### {shape}: {made['parameters'] / 1e6:.1f}M parameters "
             f"({made['config']['num_hidden_layers']} layers, hidden {made['config']['hidden_size']}, "
             f"{made['config']['num_attention_heads']}/{made['config']['num_key_value_heads']} heads)", "",
             "| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]  # fmt: skip
    for name, e in result["entries"].items():
        if "error" in e:
            lines.append(f"| {name} | " + " | ".join([e["error"]] + ["-"] * (len(head) - 2)) + " |")
            continue
        acc = []
        for k in ("near", "far"):
            a = e.get("accuracy", {}).get(k)
            if isinstance(a, dict) and "rel" in a:
                acc.append(f"{a['max_abs']:.1e} (rel {a['rel']:.1e}, argmax {a['argmax_agree']})")
            elif isinstance(a, dict) and "table_max_abs" in a:
                acc.append(f"table only: cos/sin row err {a['table_max_abs']:.1e}")
            else:
                acc.append(cell(a, ""))
        row = ([name] + [cell(e.get(f"prefill_tok_s@{n}"), ".0f") for n in pre]
               + [cell(e.get(f"decode_ms@{p}"), ".2f") for p in past]
               + [cell(e.get("memory", {}).get("peak_rss_mib"), ".0f")] + acc
               + [cell(e.get(f"decode_over_copy@{p}"), ".2f") for p in past])  # fmt: skip
        lines.append("| " + " | ".join(row) + " |")
    lim = result["limit"]
    lines += ["", "Bytes limit (weights except the embedding table, plus the cache; copied by np.copyto, read by an "
              "ORT MatMul): " + "; ".join(f"{k}: {v['bytes'] / 2**20:.0f} MiB, copy {v['copy_ms']:.2f} ms "
                                      f"({v['copy_GBps']} GB/s), read {v['read_ms']:.2f} ms" for k, v in lim.items()),
              "", "Speed ratios to og-builder (og-builder time / entry time, median over rounds [quartiles]; >= 1: "
              "at least as fast):", ""]  # fmt: skip
    for name, e in result["entries"].items():
        if "speedup_vs_og_builder" in e:
            parts = [f"{k} {v['median']:.2f} [{v['iqr'][0]:.2f}, {v['iqr'][1]:.2f}]"
                     for k, v in e["speedup_vs_og_builder"].items()]  # fmt: skip
            lines.append(f"- {name}: " + ", ".join(parts))
    lines += ["", "| target | value | met |", "|---|---|---|"]
    for t in result["targets"]:
        v = t["value"]
        shown = ", ".join(cell(x, ".2e") for x in v) if isinstance(v, list) else cell(v, ".3f")
        if t.get("iqr"):
            shown += f" [{t['iqr'][0]:.2f}, {t['iqr'][1]:.2f}]"
        lines.append(f"| {t['target']} | {shown} | {'yes' if t['met'] else 'NO'} |")
    return "\n".join(lines) + "\n"
