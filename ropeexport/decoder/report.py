"""report.md and report.html of a decoder: the verdict, the facts, then per scenario a summary line and a row per call.

Columns per call: the call (prefill, chunk, decode, re-prefill), its positions and L (the longest row's), the RoPE
regime (each row's in row order, ``long / short``, when the rows' differ), the max abs logit error and its ratio to
the logit scale against the float64 truth and against transformers, the next token picked by the runtime / float64 /
transformers, the float64 top-2 margin, and the verdict (``regime cost`` for a call that read keys cached under
another regime, ``regime cost (rows ..)`` after the verdict of the other rows where only some did; ``near tie`` where
the top-2 margin is at most twice the measured error; ``taken the other way: layer 1 row 0 slot 39 (margin ..)``
after it for a call judged against a routing its near ties allow, an indexer's flip with the key it took in and the
key it left out, ``routing_flips``). A
decoder with int4 weights has one more column before the verdict, its quantization cost (the error over the scale
against the float64 recompute with the weights unquantized): a second figure, reported beside the positional one
(the float64 column, judged) and never mixed with it.

Both pages are written from report.json alone, with the same words (``_facts``, ``_sentence``, ``_cells``);
report.html adds what failed at the top and one figure: every call's error over the logit scale against its last
position, a panel per scenario (``error_figure``). Everything from the report is escaped in report.html.
"""

from __future__ import annotations

import math
import re
from html import escape
from typing import Any

from ropeexport.report.words import error

HEADER = ["call", "kind", "positions", "L", "regime", "abs err vs f64", "/ scale", "abs err vs transformers",
          "/ scale", "next token (runtime/f64/transformers)", "f64 top-2 margin", "verdict"]  # fmt: skip
NUMERIC = {0, 3, 5, 6, 7, 8, 10, 11}  # columns right-aligned in report.html (11: the cost column, when there is one)
COST = "quantization cost / scale (not judged)"  # the int4 decoders' column, before the verdict
PLOT_CAPTION = (
    "Each point is one call: its max |logit error| against the float64 truth divided by the call's logit scale "
    "(max |float64 logit| of the call), at the call's last position; log y. The dotted red line is the tolerance. "
    "Hollow orange squares: calls that read keys cached under another regime (the keep policy), reported as the "
    "regime's cost and not judged. Red crosses: calls that failed."
)
STALE_COLOR = "#bc4c00"
CALL_COLOR = "#0969da"
PANEL_SIZE = (3.2, 2.3)  # inches per scenario panel, three panels to a row: 960 px wide in all


def _verdict(call: dict[str, Any]) -> str:
    if call["stale_cache"]:
        return "regime cost"
    stale = f"; regime cost (rows {call['stale_rows']})" if call.get("stale_rows") else ""
    stale += _flips(call)
    if call["near_ties"]:
        return f"near tie (rows {call['near_ties']}){stale}"
    return ("ok" if call["passed"] else f"FAIL{' (tokens differ)' if call['diverged_rows'] else ''}") + stale


def _flips(call: dict[str, Any]) -> str:
    """The selections the call was judged with taken the other way (``routing_flips``), in words: ``; taken the other
    way: layer 1 row 0 slot 39 (margin 1.50e-03); layer 2 row 0 slot 12 indexer: key 5 in, key 3 out (margin ..)``.
    """  # noqa: D205
    said = []
    for flip in call.get("routing_flips") or []:
        keys = f" indexer: key {flip['key_in']} in, key {flip['key_out']} out" if "key_in" in flip else ""
        margin = "" if flip["margin"] is None else f" (margin {flip['margin']:.2e})"
        said.append(f"layer {flip['layer']} row {flip['row']} slot {flip['slot']}{keys}{margin}")
    return f"; taken the other way: {'; '.join(said)}" if said else ""


def _header(report: dict[str, Any]) -> list[str]:
    """The table's columns: HEADER, with the cost column before the verdict for a quantized decoder."""
    return [*HEADER[:-1], COST, HEADER[-1]] if _quantized(report) else HEADER


def _quantized(report: dict[str, Any]) -> bool:
    return "unquantized" in report.get("references", {})


