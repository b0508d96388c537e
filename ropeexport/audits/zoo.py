"""A zoo audit: every model a ZOO.toml lists audited into its own folder, and one table of them, worst first.

ZOO.toml lists models as ``[[model]]`` tables::

    [[model]]
    name = "llama-og"                    # its audit folder's name under --out (letters, digits, . _ -)
    onnx = "llama-og/model.onnx"         # paths relative to ZOO.toml's folder
    hf_config = "llama/config.json"      # or spec = "gemma3-layers.json" (exactly one of the two)
    checkpoint = "llama"                 # optional: recorded in the row (graft's proof reads it; audit does not)

Each model is audited as ``ropeexport audit MODEL --hf-config CONFIG --out DIR/NAME`` audits it (``audits.core``),
its folder written through the store. ``DIR/zoo.json`` and ``DIR/zoo.html`` hold one row per model (verdict, exit
code, worst finding and its effect on the logits), sorted worst first: rows that could not be audited (exit 2: a
file that is not ONNX, a config that does not describe the model, ...), then failed gates (exit 1), then passed;
within each, the worst finding's level and its effect. A model that fails is its row, never the end of the run; the
run's exit code is the worst row's.

The manifest itself is checked whole before anything is written: a missing or unknown field, a field of the wrong
type, a duplicate name, two or neither of hf_config / spec, and with ``confine`` a path (links followed) outside
ZOO.toml's folder tree are each one SpecError naming ``zoo model[i].FIELD``.

A rerun skips a model whose folder holds the audit of the same files (their sha256, the model's external data
included), options and ropeexport version: a killed run loses only the models in flight. The table is written
before the first model and again as each lands, so that DIR stays a zoo's (a rerun's ``--out``) whenever the run
is killed, even by SIGKILL, which no ``finally`` sees. With ``ray`` each model
is a Ray task (``ropeexport.fanout``); the audits come back to this process, which writes every folder and the
table, so the files are the same bytes as a run without Ray.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

import tomllib

from ropeexport.audits.core import AuditResult, audit, is_audit, write
from ropeexport.errors import RopeExportError, SpecError
from ropeexport.fanout import Lost, connected, fan_out, parse_address
from ropeexport.graph.onnx_io import sha256
from ropeexport.results import JsonObject
from ropeexport.store import check_files, check_name, read_manifest, read_object, replace_reports
from ropeexport.version import __version__

FIELDS = {"name": str, "onnx": str, "hf_config": str, "spec": str, "checkpoint": str}
REQUIRED = ("name", "onnx")
TABLES = ("zoo.json", "zoo.html")  # the zoo's own files in DIR: no model may take their names
LEVELS = {"unmeasured": 4, "wrong": 3, "minor": 2, "harmless": 1}  # a worse finding sorts first


@dataclass(frozen=True)
class ZooModel:
    """One ``[[model]]`` of ZOO.toml, its paths resolved against the manifest's folder."""

    name: str
    onnx: Path
    config: Path
    source: str  # "hf_config" or "spec_file": what ``config`` is
    checkpoint: Path | None = None


@dataclass(frozen=True)
class Zoo:
    """A read ZOO.toml: where it is and its models, in the order it lists them."""

    path: Path
    models: tuple[ZooModel, ...]


def _inside(path: Path, root: Path, where: str) -> None:
    """SpecError unless ``path`` (links followed) lies in ``root``'s tree (``--confine``)."""
    if not path.resolve().is_relative_to(root.resolve()):
        raise SpecError(where, f"{str(path)!r} lies outside the manifest's folder {str(root)!r} (--confine); give a "
                        "path inside it")  # fmt: skip


