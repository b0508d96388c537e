"""An audit's pages: audit.md and audit.html of an ``AuditResult`` (``audits.core``), and the words both use for a
site (what it reads, where, which layers, its dtype).
"""  # noqa: D205

from __future__ import annotations

import base64
from typing import Any, Protocol

from ropeexport.audits.checks import dtype_of
from ropeexport.audits.sites import SiteKind
from ropeexport.report.words import error
from ropeexport.results import JsonObject


class Audited(Protocol):
    """What the pages read of an ``AuditResult`` (its fields and verdicts; ``audits.core``)."""

    model: str
    config: str
    spec: JsonObject
    sites: list[JsonObject]
    findings: list[JsonObject]
    optimized: JsonObject | None

    @property
    def verdict(self) -> str:
        """``exact`` or ``findings``."""

    @property
    def gate(self) -> JsonObject:
        """The CI gate at the result's level."""


def markdown(result: Audited, optimized: str | None = None) -> str:
    """audit.md: the verdict, then one section per site; ``optimized``: the optimized graph's own audit.md, when
    audited (``AuditResult.markdown`` makes it), placed one heading level down after what the optimizer did.
    """  # noqa: D205
    spec = result.spec
    gate = result.gate
    lines = [f"# ropeexport audit: {result.verdict}", "",
             f"- model: `{result.model}`", f"- config: `{result.config}` ({_describe(spec)})",
             f"- gate (--fail-on {gate['fail_on']}): {'passed' if gate['passed'] else 'failed'}"
             + (f"; every finding below {gate['fail_on']}" if gate["passed"] and result.findings else ""),
             "- reference: the config's schedule (ALiBi: slopes) in float64; exact = within the stored dtype's "
             "rounding", ""]  # fmt: skip
    if result.findings:
        lines += ["## Findings, by their effect on the logits", "",
                  "Each finding's sites repaired alone (graft's exact values for their layers) and both models "
                  "run as users run them (their own cache from their own prefill to the far end of the context, "
                  "every switch and window edge scored, several draws at the end): max |logits - repaired logits| "
                  "over max |logit| in the worst 8-token window. Severity: harmless within the bound ropeexport "
                  "verifies the logits' dtype to (float32 1e-4), minor up to 1e-2 of the logit scale, wrong "
                  "above.", "",
                  "| severity | finding | sites | logit change | of the logit scale | call | next |",
                  "|---|---|---|---:|---:|---|---|"]  # fmt: skip
        for found in result.findings:
            effect = found.get("effect") or {}
            sites = ", ".join(str(i) for i in found["sites"]) or "none"
            if "max_abs" in effect:
                change = f"{error(effect['max_abs'])} | {error(effect['relative'])} | positions "
                change += f"{effect['positions'][0]}..{effect['positions'][1]} ({effect.get('at', '')}), "
                change += effect["how"]
            else:
                change = f" | | not measured: {effect.get('not_measured', 'not asked')}"
            level = (found.get("severity") or {}).get("level", "")
            step = (found.get("next") or {}).get("text", "").replace("|", "\\|")
            lines.append(f"| **{level}** | {found['text']} (`{found['name']}`) | {sites} | {change} | {step} |")
        lines.append("")
    for i, site in enumerate(result.sites):
        users = site["users"]
        shown = ", ".join(f"`{u}`" for u in users[:3]) + (f" and {len(users) - 3} more" if len(users) > 3 else "")
        verdict = "exact" if site["exact"] else "findings"
        lines += [
            f"## Site {i}: {site['kind']} ({verdict})",
            "",
            f"{_values(site)}, read by {shown}{_layers(site)}; {_dtype_words(site)}",
            "",
        ]
        if site.get("note"):
            lines += [site["note"], ""]
        for finding in site["findings"]:
            lines.append(f"- **{finding['text']}** (`{finding['name']}`)")
        if site["probes"]:
            lines += ["", "| call length L | rows | max abs error | at position | attention factor | exact |",
                      "|---:|---:|---:|---:|---:|:---|"]  # fmt: skip
            for p in site["probes"]:
                factor = "" if p["attention_factor"] is None else f"{p['attention_factor']:.6g}"
                lines.append(f"| {p['length']} | {p['rows']} | {error(p['max_abs'])} | {p['position']} | {factor} "
                             f"| {'yes' if p['exact'] else 'no'} |")  # fmt: skip
        lines.append("")
    if result.optimized is not None and optimized is not None:  # what the optimizer did, then its graph's report
        from ropeexport.audits.optimized import section

        inner = optimized.split("\n")
        lines += section(result.optimized) + [f"#{line}" if line.startswith("#") else line for line in inner[4:]]
    return "\n".join(lines)