def _cells(call: dict[str, Any]) -> list[str]:
    """One call's row: the HEADER columns as text (and the cost column, when the call has its cost)."""
    f64 = call["float64"]
    hf = call.get("transformers")
    tokens = call["tokens"]
    picks = "/".join(",".join(str(t) for t in tokens[k]) for k in ("runtime", "float64", "transformers") if k in tokens)
    lo, hi = call["positions"]
    where = str(lo) if lo == hi else f"{lo}-{hi}"
    cost = [error(call["quantization_cost"]["rel"])] if "quantization_cost" in call else []
    return [str(call["index"]), call["kind"], where, str(call["L"]), call["regime"], error(f64["max_abs"]),
            error(f64["rel"]), error(hf["max_abs"]) if hf else "-", error(hf["rel"]) if hf else "-", picks,
            f"{call['margin']:.2e}", *cost, _verdict(call)]  # fmt: skip


def _row(call: dict[str, Any]) -> str:
    return "| " + " | ".join(_cells(call)) + " |"


def _facts(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, text) of the lines under the verdict; markdown code spans in backticks."""
    spec = report["spec"]
    position = spec["position"]
    facts = [
        ("model", f"{spec['model_type']}, {spec['num_layers']} layers, hidden {spec['hidden_size']}, vocab "
                  f"{spec['vocab_size']}, {spec['dtype']}, `{spec['graph']}` attention"),
        ("positions", f"{position.get('encoding')} {position.get('scaling', '')} (max_positions "
                      f"{position.get('max_positions')})"),
        ("weights", str(report["weights"])),
        ("runtime", str(report["runtime"])),
        ("truth", str(report["references"]["float64"])),
        ("also against", str(report["references"]["transformers"])),
    ]  # fmt: skip
    if _quantized(report):
        facts[3:3] = [("weight format", str(report.get("weight_format", spec.get("weight_format"))))]
        facts.append(("quantization cost", f"{report['references']['unquantized']}; {_cost(report)}"))
    records = _records(report)
    if len(records) > 1 or any(r.get("status") != "verified" for r in records):  # several runtimes, or one skipped
        at = [label for label, _ in facts].index("runtime") + 1
        facts[at:at] = [(f"on {r.get('name')}", _on(r)) for r in records]
    return facts


def _records(report: dict[str, Any]) -> list[dict[str, Any]]:
    """report.json's per-runtime records (``decoder.runs``); none in a report written before decoders took several."""
    records = report.get("runtimes")
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def _on(record: dict[str, Any]) -> str:
    """One runtime's verdict in words: passed or FAILED where it ran (its worst error and agreement), else why not."""
    if record.get("status") != "verified":
        return f"skipped: {record.get('reason', '')}"
    verdict = ("passed" if record.get("passed") else "FAILED") + (" (fallback: no runtime named could run)"
                                                                  if record.get("fallback") else "")  # fmt: skip
    if record.get("error"):
        return f"{verdict} on {record.get('device')}: raised {record['error']}"
    worst = record.get("worst_rel")
    return (f"{verdict} on {record.get('device')}: worst {error(worst) if worst is not None else 'none'} of the logit "
            f"scale, greedy agreement {record.get('agreement')}")  # fmt: skip


