"""The artifact tree: ``DIR/NAME/`` per artifact plus ``DIR/index.json`` and ``DIR/index.html`` summarising them all.

The index is rebuilt from the artifact folders present (their manifest.json and report.json), so a second build into
the same DIR adds to it and an artifact replaced by a rebuild appears once. Both files are written to a temporary
name and renamed, so a reader never sees half of one.

A decoder folder (``build --artifact decoder``: decoder.json and a report.json whose artifact is ``decoder``, no
manifest.json) is an artifact of the tree too. It is read here as JSON only (this module never imports the decoder
package); its errors are relative to the logit scale, not absolute (``decoder_entry``).
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
from ropeexport.inputs import read_json
from ropeexport.pipeline import MANIFEST_SCHEMA, is_artifact, versions
from ropeexport.report import REPORT_SCHEMA
from ropeexport.report.html import CSS

INDEX_SCHEMA = "ropeexport.index/1"
DECODER = "decoder"  # report.json's "artifact" in a decoder folder
DECODER_SCALE = "max |float64 logit| of the call (the logit scale)"  # what a decoder's relative errors divide by


def _decoder_like(folder: Path) -> bool:
    """decoder.json and no manifest.json: a decoder folder, whole or not (``ropeexport.decoder.reverify``'s test)."""
    return (folder / "decoder.json").is_file() and not (folder / "manifest.json").exists()


def is_decoder(folder: Path) -> bool:
    """A decoder folder: decoder.json, a report.json whose artifact is ``decoder``, and no manifest.json."""
    return _decoder_like(folder) and (_read(folder / "report.json") or {}).get("artifact") == DECODER


def artifact_folders(out: Path, damaged: bool = False) -> list[Path]:
    """Artifact folders of ``out``, decoders included (build's temporary folders start with '.' and are skipped; links
    are not ours).

    With ``damaged``, also folders with a manifest.json that no longer reads as ours (truncated, edited), or with a
    decoder.json whose report.json does not read as a decoder's: the index lists them as damaged instead of losing them.
    """  # noqa: D205
    if not out.is_dir():
        return []
    found = []
    for p in sorted(out.iterdir()):
        if p.name.startswith(".") or p.is_symlink() or not p.is_dir():
            continue
        if is_artifact(p) or is_decoder(p) or (damaged and ((p / "manifest.json").is_file() or _decoder_like(p))):
            found.append(p)
    return found


def check_tree(out: Path) -> None:
    """Refuse an ``--out`` that exists and is not a ropeexport tree (nothing of the user's is ever mixed in).

    Allowed: a path that does not exist, an empty folder, a folder with a ropeexport index.json or at least one
    ropeexport artifact folder (a decoder's included). A user's own index.html beside a ropeexport index.json would
    be replaced: the pair is ropeexport's.
    """
    if not out.exists():
        return
    if not out.is_dir():
        raise SpecError("out_dir", f"{str(out)!r} exists and is not a folder")
    entries = [p for p in out.iterdir() if not p.name.startswith(".")]
    if not entries or (_read(out / "index.json") or {}).get("schema") == INDEX_SCHEMA or artifact_folders(out):
        return
    raise SpecError(
        "out_dir",
        f"{str(out)!r} exists and is not a ropeexport tree (no ropeexport index.json, no artifact folders); "
        "choose a new or empty folder",
    )


def is_tree(folder: Path) -> bool:
    """A folder holding a ropeexport index.json (written by ``write_index``)."""
    return (_read(folder / "index.json") or {}).get("schema") == INDEX_SCHEMA


def _read(path: Path) -> dict[str, Any] | None:
    """A JSON object from a regular file of ours; None for anything else (a FIFO is not opened, never waited on)."""
    try:
        data = read_json(path, path.name)
    except SpecError:
        return None
    return data if isinstance(data, dict) else None


def _worst(report: dict[str, Any]) -> dict[str, float | None]:
    """Worst max |error| per reference (eager, float64) over every runtime and output; None where a runtime raised."""
    worst: dict[str, float | None] = {}
    for c in report.get("comparisons", []):
        ref, err = c.get("reference"), c.get("max_abs")
        if ref in worst and worst[ref] is None:
            continue
        worst[ref] = None if err is None else max(float(err), worst.get(ref) or 0.0)
    return worst


def _worst_ratio(report: dict[str, Any]) -> dict[str, float | None]:
    """Worst error as a share of its allowance per reference (1 is the limit); None where a runtime raised."""
    worst: dict[str, float | None] = {}
    for c in report.get("comparisons", []):
        ref, value = c.get("reference"), c.get("max_ratio")
        if ref in worst and worst[ref] is None:
            continue
        worst[ref] = None if value is None else max(float(value), worst.get(ref) or 0.0)
    return worst


def _folder_bytes(folder: Path, names: Any) -> dict[str, int]:
    """{"model": bytes of the listed model.* files present (model.onnx, its .data, an engine), "folder": every file}."""
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    model_files = [f for f in names if str(f).startswith("model.") and (folder / f).is_file()]
    return {"model": sum((folder / f).stat().st_size for f in model_files), "folder": size}


def entry(folder: Path, out: Path) -> dict[str, Any]:
    """One artifact's line in the index: verdict, worst errors, size, build time, runtimes and versions."""
    manifest = _read(folder / "manifest.json") or {}
    report = _read(folder / "report.json") or {}
    spec = manifest.get("spec", {})
    build = manifest.get("build", {})
    ok = manifest.get("schema") == MANIFEST_SCHEMA and report.get("schema") == REPORT_SCHEMA
    return {
        "name": manifest.get("name", folder.name),
        "encoding": manifest.get("encoding"),
        "artifact": manifest.get("artifact"),
        "dtype": spec.get("dtype"),
        "graph": manifest.get("graph"),
        "max_positions": spec.get("max_positions"),
        "passed": bool(report.get("passed")) if ok else False,
        "status": ("passed" if report.get("passed") else "failed") if ok else "unreadable",
        "path": os.path.relpath(folder, out),
        "report": os.path.relpath(folder / "report.html", out),
        "worst_max_abs": _worst(report),
        "worst_ratio": _worst_ratio(report),
        "bytes": _folder_bytes(folder, manifest.get("files", {})),
        "build_seconds": build.get("seconds"),
        "origin": build.get("origin", {}),
        "runtimes": [
            {k: r[k] for k in ("name", "status", "device", "reason") if k in r} for r in report.get("runtimes", [])
        ],
        "versions": manifest.get("versions", {}),
    }


def _max_of(summaries: list[dict[str, Any]], key: str) -> float | None:
    values = [float(s[key]) for s in summaries if isinstance(s.get(key), (int, float)) and not isinstance(s[key], bool)]
    return max(values) if values else None


def decoder_entry(folder: Path, out: Path) -> dict[str, Any]:
    """A decoder's line in the index, in the fields of ``entry``; ValueError when its files do not read as a decoder's.

    A decoder's errors are relative to the logit scale (``DECODER_SCALE``): ``worst_rel`` is the worst scenario's
    ``worst_rel`` against float64 (the truth, judged) and against transformers (shown, not judged), ``worst_rel_of``
    says so; ``worst_max_abs`` is the float64 one in logits; ``worst_ratio`` is worst_rel over the tolerance (1 is the
    limit, as for every artifact). ``encoding`` is the position spec's, ``max_positions`` the spec's.
    """
    record = _read(folder / "decoder.json")
    report = _read(folder / "report.json")
    scenarios = (report or {}).get("scenarios")
    if record is None or report is None or report.get("artifact") != DECODER or not isinstance(scenarios, list):
        raise ValueError("not a decoder's (report.json's artifact 'decoder' and its scenarios)")
    spec = report.get("spec") if isinstance(report.get("spec"), dict) else record.get("spec") or {}
    position = spec.get("position") or {}
    summaries = [s["summary"] for s in scenarios if isinstance(s, dict) and isinstance(s.get("summary"), dict)]
    rel = {"float64": _max_of(summaries, "worst_rel"), "transformers": _max_of(summaries, "worst_rel_transformers")}
    rel = {k: v for k, v in rel.items() if v is not None}
    worst_abs = _max_of(summaries, "worst_abs")
    tolerance = (report.get("tolerance") or {}).get("rel")
    ratio: dict[str, float] = {}
    if "float64" in rel and isinstance(tolerance, (int, float)) and tolerance > 0:
        ratio["float64"] = rel["float64"] / float(tolerance)
    passed = report.get("passed") is True
    return {
        "name": report.get("name", folder.name),
        "encoding": position.get("encoding"),
        "artifact": DECODER,
        "dtype": spec.get("dtype"),
        "graph": spec.get("graph"),
        "max_positions": position.get("max_positions"),
        "passed": passed,
        "status": "passed" if passed else "failed",
        "path": os.path.relpath(folder, out),
        "report": os.path.relpath(folder / "report.html", out),
        "worst_max_abs": {} if worst_abs is None else {"float64": worst_abs},
        "worst_ratio": ratio,
        "worst_rel": rel,
        "worst_rel_of": DECODER_SCALE,
        "scenarios": {"passed": sum(s.get("passed") is True for s in scenarios if isinstance(s, dict)),
                      "total": len(scenarios)},
        "bytes": _folder_bytes(folder, report.get("files") or {}),
        "build_seconds": None,  # report.json keeps the verification's seconds only
        "origin": {"weights": record.get("weights")},
        "runtimes": [{"name": "ort", "status": "verified", "device": str(report.get("runtime"))}],
        "versions": {"ropeexport": report.get("ropeexport")},
    }  # fmt: skip


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


def safe_entry(folder: Path, out: Path) -> dict[str, Any]:
    """``entry``, or a damaged entry saying why: one corrupt sibling must not stop a build from indexing the rest."""
    try:
        return entry(folder, out)
    except Exception as exc:  # any shape of damage in a file we did not just write: listed, never fatal
        return damaged_entry(folder, out, f"manifest.json or report.json is damaged ({type(exc).__name__}: {exc})")


def safe_decoder_entry(folder: Path, out: Path) -> dict[str, Any]:
    """``decoder_entry``, or a damaged entry saying why (as ``safe_entry``)."""
    try:
        return decoder_entry(folder, out)
    except Exception as exc:  # any shape of damage in a file we did not just write: listed, never fatal
        return damaged_entry(folder, out, f"decoder.json or report.json is damaged ({type(exc).__name__}: {exc})")


def index_dict(out: Path, wall_seconds: float | None = None, jobs: int | None = None) -> dict[str, Any]:
    """The index of every artifact in ``out``; ``wall_seconds`` / ``jobs`` describe the build that wrote it."""
    entries = []
    for folder in artifact_folders(out, damaged=True):
        if is_artifact(folder):
            entries.append(safe_entry(folder, out))
        elif _decoder_like(folder):
            entries.append(safe_decoder_entry(folder, out))
        else:
            entries.append(damaged_entry(folder, out, "manifest.json is not a ropeexport manifest (damaged)"))
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


def write_index(out: Path, wall_seconds: float | None = None, jobs: int | None = None) -> dict[str, Any]:
    """Write ``out/index.json`` and ``out/index.html`` for every artifact present; return the index."""
    index = index_dict(out, wall_seconds, jobs)
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write(out / "index.json", json.dumps(index, indent=2, sort_keys=False) + "\n")
    _atomic_write(out / "index.html", render_index(index))
    return index


def _fmt(value: float | None) -> str:
    return "raised" if value is None else f"{value:.2e}"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _relative_link(path: str) -> str:
    """An href for an artifact folder of this tree: ``./NAME``, URL-quoted.

    No folder name (say ``javascript:alert(1)``) can become a scheme, an absolute path or a link out of the tree.
    """
    name = Path(str(path)).name
    return "./" + quote(name, safe="")


def _error_cell(worst: dict[str, Any], ratio: dict[str, Any], reference: str) -> str:
    """``4.99e-01 (0.12)``: the error next to its share of what the tolerance allows (1 is the limit)."""
    if reference not in worst:
        return "-"
    share = ratio.get(reference)
    words = "" if reference not in ratio else " (raised)" if share is None else f" ({share:.2g})"
    return escape(_fmt(worst.get(reference)) + words)


def _relative_cell(entry: dict[str, Any], reference: str) -> str:
    """A decoder's ``8.88e-07 of the logit scale (0.0089)``: its worst relative error, then its share of the tolerance
    (transformers is compared with, not judged by).
    """  # noqa: D205
    rel = entry.get("worst_rel") or {}
    if rel.get(reference) is None:
        return "-"
    share = (entry.get("worst_ratio") or {}).get(reference)
    words = f" ({share:.2g})" if share is not None else " (not judged)" if reference == "transformers" else ""
    return escape(f"{_fmt(rel[reference])} of the logit scale{words}")


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
        origin = e["origin"].get("preset") or e["origin"].get("hf_config") or e["origin"].get("spec") or ""
        decoder = e.get("artifact") == DECODER and e.get("status") != "unreadable"
        if decoder:  # errors over the logit scale (transformers stands in the eager column); weights as the source
            counts = e.get("scenarios") or {}
            ran += f"; {counts.get('passed')} of {counts.get('total')} scenarios passed"
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
            escape(f"{e['dtype']} {e['graph']}"),
            escape(str(e["max_positions"])),
            _relative_cell(e, "transformers") if decoder else _error_cell(worst, ratio, "eager"),
            _relative_cell(e, "float64") if decoder else _error_cell(worst, ratio, "float64"),
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
    if any(e.get("artifact") == DECODER for e in index["artifacts"]):
        note = (
            " Decoder rows (kind decoder) are whole models verified by greedy generation: their errors are the worst "
            "call's max |logit error| relative to the logit scale (max |float64 logit| of the call), against float64 "
            "(in parentheses, its share of the tolerance) and transformers (in the eager column, not judged)."
        )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>ropeexport: {index['passed']} of {total} verified</title><style>{CSS}</style></head><body>"
        f'<div class="banner {state}"><h1>ropeexport artifacts: {index["passed"]} of {total} verified</h1>'
        f"<p>{escape(index['path'])}. Errors are max |artifact - reference| over every probe, runtime and output; "
        f"in parentheses, the worst element's error as a share of what its tolerance allows, max(atol, rtol x "
        f"|expected|): at most 1 passes. Each report has the details.{escape(note + took)}</p></div>"
        "<table><thead><tr>"
        + "".join(f"<th>{escape(h)}</th>" for h in header)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + f"</tbody></table><p>Versions: {escape(versions)}. Written {escape(index['created'])}.</p></body></html>\n"
    )