def html(result: Audited) -> str:
    """audit.html, one self-contained page: the verdict, then per site its findings, its call lengths and
    a plot of the worst error against position for each (the dtype's tolerance dotted).
    """  # noqa: D205
    from html import escape

    from ropeexport.report.html import CSS, safe_plot
    from ropeexport.report.plots import Line, error_by_position

    spec = result.spec
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>ropeexport audit</title><style>{CSS}"
             f"</style></head><body><h1>ropeexport audit: {escape(result.verdict)}</h1>",
             f"<p>model <code>{escape(result.model)}</code>; config <code>{escape(result.config)}</code> "
             f"({escape(_describe(spec))}); reference: the config's schedule in float64</p>"]  # fmt: skip
    for i, site in enumerate(result.sites):
        verdict = "exact" if site["exact"] else "findings"
        parts.append(f"<h2>Site {i}: {escape(site['kind'])} ({verdict})</h2><p>{escape(_values(site))}, read by "
                     f"{len(site['users'])} node(s); {escape(_dtype_words(site))}</p>")  # fmt: skip
        if site["findings"]:
            items = "".join(f"<li><b>{escape(f['text'])}</b> <code>{escape(f['name'])}</code></li>"
                            for f in site["findings"])  # fmt: skip
            parts.append(f"<ul>{items}</ul>")
        if not site["probes"]:
            continue
        rows = "".join(f"<tr><td>{p['length']}</td><td>{p['rows']}</td><td>{error(p['max_abs'])}</td>"
                       f"<td>{p['position']}</td><td>{'yes' if p['exact'] else 'no'}</td></tr>"
                       for p in site["probes"])  # fmt: skip
        parts.append("<table><thead><tr><th>call length L</th><th>rows</th><th>max abs error</th>"
                     f"<th>at position</th><th>exact</th></tr></thead><tbody>{rows}</tbody></table>")  # fmt: skip
        lines = [Line(f"L = {p['length']}", p["curve"]["x"], p["curve"]["y"]) for p in site["probes"]]
        png = safe_plot(error_by_position, lines, "position", [site["probes"][0]["tolerance"]])
        if not png:  # a plot must never cost the report
            parts.append("<p>Plot left out: matplotlib could not draw these values.</p>")
            continue
        data = base64.b64encode(png).decode("ascii")
        parts.append(f"<figure><img alt='worst error against position, site {i}' "
                     f"src='data:image/png;base64,{data}'></figure>")  # fmt: skip
    if result.optimized is not None:
        from ropeexport.audits.optimized import html as optimized_html

        parts.append(optimized_html(result.optimized))
    return "".join(parts) + "</body></html>\n"


def inside(site: dict[str, Any]) -> str:
    """`` inside the If 'x' then_branch``, `` inside function local:Rot``: where a site's record says it lies."""
    words = f" inside the {site['graph']}" if site.get("graph") else ""
    functions = site.get("functions") or []
    return words + (f" inside function{'s' if len(functions) > 1 else ''} {', '.join(functions)}" if functions else "")


def _dtype_words(site: dict[str, Any]) -> str:
    return f"dtype {site['dtype']}" if site.get("dtype") else dtype_of(site)


def _values(site: dict[str, Any]) -> str:
    """What a site reads: ``cos `a`, sin `b``` (an ALiBi site: ``bias `a```), and the subgraph they are in."""
    inside_ = inside(site)
    if SiteKind(site["kind"]) is SiteKind.ALIBI:
        return f"bias `{site['cos']}`{inside_}"
    if SiteKind(site["kind"]) is SiteKind.VISION:  # ``audits.vision``: the model's rotated outputs, read by running it
        return "outputs " + ", ".join(f"`{name}`" for name in (site["cos"], site["sin"]) if name)
    return f"cos `{site['cos']}`, sin `{site['sin']}`{inside_}"


def _layers(site: dict[str, Any]) -> str:
    """`` (layers 0-1, 3)``: the layers a site's readers name, and the encoding it was checked against."""
    from ropeexport.hf import spans

    if site.get("layers") is None:
        return "" if "layers" not in site else " (no reader names its layer)"
    checked = [c for c in site.get("checked_as", []) if c]
    return f" (layers {spans(site['layers'])}" + (f"; checked as {' and '.join(checked)}" if checked else "") + ")"


def _describe(spec: dict[str, Any]) -> str:
    """The config's position encoding in a few words (the reports' header)."""
    if spec.get("encoding") == "alibi":
        return (f"ALiBi, {spec['num_heads']} heads, slope_scale {spec['slope_scale']:g}, max_positions "
                f"{spec['max_positions']}")  # fmt: skip
    if spec.get("encoding") == "vision_rope":
        return (f"2-D vision RoPE, {spec['axis_frequencies']}, theta {spec['theta']:g}, head_dim {spec['head_dim']}, "
                f"{spec['max_positions']} patches a side")  # fmt: skip
    return (f"{spec['scaling']} schedule, theta {spec['theta']:g}, rotary_dim {spec['rotary_dim']}, max_positions "
            f"{spec['max_positions']}")  # fmt: skip