def read_zoo(path: str | Path, confine: bool = False) -> Zoo:
    """ZOO.toml read and checked whole (module doc); SpecError naming ``zoo`` or ``zoo model[i].FIELD``."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError("zoo", f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SpecError("zoo", f"{str(path)!r} is not TOML: {exc}") from None
    unknown = sorted(set(data) - {"model"})
    if unknown:
        raise SpecError(f"zoo {unknown[0]}", "is not a ZOO.toml key; allowed: [[model]] tables")
    tables = data.get("model")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise SpecError("zoo model", f"{str(path)!r} must list its models as [[model]] tables, at least one")
    root = path.parent
    models, seen = [], set()
    for i, table in enumerate(tables):
        where = f"zoo model[{i}]"
        for key in sorted(table):
            if key not in FIELDS:
                raise SpecError(f"{where}.{key}", f"is not a model field; allowed: {', '.join(FIELDS)}")
            if not isinstance(table[key], FIELDS[key]) or not table[key]:
                raise SpecError(f"{where}.{key}", f"must be a non-empty string, got {table[key]!r}")
        for key in REQUIRED:
            if key not in table:
                raise SpecError(f"{where}.{key}", "is missing; every model needs name and onnx, and hf_config or spec")
        sources = [k for k in ("hf_config", "spec") if k in table]
        if len(sources) != 1:
            raise SpecError(f"{where}.hf_config", f"give exactly one of hf_config and spec, got {len(sources)}")
        name = check_name(table["name"], f"{where}.name")
        if name.lower() in TABLES:
            raise SpecError(f"{where}.name", f"{name!r} is the zoo's own file; give another name")
        if name.lower() in seen:  # folder names: two models must not write one folder (case-insensitive disks too)
            raise SpecError(f"{where}.name", f"{name!r} is listed twice; each model needs its own name")
        seen.add(name.lower())
        paths = {key: root / table[key] for key in ("onnx", *sources, "checkpoint") if key in table}
        if confine:
            for key, value in paths.items():
                _inside(value, root, f"{where}.{key}")
        source = "hf_config" if sources[0] == "hf_config" else "spec_file"
        models.append(ZooModel(name, paths["onnx"], paths[sources[0]], source, paths.get("checkpoint")))
    return Zoo(path, tuple(models))


@dataclass(frozen=True)
class ZooOptions:
    """What every model of a zoo is audited with (``audit``'s arguments of the same names)."""

    effects: bool = True
    fail_on: str = "minor"
    threads: int = 2


@dataclass(frozen=True)
class Job:
    """One model's audit as a task takes it: plain data a Ray worker unpickles."""

    model: ZooModel
    options: ZooOptions


@dataclass(frozen=True)
class Audited:
    """A job's outcome: the audit (None when it failed), the error line, the sha256 of the files it read."""

    model: ZooModel
    result: AuditResult | None = None
    error: str | None = None
    inputs: dict[str, str] = field(default_factory=dict)


def inputs_of(model: ZooModel) -> dict[str, str]:
    """{path: sha256} of the files a model's audit reads: the model, its external data, its config or spec."""
    from ropeexport.audits.model import external_files

    files = [model.onnx, *(model.onnx.parent / f for f in sorted(external_files(model.onnx))), model.config]
    return {str(f): sha256(f) for f in files}


def audit_one(job: Job) -> Audited:
    """Audit one model (a Ray task's body too): a failure becomes the row's error, never the run's end."""
    model, options = job.model, job.options
    config = model.config if model.source == "hf_config" else None
    spec = model.config if model.source == "spec_file" else None
    try:
        result = audit(model.onnx, config, options.threads, spec, options.effects, options.fail_on)
        return Audited(model, result, inputs=inputs_of(model))
    except RopeExportError as exc:
        return Audited(model, error=str(exc))
    except Exception as exc:  # noqa: BLE001 - one model's crash is its row (named as such), not the zoo's end
        return Audited(model, error=f"the audit raised {type(exc).__name__}: {exc}")


def record_of(audited: Audited, options: ZooOptions) -> dict[str, object]:
    """What an audit folder's manifest records besides the model and config: what a rerun compares to skip it."""
    return {"inputs": audited.inputs, "effects": options.effects, "fail_on": options.fail_on}


def row_of(model: ZooModel, report: JsonObject | None, error: str | None) -> JsonObject:
    """A model's row of zoo.json from its audit.json (``report``), or from the error it failed with (exit 2)."""
    row: dict[str, Any] = {"name": model.name, "onnx": str(model.onnx), model.source: str(model.config)}
    if model.checkpoint is not None:
        row["checkpoint"] = str(model.checkpoint)
    if report is None:
        return row | {"verdict": "error", "exit": 2, "error": error, "worst": None, "folder": None}
    gate = report["gate"]
    findings = report.get("findings") or []
    worst = None
    if findings:  # the gate's worst level first, then the largest effect (``core.weigh`` ranks by effect alone)
        first = min(findings, key=lambda f: (-LEVELS.get(_level(f), 0), -_relative(f)))
        effect = first.get("effect") or {}
        worst = {"name": first["name"], "text": first["text"], "level": _level(first),
                 "relative": effect.get("relative"), "not_measured": effect.get("not_measured")}  # fmt: skip
    return row | {"verdict": report["verdict"], "exit": 0 if gate["passed"] else 1, "error": None, "worst": worst,
                  "folder": model.name}  # fmt: skip


def _relative(finding: JsonObject) -> float:
    relative = (finding.get("effect") or {}).get("relative")
    return float(relative) if isinstance(relative, (int, float)) else -1.0


def _level(finding: JsonObject) -> str:
    return str((finding.get("severity") or {}).get("level", "unmeasured"))


def _rank(row: JsonObject) -> tuple[Any, ...]:
    """Worst first: exit code, then the worst finding's level and effect, then name."""
    worst = row["worst"] or {}
    relative = worst.get("relative")
    return (-int(row["exit"]), -LEVELS.get(worst.get("level", ""), 0),
            -(relative if isinstance(relative, (int, float)) else -1.0), row["name"])  # fmt: skip


@dataclass
class ZooResult:
    """A zoo audit: one row per model, worst first (module doc); ``to_dict`` is zoo.json, ``html`` zoo.html."""

    zoo: str
    out: Path
    options: ZooOptions
    rows: list[JsonObject] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # models a rerun found done (their folder kept as it was)

    @property
    def exit_code(self) -> int:
        """The worst row's exit code: 0 every gate passed, 1 a gate failed, 2 a model could not be audited."""
        return max((int(r["exit"]) for r in self.rows), default=0)

    @property
    def passed(self) -> bool:
        """True when every model passed its gate."""
        return self.exit_code == 0

    def __bool__(self) -> bool:
        return self.passed

    @property
    def path(self) -> Path:
        """zoo.json's path."""
        return self.out / "zoo.json"

    def to_dict(self) -> dict[str, object]:
        """zoo.json's content (no timing and no host: a rerun and a run on Ray write the same bytes)."""
        return {"ropeexport_version": __version__, "zoo": self.zoo, "fail_on": self.options.fail_on,
                "effects": self.options.effects, "exit": self.exit_code,
                "rows": sorted(self.rows, key=_rank)}  # fmt: skip

    def html(self) -> str:
        """zoo.html: the rows as one table, worst first, each model's name a link to its audit.html."""
        from ropeexport.report.html import CSS
        from ropeexport.report.words import error

        cells = []
        for row in sorted(self.rows, key=_rank):
            name = escape(row["name"])
            link = f"<a href='{escape(row['folder'])}/audit.html'>{name}</a>" if row["folder"] else name
            worst = row["worst"] or {}
            relative = worst.get("relative")
            effect = error(relative) if isinstance(relative, (int, float)) else escape(worst.get("not_measured") or "")
            what = escape(row["error"] or worst.get("text", ""))
            cells.append(f"<tr><td>{link}</td><td>{escape(row['verdict'])}</td><td>{row['exit']}</td>"
                         f"<td>{escape(worst.get('level', ''))}</td><td>{what}</td><td>{effect}</td></tr>")  # fmt: skip
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>ropeexport zoo audit</title><style>{CSS}"
                f"</style></head><body><h1>ropeexport zoo audit: exit {self.exit_code}</h1><p>{len(self.rows)} "
                f"model(s) of <code>{escape(self.zoo)}</code>, worst first; gate --fail-on {self.options.fail_on}; "
                "effect: the worst finding's max |logit change| over max |logit|</p><table><thead><tr><th>model</th>"
                "<th>verdict</th><th>exit</th><th>level</th><th>worst finding or error</th><th>effect</th></tr>"
                f"</thead><tbody>{''.join(cells)}</tbody></table></body></html>\n")  # fmt: skip