def _further(report: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(runtime, its scenarios) of every verified runtime after the first (whose scenarios are the report's)."""
    ran = [r for r in _records(report) if r.get("status") == "verified"]
    return [(str(r.get("name")), [s for s in r.get("scenarios") or [] if isinstance(s, dict)]) for r in ran[1:]]


def _cost(report: dict[str, Any]) -> str:
    """The quantization cost over every scenario, in words (a quantized decoder's second figure)."""
    summaries = [s["summary"] for s in report["scenarios"] if "cost_rel" in s["summary"]]
    if not summaries:
        return "no call measured it"
    agree = [tuple(int(x) for x in s["cost_agreement"].split("/")) for s in summaries]
    return (f"worst {error(max(s['cost_rel'] for s in summaries))} of the logit scale, greedy agreement with the "
            f"unquantized recompute {sum(a for a, _ in agree)}/{sum(b for _, b in agree)}")  # fmt: skip


def _rule(report: dict[str, Any]) -> str:
    return (
        f"a call passes when max |logit error| <= {report['tolerance']['rel']:g} x {report['tolerance']['of']} and "
        "its next tokens agree with the truth (near ties listed, not counted)"
    )


def _sentence(scenario: dict[str, Any]) -> str:
    """The scenario's summary paragraph (markdown code spans in backticks)."""
    s = scenario["summary"]
    return (
        f"{scenario['about']} (batch {scenario['batch']}, cache policy `{scenario['policy']}`). "
        f"Positions {s['positions'][0]}-{s['positions'][1]}, regimes {', '.join(s['regimes'])}; "
        f"worst error {error(s['worst_abs'])} ({error(s['worst_rel'])} of the logit scale); greedy agreement with "
        f"float64 {s['agreement']}; first divergence: {s['first_divergence']}; near ties: "
        f"{s['near_ties'] or 'none'}; re-prefills: {s['re_prefills']}."
        + (
            f" Kept cache across the switch: {s['regime_cost_calls']} calls read stale keys, up to "
            f"{error(s['regime_cost_rel'])} of the logit scale (the regime's cost)."
            if "regime_cost_rel" in s
            else ""
        )
        + (
            f" transformers vs float64: worst {error(s['worst_rel_transformers_vs_float64'])} of the scale."
            if "worst_rel_transformers_vs_float64" in s
            else ""
        )
        + (
            f" Quantization cost (not judged): worst {error(s['cost_rel'])} of the logit scale against the float64 "
            f"recompute with the weights unquantized, greedy agreement with it {s['cost_agreement']}."
            if "cost_rel" in s
            else ""
        )
    )  # fmt: skip


def write_markdown(report: dict[str, Any]) -> str:
    """The whole report as markdown."""
    lines = [f"# {report['name']}: {'PASSED' if report['passed'] else 'FAILED'}", ""]
    lines += [f"- {label}: {text}" for label, text in _facts(report)]
    lines += [f"- {_rule(report)}", ""]
    for runtime, scenarios in [("", report["scenarios"]), *_further(report)]:
        on = f" on {runtime}" if runtime else ""
        for scenario in scenarios:
            lines += [
                f"## {scenario['name']}{on}: {'passed' if scenario['passed'] else 'FAILED'}",
                "",
                _sentence(scenario),
                "",
                "| " + " | ".join(_header(report)) + " |",
                "|" + "---|" * len(_header(report)),
                *(_row(c) for c in scenario["calls"]),
                "",
            ]
    return "\n".join(lines)


# report.html


def _html(text: str) -> str:
    """Escaped text, its markdown code spans (`x`) as <code>: the words are report.md's."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", escape(str(text), quote=True))


def _points(calls: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """(last position, error / logit scale) of each call, by how it is drawn: judged, stale, failed, zero, bad."""
    from ropeexport.report.plots import drawable

    out: dict[str, list[tuple[float, float]]] = {k: [] for k in ("judged", "stale", "failed", "zero", "bad")}
    for call in calls:
        x, y = float(call["positions"][1]), float(call["float64"]["rel"])
        if not drawable(y):  # infinite, NaN, or past what a log axis can draw: a cross at the top
            out["bad"].append((x, y))
            continue
        if y <= 0:  # a log axis has no zero
            out["zero"].append((x, y))
            continue
        if call["stale_cache"]:
            out["stale"].append((x, y))
            continue
        out["judged"].append((x, y))
        if not call["passed"]:
            out["failed"].append((x, y))
    return out


def error_figure(report: dict[str, Any]) -> bytes:
    """PNG: a panel per scenario, each call's error over the logit scale against its last position (log y, shared),
    the tolerance as a dotted red line, stale-cache calls as hollow squares, failed calls crossed, non-finite errors
    as crosses along the top; what could not be drawn is said below the panels.
    """  # noqa: D205
    import matplotlib.style
    from matplotlib.ticker import MaxNLocator, NullLocator

    from ropeexport.report.plots import (
        LOG_CEILING,
        STYLE,
        TOLERANCE_COLOR,
        figure_notes,
        log_limits,
        new_figure,
        png_bytes,
        shorten,
    )

    chosen = report["scenarios"]
    tolerance = float(report["tolerance"]["rel"])
    cols = max(1, min(3, len(chosen)))
    rows = max(1, math.ceil(len(chosen) / cols))
    drawn = [(s, _points(s["calls"])) for s in chosen]
    low, high = log_limits([y for _, p in drawn for key in ("judged", "stale") for _, y in p[key]] + [tolerance])
    top = high * 3 if any(p["bad"] for _, p in drawn) else high  # room for the crosses of non-finite errors
    with matplotlib.style.context(["default", STYLE]):
        figure = new_figure((PANEL_SIZE[0] * 3, PANEL_SIZE[1] * rows + 0.6))
        axes = figure.subplots(rows, cols, sharey=True, squeeze=False)
        zeros = bad = 0
        for ax, (scenario, p) in zip(axes.flat, drawn, strict=False):
            if p["judged"]:
                xs, ys = zip(*p["judged"], strict=True)
                ax.plot(xs, ys, "o-", color=CALL_COLOR, markersize=2.5, linewidth=0.7, label="call (judged)")
            if p["stale"]:
                xs, ys = zip(*p["stale"], strict=True)
                ax.plot(xs, ys, "s", color=STALE_COLOR, markerfacecolor="none", markersize=5,
                        label="stale cache (regime cost, not judged)")  # fmt: skip
            if p["failed"]:
                xs, ys = zip(*p["failed"], strict=True)
                ax.plot(xs, ys, "x", color=TOLERANCE_COLOR, markersize=7, label="failed call")
            if p["bad"]:
                ax.plot([x for x, _ in p["bad"]], [high] * len(p["bad"]), "x", color=TOLERANCE_COLOR, markersize=7,
                        label="infinite or NaN error")  # fmt: skip
            zeros, bad = zeros + len(p["zero"]), bad + len(p["bad"])
            ax.axhline(tolerance, color=TOLERANCE_COLOR, linestyle=":", linewidth=1.4, label=f"tolerance {tolerance:g}")
            ax.set_yscale("log")
            ax.yaxis.set_minor_locator(NullLocator())  # decades only: minor ticks cost most of the drawing
            ax.set_ylim(low, top)
            verdict = "passed" if scenario["passed"] else "FAILED"
            ax.set_title(shorten(f"{scenario['name']}: {verdict}", 40), color="black" if scenario["passed"] else "red")
            # Positions as whole numbers: far-positions would otherwise read "55 ... +1.31e5".
            ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
            ax.ticklabel_format(axis="x", style="plain", useOffset=False)
        for ax in list(axes.flat)[len(drawn) :]:
            ax.set_visible(False)
        figure.supylabel("max |logit error| / logit scale", fontsize=9)
        notes = ["x: the call's last position"]
        if zeros:
            notes.append(f"{zeros} calls with zero error left out (a log axis has no 0)")
        if bad:
            notes.append(f"{bad} calls with an infinite or NaN error, or one over {LOG_CEILING:g} (crosses at the top)")
        figure_notes(figure, notes)
        labels: dict[str, Any] = {}
        for ax in axes.flat:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                labels.setdefault(label, handle)
        figure.legend(list(labels.values()), list(labels), loc="outside upper center", ncols=len(labels),
                      frameon=False)  # fmt: skip
        return png_bytes(figure)


def _failures(report: dict[str, Any]) -> str:
    """The failed scenarios and their failed calls (empty when the report passed)."""
    items = [f"{r.get('name')}: {_on(r)}" for r in _records(report) if r.get("error")]
    for runtime, scenarios in [("", report["scenarios"]), *_further(report)]:
        for scenario in scenarios:
            if scenario["passed"]:
                continue
            failed = [c for c in scenario["calls"] if not c["passed"]]
            s = scenario["summary"]
            calls = ", ".join(f"{c['index']} ({_verdict(c)}, {error(c['float64']['rel'])})" for c in failed[:12])
            more = f" and {len(failed) - 12} more" if len(failed) > 12 else ""
            items.append(
                f"{scenario['name']}{f' on {runtime}' if runtime else ''}: calls {calls}{more} failed; worst "
                f"{error(s['worst_rel'])} of the logit scale, agreement {s['agreement']}, first divergence: "
                f"{s['first_divergence']}"
            )
    if not items and not report["passed"]:
        items = ["The report does not say it passed, and names no failed scenario."]
    if not items:
        return ""
    bullets = "".join(f"<li>{_html(item)}</li>" for item in items)
    return f'<section class="failures" id="failures"><h2>What failed</h2><ul>{bullets}</ul></section>'


def _table(scenario: dict[str, Any], header: list[str]) -> str:
    head = "".join(f"<th>{_html(h)}</th>" for h in header)
    rows = []
    for call in scenario["calls"]:
        css = "skip" if call["stale_cache"] else "" if call["passed"] else "fail"
        tds = []
        for i, text in enumerate(_cells(call)):
            if i == len(header) - 1:
                badge = "info" if call["stale_cache"] or call["near_ties"] else "pass" if call["passed"] else "fail"
                tds.append(f'<td><span class="badge {badge}">{_html(text)}</span></td>')
            else:
                tds.append(f'<td class="num">{_html(text)}</td>' if i in NUMERIC else f"<td>{_html(text)}</td>")
        rows.append((f'<tr class="{css}">' if css else "<tr>") + "".join(tds) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _headline(report: dict[str, Any]) -> str:
    scenarios = report["scenarios"]
    worst = max((s["summary"]["worst_rel"] for s in scenarios), default=0.0)
    agree = [tuple(int(x) for x in s["summary"]["agreement"].split("/")) for s in scenarios]
    calls = sum(len(s["calls"]) for s in scenarios)
    passed = sum(bool(s["passed"]) for s in scenarios)
    cost = f" Quantization cost (not judged): {_cost(report)}." if _quantized(report) else ""
    records = _records(report)
    ran = [r for r in records if r.get("status") == "verified"]
    others = [r for r in records if not (ran and r is ran[0])]  # the headline's figures are the first's that ran
    return (
        f"{passed} of {len(scenarios)} scenarios passed ({calls} calls) on {report['runtime']}: worst error "
        f"{error(worst)} of the logit scale against float64 (tolerance {report['tolerance']['rel']:g}), greedy "
        f"agreement {sum(a for a, _ in agree)}/{sum(b for _, b in agree)}.{cost}"
        + "".join(f" On {r.get('name')}: {_on(r)}." for r in others)
    )


def write_html(report: dict[str, Any]) -> str:
    """The whole report as one self-contained page (no script, nothing fetched; the figure is a PNG data URI)."""
    from ropeexport.report.html import CSS, figure_html, safe_plot

    word = "PASS" if report["passed"] else "FAIL"
    name = _html(report["name"])
    facts = [*_facts(report), ("tolerance", _rule(report))]
    rows = "".join(f'<tr><th class="key">{_html(k)}</th><td>{_html(v)}</td></tr>' for k, v in facts)
    png = safe_plot(error_figure, report)
    parts = [
        f'<header class="banner {word.lower()}"><h1>{word}: {name}</h1><p>{_html(_headline(report))}</p></header>',
        _failures(report),
        f'<section id="decoder"><h2>Decoder</h2><table class="pairs"><tbody>{rows}</tbody></table></section>',
        '<section id="errors"><h2>Error over the logit scale, per call</h2>'
        + figure_html(png, "each call's error over the logit scale against its last position, per scenario",
                      PLOT_CAPTION)
        + "</section>",
    ]
    for runtime, scenarios in [("", report["scenarios"]), *_further(report)]:
        on = f" on {runtime}" if runtime else ""
        for scenario in scenarios:
            verdict = "passed" if scenario["passed"] else "FAILED"
            anchor = "scenario-" + re.sub(r"[^A-Za-z0-9_-]", "-", f"{scenario['name']}{on}".replace(" on ", "-on-"))
            parts.append(
                f'<section id="{anchor}"><h2>{_html(scenario["name"] + on)}: {verdict}</h2>'
                f"<p>{_html(_sentence(scenario))}</p>{_table(scenario, _header(report))}</section>"
            )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{word}: {name}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        '<nav class="small"><a href="../index.html">&larr; every artifact of this tree (index.html)</a> &middot; '
        '<a href="report.md">report.md</a> &middot; <a href="report.json">report.json</a></nav>\n'
        + "\n".join(part for part in parts if part)
        + "\n</body>\n</html>\n"
    )
