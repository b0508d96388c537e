"""The artifact tree: ``DIR/NAME/`` per artifact plus ``DIR/index.json`` and ``DIR/index.html`` summarising them all.

The index is rebuilt from the artifact folders present (each read by its kind: ``artifacts.entry``), so a second
build into the same DIR adds to it and an artifact replaced by a rebuild appears once. Both files are written to a
temporary name and renamed, so a reader never sees half of one. A rebuild that failed verification while its name
held a verified artifact is kept under ``_failed/NAME`` (``store``); the verified artifact's line links to it.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ropeexport.errors import SpecError
from ropeexport.pipeline import versions
from ropeexport.report import words
from ropeexport.report.html import CSS
from ropeexport.store import MANIFEST, is_artifact, read_object

INDEX_SCHEMA = "ropeexport.index/1"
# The index table fits the page (body: at most 1200 px) whatever its rows hold: a 100-character name, a snapshot
# path, a skipped runtime's reason. Every text cell may break anywhere (a path has no space to break at) and the
# figures wrap at their spaces, so no column is wider than its longest word allows; measured with headless Chromium
# at 1,400 px on tests/report/sample_index.py (tools/figures/index-width.md).
INDEX_CSS = """
table.index { width: 100%; }
table.index td { overflow-wrap: anywhere; }
table.index td.num { white-space: normal; overflow-wrap: normal; }
"""


def artifact_folders(out: Path, damaged: bool = False) -> list[Path]:
    """Artifact folders of ``out`` (work folders start with '.', ``_failed`` with '_': skipped; links are not ours).

    With ``damaged``, also folders with a manifest.json that no longer reads as ours (truncated, edited), or a decoder
    of a ropeexport before the store (decoder.json and no manifest.json): the index lists them as damaged instead of
    losing them.
    """
    if not out.is_dir():
        return []
    found = []
    for p in sorted(out.iterdir()):
        if p.name.startswith((".", "_")) or p.is_symlink() or not p.is_dir():
            continue
        if is_artifact(p) or (damaged and ((p / MANIFEST).is_file() or (p / "decoder.json").is_file())):
            found.append(p)
    return found


def check_tree(out: Path) -> None:
    """Refuse an ``--out`` that exists and is not a ropeexport tree (nothing of the user's is ever mixed in).

    Allowed: a path that does not exist, an empty folder, a folder with a ropeexport index.json or at least one
    ropeexport artifact folder. A user's own index.html beside a ropeexport index.json would be replaced: the pair is
    ropeexport's. A link to nothing is refused (it would be replaced by a folder).
    """
    if out.is_symlink() and not out.exists():
        raise SpecError("out_dir", f"{str(out)!r} is a link to nothing; give a folder")
    if not out.exists():
        return
    if not out.is_dir():
        raise SpecError("out_dir", f"{str(out)!r} exists and is not a folder")
    entries = [p for p in out.iterdir() if not p.name.startswith(".")]
    if not entries or is_tree(out) or artifact_folders(out):
        return
    raise SpecError(
        "out_dir",
        f"{str(out)!r} exists and is not a ropeexport tree (no ropeexport index.json, no artifact folders); "
        "choose a new or empty folder",
    )


def is_tree(folder: Path) -> bool:
    """A folder holding a ropeexport index.json (written by ``write_index_files``)."""
    return (read_object(folder / "index.json", "index.json") or {}).get("schema") == INDEX_SCHEMA


def damaged_entry(folder: Path, out: Path, reason: str) -> dict[str, Any]:
    """The index line of an artifact folder whose manifest or report cannot be read as ropeexport wrote them."""
    return {
        "name": folder.name,
        "encoding": None,
        "artifact": None,
        "dtype": None,
        "graph": None,
        "max_positions": None,
        "passed": False,
        "status": "unreadable",
        "reason": reason,
        "path": os.path.relpath(folder, out),
        "report": os.path.relpath(folder / "report.html", out),
        "worst_max_abs": {},
        "worst_ratio": {},
        "bytes": {"model": 0, "folder": 0},
        "build_seconds": None,
        "origin": {},
        "runtimes": [],
        "versions": {},
    }


def index_dict(
    out: Path, entries: list[dict[str, Any]], wall_seconds: float | None = None, jobs: int | None = None
) -> dict[str, Any]:
    """The index of ``out`` from its artifacts' ``entries``; ``wall_seconds`` / ``jobs`` describe the build that wrote
    it.
    """  # noqa: D205
    passed = sum(e["passed"] for e in entries)
    return {
        "schema": INDEX_SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "path": str(out.resolve()),
        "passed": passed,
        "failed": len(entries) - passed,
        "last_build": {"wall_seconds": wall_seconds, "jobs": jobs},
        "versions": versions(),
        "artifacts": entries,
    }


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_index_files(out: Path, index: dict[str, Any]) -> None:
    """Write ``out/index.json`` and ``out/index.html`` of ``index``, each whole or not at all."""
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write(out / "index.json", json.dumps(index, indent=2, sort_keys=False) + "\n")
    _atomic_write(out / "index.html", render_index(index))


def _fmt(value: float | None) -> str:
    return "raised" if value is None else words.error(value)


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def _relative_link(path: str) -> str:
    """An href for an artifact folder of this tree: ``./NAME``, URL-quoted.

    No folder name (say ``javascript:alert(1)``) can become a scheme, an absolute path or a link out of the tree.
    """
    name = Path(str(path)).name
    return "./" + quote(name, safe="")


def _error_cell(worst: dict[str, Any], ratio: dict[str, Any], reference: str) -> str:
    """``4.99e-01 (0.12 of allowed)``: the error next to its share of what the tolerance allows (1 is the limit)."""
    if reference not in worst:
        return "-"
    share = ratio.get(reference)
    said = "" if reference not in ratio else " (raised)" if share is None else f" ({words.share(share)})"
    return escape(_fmt(worst.get(reference)) + said)


def _relative_cell(entry: dict[str, Any], reference: str) -> str:
    """A decoder's ``8.88e-07 of the logit scale (<0.01 of allowed)``: its worst relative error, then its share of the
    tolerance (transformers is compared with, not judged by).
    """  # noqa: D205
    rel = entry.get("worst_rel") or {}
    if rel.get(reference) is None:
        return "-"
    share = (entry.get("worst_ratio") or {}).get(reference)
    said = f" ({words.share(share)})" if share is not None else " (not judged)" if reference == "transformers" else ""
    return escape(f"{_fmt(rel[reference])} of the logit scale{said}")


def render_index(index: dict[str, Any]) -> str:
    """``index.html``: one row per artifact linking to its report; failing rows first and highlighted."""
    rows = []
    ordered = sorted(index["artifacts"], key=lambda e: (e["passed"], e["name"]))
    for e in ordered:
        css = "" if e["passed"] else ' class="fail"'
        badge = '<span class="badge pass">PASS</span>' if e["passed"] else '<span class="badge fail">FAIL</span>'
        worst = e["worst_max_abs"]
        ran = ", ".join(
            f"{r['name']} ({r.get('device') or r.get('reason', '')})"
            if r["status"] == "verified"
            else f"{r['name']} skipped: {r.get('reason', '')}"
            for r in e["runtimes"]
        )
        if e.get("status") == "unreadable":
            ran = f"DAMAGED: {e.get('reason', '')}"
        if e.get("failed_rebuild"):
            ran += f"; a later rebuild FAILED and was kept apart: {e['failed_rebuild']}"
        origin = e["origin"].get("preset") or e["origin"].get("hf_config") or e["origin"].get("spec") or ""
        if e["origin"].get("layers"):  # a model whose layers differ: which of them use this artifact's encoding
            origin = f"{origin} (layers {e['origin']['layers']}" + (
                f"; no positional encoding on {e['origin']['no_rope_layers']})" if e["origin"].get("no_rope_layers")
                else ")")  # fmt: skip
        # An entry with worst_rel (a decoder's) gives its errors relative to a scale (worst_rel_of says which).
        relative = "worst_rel" in e and e.get("status") != "unreadable"
        if relative:  # errors over the logit scale (transformers stands in the eager column); weights as the source
            counts = e.get("scenarios") or {}
            ran += f"; {counts.get('passed')} of {counts.get('total')} scenarios passed"
            cost = (e.get("quantization_cost") or {}).get("worst_rel")
            if isinstance(cost, (int, float)):  # an int4 decoder's second figure, apart from the judged one
                ran += f"; quantization cost (not judged): {words.error(cost)} of the logit scale"
            origin = e["origin"].get("weights") or ""
        seconds = "" if e["build_seconds"] is None else f"{e['build_seconds']:.1f} s"
        ratio = e.get("worst_ratio") or {}
        folder = _relative_link(e["path"])
        links = (
            f'<a href="{folder}/report.html">{escape(e["name"])}</a>'
            f' <span class="small">(<a href="{folder}/report.md">md</a>)</span>'
        )
        cells = [
            badge,
            links,
            escape(f"{e['encoding']} / {e['artifact']}"),
            escape(f"{e['dtype']} {e['weight_format'] + ' ' if e.get('weight_format') else ''}{e['graph']}"),
            escape(str(e["max_positions"])),
            _relative_cell(e, "transformers") if relative else _error_cell(worst, ratio, "eager"),
            _relative_cell(e, "float64") if relative else _error_cell(worst, ratio, "float64"),
            escape(_size(e["bytes"]["model"])),
            escape(seconds),
            escape(ran),
            escape(str(origin)),
        ]
        num = {4, 5, 6, 7, 8}
        tds = "".join(f'<td class="num">{c}</td>' if i in num else f"<td>{c}</td>" for i, c in enumerate(cells))
        rows.append(f"<tr{css}>{tds}</tr>")
    header = [
        "",
        "artifact",
        "encoding / kind",
        "dtype graph",
        "max positions",
        "worst |err| vs eager (share of allowed)",
        "worst |err| vs float64 (share of allowed)",
        "model size",
        "build time",
        "runtimes",
        "from",
    ]
    versions = ", ".join(f"{k} {v}" for k, v in index["versions"].items() if v)
    total = len(index["artifacts"])
    state = "pass" if index["failed"] == 0 and total else "fail"
    wall = index["last_build"]["wall_seconds"]
    took = "" if wall is None else f" Last build: {wall:.1f} s wall time with {index['last_build']['jobs']} job(s)."
    note = ""
    if any("worst_rel" in e for e in index["artifacts"]):
        note = (
            " Decoder rows (kind decoder) are whole models verified by greedy generation: their errors are the worst "
            "call's max |logit error| relative to the logit scale (max |float64 logit| of the call), against float64 "
            "(in parentheses, its share of the tolerance) and transformers (in the eager column, not judged)."
        )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>ropeexport: {index['passed']} of {total} verified</title><style>{CSS}{INDEX_CSS}</style></head><body>"
        f'<div class="banner {state}"><h1>ropeexport artifacts: {index["passed"]} of {total} verified</h1>'
        f"<p>{escape(index['path'])}. Errors are max |artifact - reference| over every probe, runtime and output; "
        f"in parentheses, the worst element's error as a share of what its tolerance allows, max(atol, rtol x "
        f"|expected|): at most 1 passes. Each report has the details.{escape(note + took)}</p></div>"
        '<table class="index"><thead><tr>'
        + "".join(f"<th>{escape(h)}</th>" for h in header)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + f"</tbody></table><p>Versions: {escape(versions)}. Written {escape(index['created'])}.</p></body></html>\n"
    )
