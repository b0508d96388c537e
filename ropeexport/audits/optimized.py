"""``audit --optimized``: the graph ONNX Runtime runs, audited beside the one that was exported.

``attach`` saves ONNX Runtime's optimized graph of the model (``audits.optimizer.optimize``: the CPU provider, at the
level asked; ``all`` is the level a session runs by default), or takes one saved elsewhere (``--optimized-model``: a
GPU provider's session with ``optimized_model_filepath``), audits it as any model is audited (every site against the
config, exact or findings, each finding's effect measured on the optimized graph), and says per layer what the
optimizer did to each rotation (``audits.optimizer.changes``). A finding of the optimized graph that the exported
graph does not have is the optimizer's (``introduced``): its next step is about the optimizer, since grafting the
exported model does not reach a rewrite made when a session loads it. The audit's verdict is ``exact`` only when both
graphs are; its gate fails when either graph's does.
"""  # noqa: D205

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ropeexport.audits.optimizer import DEFAULT_LEVEL, LEVELS, check_level, compare, optimize, runtime
from ropeexport.errors import SpecError

GPU_NOTE = ("A GPU provider registers fusions of its own (ONNX Runtime's GroupQueryAttentionFusion, which folds "
            "RotaryEmbedding into GroupQueryAttention's do_rotary, is one); this graph is the CPU provider's. A graph "
            "a GPU session saved (its optimized_model_filepath) is audited with --optimized-model FILE.")  # fmt: skip


def check_request(level: str | None, given: str | Path | None) -> None:
    """A SpecError unless at most one of a level (``LEVELS``) and a saved optimized graph is asked for."""
    if level is not None and given is not None:
        raise SpecError("optimized_model", "give either an optimization level (--optimized) or an optimized graph "
                        "saved elsewhere (--optimized-model), not both")  # fmt: skip
    if level is not None:
        check_level(level)


def _how(level: str | None, given: Path | None) -> str:
    if given is not None:
        return f"the optimized graph {str(given)!r}"
    return f"ONNX Runtime's optimized graph (level {level}, CPU provider)"


def attach(path: Path, level: str | None, given: Path | None, again: Callable[[Path, dict[Any, Any]], Any],
           threads: int,
           exported: list[dict[str, Any]], encodings: Any) -> dict[str, Any]:  # fmt: skip
    """The optimized graph's audit (module doc) as audit.json's ``optimized`` record: ``again(model, known)`` audits a
    model file as the exported one was (an ``AuditResult``), taking the effects in ``known`` (``known_effects``) as
    measured; ``exported`` is the exported graph's findings, ``encodings`` the layers' (``audits.layers.Encodings``).
    """  # noqa: D205
    how = _how(level, given)
    with tempfile.TemporaryDirectory(prefix="ropeexport-optimized-") as folder:
        target = given if given is not None else optimize(path, str(level), Path(folder), threads)
        try:
            compared = compare(path, target)
            inner = again(target, known_effects(level, given, compared, exported))
        except SpecError as exc:  # the optimized graph read as any model: what stops it names that graph
            raise SpecError(exc.field, f"{how}: {exc.message}") from None
    ran = runtime() if given is None else {"onnxruntime": None, "provider": None}
    findings = [_judged(f, level, {e["name"]: e.get("next") for e in exported}) for f in inner.findings]
    return {"level": level, "model": None if given is None else str(given), **ran, "verdict": inner.verdict,
            "gate": inner.gate, **compared, "sites": inner.sites, "findings": findings}  # fmt: skip


SAME_GRAPH = ("measured on the exported graph, whose sessions ONNX Runtime optimizes at this level on the CPU "
              "provider before they run: that run was this graph's, so it is not run again")  # fmt: skip


def finding_key(found: dict[str, Any]) -> tuple[str, tuple[int, ...]]:
    """A finding as both graphs name it: its name and the layers it is on (site numbers differ between them)."""
    return found["name"], tuple(found.get("layers") or ())


def known_effects(level: str | None, given: Path | None, compared: dict[str, Any],
                  exported: list[dict[str, Any]]) -> dict[tuple[str, tuple[int, ...]], dict[str, Any]]:  # fmt: skip
    """The exported graph's measured effects the optimized graph's findings take as theirs, by ``finding_key``: only
    where the effect's runs were of this very graph, i.e. the CPU provider's own optimization at the level sessions
    run by default (``runs`` opens its sessions with ONNX Runtime's default, ``all``) and no rotation changed; a
    graph saved elsewhere, another level, or a changed rotation is measured on its own (two prefills to the far end).
    """  # noqa: D205
    if given is not None or level != DEFAULT_LEVEL or compared["changed"]:
        return {}
    return {finding_key(f): f["effect"] | {"measured_on": SAME_GRAPH}
            for f in exported if "relative" in (f.get("effect") or {})}  # fmt: skip