def check_out(out: Path, zoo: Zoo) -> None:
    """SpecError (``out_dir``) before anything is written: DIR must be new, empty or a zoo's, and each model's
    folder in it new or an audit's.
    """  # noqa: D205
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise SpecError("out_dir", f"{str(out)!r} is not a folder; give a new folder or a previous zoo's")
    if out.is_dir() and any(out.iterdir()) and not (out / "zoo.json").is_file():
        raise SpecError("out_dir", f"{str(out)!r} holds no zoo audit (no zoo.json); give a new folder or a previous "
                        "zoo's")  # fmt: skip
    for model in zoo.models:
        folder = out / model.name
        if (folder.exists() or folder.is_symlink()) and not is_audit(folder):
            raise SpecError("out_dir", f"{str(folder)!r} exists and holds no audit (model {model.name!r}); give "
                            "another --out")  # fmt: skip


def done_before(model: ZooModel, out: Path, options: ZooOptions) -> JsonObject | None:
    """The audit.json a previous run wrote for ``model`` when it audited the same files with the same options and
    ropeexport version (its files unchanged since), else None: the model is audited again.
    """  # noqa: D205
    folder = out / model.name
    if not (folder / "manifest.json").is_file():
        return None
    try:
        manifest = read_manifest(folder)
        check_files(folder, manifest["files"])
        inputs = inputs_of(model)
    except (RopeExportError, OSError):
        return None
    report = read_object(folder / "audit.json", "audit.json")
    wanted = {"model": str(model.onnx), "hf_config": str(model.config)} | record_of(Audited(model, inputs=inputs),
                                                                                    options)  # fmt: skip
    same = manifest.get("spec") == json.loads(json.dumps(wanted)) and manifest.get("ropeexport_version") == __version__
    return report if same and isinstance(report, dict) else None


