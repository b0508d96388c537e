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
# int4 at accuracy level 4: MatMulNBits quantizes each block of activations to int8, so the bound is the one
# ``decoder verify`` judges that level by (ropeexport.decoder.verify.COMPUTED["int8"]); level 0 keeps REL_TOL
INT8_TOL = 2.5e-1
PEER = "og-builder"
OURS = ("ours-fused", "ours-gqa", "ours-int4-fused", "ours-int4-gqa", "ours-int4-a0-gqa")
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


def speed(timing: dict[str, Any], sizes: dict[str, Any], rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per entry: prefill tokens/s and decode ms/token (medians over basis rounds), decode / limit ratios (fp32
    weights: the limit counts 4 bytes a weight), and ours' per-round speed ratios to its peer (``rows[name]["peer"]``,
    else og-builder).
    """  # noqa: D205
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
            if rows.get(name, {}).get("int4"):
                continue
            ratios = [t / c for t, c in zip(ts, limit[p], strict=True)]
            item[f"decode_over_copy@{p}"] = round(statistics.median(ratios), 3)
            item[f"decode_over_copy_iqr@{p}"] = iqr(ratios)
            item[f"decode_over_read@{p}"] = round(statistics.median(
                t / c for t, c in zip(ts, read[p], strict=True)), 3)  # fmt: skip
        out[name] = item
    for name in [*OURS, *EXPERIMENTS]:
        peer = rows.get(name, {}).get("peer", PEER)
        if name not in names or peer not in names:
            continue
        ratios = {}
        keys = [f"prefill@{n}" for n in sizes["prefill"]] + [f"decode@{p}" for p in sizes["past"]]
        for key in keys:  # peer time / our time, per round: >= 1 means ours is at least as fast
            per = [r[peer][key] / r[name][key] for r in rounds]
            ratios[key] = {"median": round(statistics.median(per), 3), "iqr": iqr(per)}
        out[name]["speedup_vs_og_builder"] = ratios
        out[name]["peer"] = peer
    return out


def targets(shape: str, entries: dict[str, Any], sizes: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets for one checkpoint, each with its value and whether it is met."""
    rows = []
    for name in OURS:
        if name not in entries:
            continue
        e = entries[name]
        acc = [e.get("accuracy", {}).get(k, {}) for k in ("near", "far")]
        tol = INT8_TOL if name.startswith("ours-int4-") and "-a0-" not in name else REL_TOL
        exact = all(isinstance(a, dict) and a.get("rel") is not None and a["rel"] <= tol for a in acc)
        what = "exact" if tol == REL_TOL else "within int8 activations' bound"
        rows.append({"checkpoint": shape, "target": f"{name} {what} (rel err <= {tol:g} at 4k and 100k)",
                     "value": [a.get("rel") if isinstance(a, dict) else None for a in acc], "met": exact})  # fmt: skip
        peer = e.get("peer", PEER)
        for key, r in e.get("speedup_vs_og_builder", {}).items():
            rows.append({"checkpoint": shape, "target": f"{name} {key} at least as fast as {peer} (ratio >= 1)",
                         "value": r["median"], "iqr": r["iqr"], "met": r["median"] >= 1.0})  # fmt: skip
        for p in sizes["past"]:
            if f"decode_over_copy@{p}" not in e:  # int4 weights: no fp32 bytes limit
                continue
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
              "", "int4 entries: logits err is the positional fidelity (against float64 with the dequantized weights "
              "the models hold; the builder's are the same values), no bytes limit (it counts fp32 weights); "
              "quantization cost (against float64 with the checkpoint's weights unquantized, reported, not judged): "
              + "; ".join(f"{n} " + ", ".join(f"@{k} {c['rel']:.2e} (argmax {c['argmax_agree']})"
                                             for k, c in e["quantization_cost"].items() if isinstance(c, dict))
                          for n, e in result["entries"].items() if e.get("quantization_cost")),
              "", "Speed ratios to the builder's model of the same weights (og-builder for fp32, og-builder-int4 for "
              "int4: its time / entry time, median over rounds [quartiles]; >= 1: at least as fast):", ""]  # fmt: skip
    for name, e in result["entries"].items():
        if "speedup_vs_og_builder" in e:
            parts = [f"{k} {v['median']:.2f} [{v['iqr'][0]:.2f}, {v['iqr'][1]:.2f}]"
                     for k, v in e["speedup_vs_og_builder"].items()]  # fmt: skip
            lines.append(f"- {name} (vs {e.get('peer', PEER)}): " + ", ".join(parts))
    profiles = {k: v for k, v in result.get("profiles", {}).items() if isinstance(v.get("decode"), dict)}
    if profiles:
        some = next(iter(profiles.values()))
        lines += ["", f"ORT's profiler, one decode step after a {some['prompt']}-token prompt (median over "
                  f"{some['steps']} steps; µs): the whole run, its kernels (the rest is the executor between nodes), "
                  "the nodes run, and the op types that take the most:", ""]  # fmt: skip
        for name, prof in profiles.items():
            d = prof["decode"]
            ops = ", ".join(f"{op} {us:.0f}" for op, us in list(d["by_op_us"].items())[:5])
            lines.append(f"- {name}: run {d['model_run_us']:.0f}, kernels {d['kernels_us']:.0f} in "
                         f"{d.get('nodes_run', '?')} nodes; {ops}")
    lines += ["", "| target | value | met |", "|---|---|---|"]
    for t in result["targets"]:
        v = t["value"]
        shown = ", ".join(cell(x, ".2e") for x in v) if isinstance(v, list) else cell(v, ".3f")
        if t.get("iqr"):
            shown += f" [{t['iqr'][0]:.2f}, {t['iqr'][1]:.2f}]"
        lines.append(f"| {t['target']} | {shown} | {'yes' if t['met'] else 'NO'} |")
    return "\n".join(lines) + "\n"
