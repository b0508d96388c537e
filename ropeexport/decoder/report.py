"""report.md of a decoder: the verdict, then per scenario a summary line and one row per call.

Columns per call: the call (prefill, chunk, decode, re-prefill), its positions and L, the RoPE regime, the max abs
logit error and its ratio to the logit scale against the float64 truth and against transformers, the next token
picked by the runtime / float64 / transformers, the float64 top-2 margin, and the verdict (``regime cost`` for a call
that read keys cached under another regime; ``near tie`` where the top-2 margin is below the measured error).
"""

from __future__ import annotations

from typing import Any


def _e(x: float) -> str:
    return f"{x:.1e}"


def _row(call: dict[str, Any]) -> str:
    f64 = call["float64"]
    hf = call.get("transformers")
    tokens = call["tokens"]
    picks = "/".join(",".join(str(t) for t in tokens[k]) for k in ("runtime", "float64", "transformers") if k in tokens)
    if call["stale_cache"]:
        verdict = "regime cost"
    elif call["near_ties"]:
        verdict = f"near tie (rows {call['near_ties']})"
    else:
        verdict = "ok" if call["passed"] else f"FAIL{' (tokens differ)' if call['diverged_rows'] else ''}"
    lo, hi = call["positions"]
    where = str(lo) if lo == hi else f"{lo}-{hi}"
    cells = [str(call["index"]), call["kind"], where, str(call["L"]), call["regime"], _e(f64["max_abs"]),
             _e(f64["rel"]), _e(hf["max_abs"]) if hf else "-", _e(hf["rel"]) if hf else "-", picks,
             f"{call['margin']:.2e}", verdict]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def write_markdown(report: dict[str, Any]) -> str:
    """The whole report as markdown."""
    spec = report["spec"]
    position = spec["position"]
    lines = [
        f"# {report['name']}: {'PASSED' if report['passed'] else 'FAILED'}",
        "",
        f"- model: {spec['model_type']}, {spec['num_layers']} layers, hidden {spec['hidden_size']}, vocab "
        f"{spec['vocab_size']}, {spec['dtype']}, `{spec['graph']}` attention",
        f"- positions: {position.get('encoding')} {position.get('scaling', '')} (max_positions "
        f"{position.get('max_positions')})",
        f"- weights: {report['weights']}",
        f"- runtime: {report['runtime']}",
        f"- truth: {report['references']['float64']}",
        f"- also against: {report['references']['transformers']}",
        f"- a call passes when max |logit error| <= {report['tolerance']['rel']:g} x {report['tolerance']['of']} and "
        "its next tokens agree with the truth (near ties listed, not counted)",
        "",
    ]
    for scenario in report["scenarios"]:
        s = scenario["summary"]
        lines += [
            f"## {scenario['name']}: {'passed' if scenario['passed'] else 'FAILED'}",
            "",
            f"{scenario['about']} (batch {scenario['batch']}, cache policy `{scenario['policy']}`). "
            f"Positions {s['positions'][0]}-{s['positions'][1]}, regimes {', '.join(s['regimes'])}; "
            f"worst error {_e(s['worst_abs'])} ({_e(s['worst_rel'])} of the logit scale); greedy agreement with "
            f"float64 {s['agreement']}; first divergence: {s['first_divergence']}; near ties: "
            f"{s['near_ties'] or 'none'}; re-prefills: {s['re_prefills']}."
            + (
                f" Kept cache across the switch: {s['regime_cost_calls']} calls read stale keys, up to "
                f"{_e(s['regime_cost_rel'])} of the logit scale (the regime's cost)."
                if "regime_cost_rel" in s
                else ""
            )
            + (
                f" transformers vs float64: worst {_e(s['worst_rel_transformers_vs_float64'])} of the scale."
                if "worst_rel_transformers_vs_float64" in s
                else ""
            ),  # fmt: skip
            "",
            "| call | kind | positions | L | regime | abs err vs f64 | / scale | abs err vs transformers | / scale "
            "| next token (runtime/f64/transformers) | f64 top-2 margin | verdict |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
            *(_row(c) for c in scenario["calls"]),
            "",
        ]
    return "\n".join(lines)