def audit_zoo(zoo_file: str | Path, out: str | Path, confine: bool = False, options: ZooOptions | None = None,
              ray: str | None = None, on_row: Any = None) -> ZooResult:  # fmt: skip
    """Audit every model of ``zoo_file`` into ``out`` (module doc); ``ray``: a Ray address (``fanout``), each model
    a task; ``on_row(row)`` sees each row as its model is done (or found done).
    """  # noqa: D205
    from ropeexport.audits.advice import check_fail_on

    options = options or ZooOptions()
    check_fail_on(options.fail_on)
    zoo = read_zoo(zoo_file, confine)
    out = Path(out)
    check_out(out, zoo)
    result = ZooResult(str(zoo.path), out, options)
    told = on_row or (lambda row: None)
    jobs = []
    for model in zoo.models:
        report = done_before(model, out, options)
        if report is None:
            jobs.append(Job(model, options))
            continue
        result.skipped.append(model.name)
        result.rows.append(row_of(model, report, None))
        told(result.rows[-1])

    def table() -> None:  # zoo.json and zoo.html of the rows so far: a killed run's DIR is still a zoo's
        texts = {"zoo.json": json.dumps(result.to_dict(), indent=2) + "\n", "zoo.html": result.html()}
        replace_reports(out, texts)

    def landed(_: int, audited: Audited) -> None:  # in this process: the folder written through the store
        report = None
        if audited.result is not None:
            write(audited.result, out / audited.model.name, record_of(audited, options))
            report = audited.result.to_dict()
        result.rows.append(row_of(audited.model, report, audited.error))
        table()
        told(result.rows[-1])

    def lost(job: Lost[Job]) -> Audited:
        return Audited(job.item.model, error=f"Ray lost its task: {job.reason}")

    with contextlib.ExitStack() as stack:
        if ray is not None:  # Ray's address and extra checked before anything is written (one connection for all)
            stack.enter_context(connected(parse_address(ray), "ray"))
        out.mkdir(parents=True, exist_ok=True)
        table()  # before the first model: a driver killed at any point after leaves a DIR a rerun takes
        try:
            fan_out(audit_one, jobs, ray, landed, lost, field="ray")
        finally:  # the table of what is done, even when the run stops: a rerun completes it
            table()
    return result