def _judged(found: dict[str, Any], level: str | None, exported: dict[str, Any]) -> dict[str, Any]:
    """A finding of the optimized graph with whose it is: the exported graph's too (``introduced`` False: the exported
    finding's next step, for the exported model: ``exported`` maps its findings' names to their next steps) or the
    optimizer's (its next step says what to do about the optimizer).
    """  # noqa: D205
    if found["name"] in exported:
        return found | {"introduced": False, "next": exported[found["name"]] or found.get("next")}
    lower = [name for name in LEVELS if level is not None and list(LEVELS).index(name) < list(LEVELS).index(level)]
    serve = (f"serve at a lower graph_optimization_level ({' or '.join(lower)}: `--optimized LEVEL` audits each)"
             if lower else "serve with graph optimizations disabled")  # fmt: skip
    text = (f"ONNX Runtime's optimizer makes it when a session loads the model, so grafting the exported model does "
            f"not reach it: {serve}, or re-export in a form the optimizer leaves as it is, and report it to ONNX "
            "Runtime")  # fmt: skip
    return found | {"introduced": True, "next": {"action": "optimizer", "text": text}}


def section(record: dict[str, Any]) -> list[str]:
    """Markdown lines saying what the optimizer did (the optimized graph's own sites follow them in audit.md)."""
    if record["model"] is not None:
        ran = f"the optimized graph `{record['model']}` (saved elsewhere)"
    else:
        ran = (f"ONNX Runtime {record['onnxruntime']}, CPU provider, graph_optimization_level {record['level']} "
               f"({LEVELS[record['level']]})")  # fmt: skip
    lines = [f"## The optimized graph: {record['verdict']}", "", f"{ran}: {record['text']}.", ""]
    lines += [GPU_NOTE, ""] if record["model"] is None else []  # a graph given was saved by whatever session made it
    if record["changes"]:
        lines += ["| layers | exported | optimized | what the optimizer did |", "|---|---|---|---|"]
        for change in record["changes"]:
            layers = "no layer named" if change["layers"] is None else _spans(change["layers"])
            did = "; ".join(change["changes"].values()) or "nothing"
            if change["rotation_changed"]:
                did = f"**another rotation**: {did}"
            lines.append(f"| {layers} | {change['before'] or 'none'} | {change['after'] or 'none'} | {did} |")
        lines.append("")
    return lines


def html(record: dict[str, Any]) -> str:
    """``section`` as HTML: a heading, the paragraphs, the table of changes."""
    from html import escape

    out = []
    rows = [line for line in section(record) if line.startswith("|")]
    for line in section(record):
        if line.startswith("## "):
            out.append(f"<h2>{escape(line[3:])}</h2>")
        elif line and not line.startswith("|"):
            out.append(f"<p>{escape(line)}</p>")
    if rows:
        cells = [[escape(c.strip().replace("**", "")) for c in row.strip("|").split(" | ")] for row in rows]
        head = "".join(f"<th>{c}</th>" for c in cells[0])
        body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in cells[2:])
        out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    return "".join(out)


def _spans(layers: list[int]) -> str:
    from ropeexport.hf import spans

    return spans(layers)


def lines(record: dict[str, Any]) -> list[str]:
    """What the CLI prints about the optimized graph: what the optimizer did, its sites and its findings."""
    from ropeexport.audits.checks import dtype_of
    from ropeexport.report.words import error

    head = record["text"] if record["model"] is not None else (
        f"ONNX Runtime {record['onnxruntime']} (CPU, level {record['level']}): {record['text']}")  # fmt: skip
    out = [f"  optimized graph: {len(record['sites'])} rotary site(s), {record['verdict']}; {head}"]
    for i, site in enumerate(record["sites"]):
        worst = max(site["probes"], key=lambda p: p["max_abs"], default=None)
        where = "" if worst is None else f", worst {error(worst['max_abs'])} at position {worst['position']}"
        out.append(f"    optimized site {i}: {site['kind']}, {len(site['users'])} reader(s), {dtype_of(site)}: "
                   f"{'exact' if site['exact'] else 'findings'}{where}")  # fmt: skip
        out += [f"      - {f['text']}" for f in site["findings"]]
    for found in record["findings"]:
        whose = "made by the optimizer" if found.get("introduced") else "as in the exported graph"
        out.append(f"    - {found['text']} ({whose})")
        out.append(f"      {found['severity']['level']}: {found['severity']['text']}")
        out.append(f"      next: {found['next']['text']}")
    return out
