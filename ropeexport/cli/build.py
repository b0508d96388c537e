"""``ropeexport build``: export, run and verify artifacts into a tree with ``index.json`` and ``index.html``.

Sources (one kind at a time; with none, the embedded default: one preset per encoding family):
  --preset NAME (repeatable) | --all-presets | --hf-config PATH/config.json | --spec FILE | spec-field flags
Variants: --dtype and --artifact are repeatable, --graph takes fused, decomposed, plugin, tensorrt or
static-cache (the last two: block forms), or both (fused and decomposed); a decoder's (--artifact decoder) are fused,
decomposed, gqa and tensorrt. Other spec-field flags (--max-positions, --theta, ...) override every artifact's value.

Examples:
  ropeexport build                                   # the embedded default into ./ropeexport-out
  ropeexport build --preset llama-3.1-8b --dtype fp16 --dtype fp32 --graph both -j 2
  ropeexport build --hf-config ~/models/qwen2.5-7b/config.json --max-positions 32768
  ropeexport build --all-presets --out artifacts --json
  ropeexport build --layout interleaved --head-dim 64 --num-heads 16 --dtype fp16 --graph decomposed
  ropeexport build --spec my-model.toml --out artifacts
  ropeexport build --all-presets --dry-run           # list what would be built; write nothing
  ropeexport build --preset llama-3.1-8b --artifact block --graph fused --graph tensorrt --dtype fp16

Exit codes: 0 built and verified; 1 verification failed; 2 bad input (nothing written); 3 verified, but a runtime
named with --runtime could not run here (each report says why; --allow-skip accepts that and exits 0).

"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ropeexport.catalog import encodings, spec_from_dict
from ropeexport.cli import decoder, subcommand
from ropeexport.cli.options import (
    add_tolerance_flags,
    ascii_float,
    ascii_int,
    resolved_lines,
    runtimes_of,
    skipped_exit,
    tolerances,
)
from ropeexport.cli.progress import BuildProgress
from ropeexport.defaults import DEFAULT_OUT, DEFAULT_PRESETS
from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.inputs import read_json
from ropeexport.presets import Request, presets
from ropeexport.report import words
from ropeexport.requests import (
    VARIANT_FIELDS,
    from_fields,
    from_hf_config,
    from_presets,
    from_spec_file,
    with_overrides,
)

if TYPE_CHECKING:  # the pipeline loads torch and onnx: imported when a build runs, so --help stays fast
    from ropeexport.batch import Job
    from ropeexport.pipeline import BuildResult

# Fields with their own syntax: --scaling-param KEY=VALUE (repeatable) fills scaling_params.
SPECIAL_FIELDS = ("scaling_params",)


def spec_fields() -> dict[str, str]:
    """Every spec field of every encoding -> its type name ("bool", "int", ...): one flag each, named after it."""
    out: dict[str, str] = {"encoding": "str"}
    for cls in encodings().values():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name not in SPECIAL_FIELDS:
                out.setdefault(f.name, getattr(hints[f.name], "__name__", str(hints[f.name])))
    return out


# Fields whose 0 stands for a value derived from the others (the ONNX convention for rotary_dim and kv heads).
ZERO_MEANS = {
    "rotary_dim": "head_dim",
    "num_kv_heads": "num_heads",
    "d_model": "heads x head_dim",
    "embedding_dim": "head_dim",
}


def _shown(field: str, default: Any) -> str:
    if isinstance(default, bool):
        return "on" if default else "off"
    if default in ("", ()):
        return "none"
    if default == 0 and field in ZERO_MEANS:
        return f"0 (= {ZERO_MEANS[field]})"
    return str(default)


def field_help(field: str) -> str:
    """A spec flag's help: its allowed values where they are a fixed set, and its default per encoding."""
    classes = encodings()
    choices: dict[str, list[str]] = {
        "encoding": list(classes),
        "artifact": list(dict.fromkeys(a for cls in classes.values() for a in cls.artifacts)),
        "dtype": list(DTYPES),
        "graph": [*dict.fromkeys(g for cls in classes.values() for g in cls.graphs), "both"],
    }
    for cls in classes.values():
        for name, values in cls.choices.items():
            choices.setdefault(name, list(values))
    parts = []
    if field in choices:
        parts.append("one of " + ", ".join(choices[field]))
    if field == "encoding":
        parts.append("default rope")
    elif field == "artifact":
        parts.append("default: the encoding's first")
    elif field == "name":
        parts.append("default: derived from the fields")
    else:
        by_default: dict[str, list[str]] = {}
        for encoding, cls in classes.items():
            f = next((f for f in dataclasses.fields(cls) if f.name == field), None)
            if f is not None and f.default is not dataclasses.MISSING:
                by_default.setdefault(_shown(field, f.default), []).append(encoding)
        if len(by_default) == 1 and len(next(iter(by_default.values()))) == len(classes):
            parts.append(f"default {next(iter(by_default))}")
        elif by_default:
            parts.append("default " + "; ".join(f"{v} ({', '.join(e)})" for v, e in by_default.items()))
    return "; ".join(parts)


def add_parser(sub: Any) -> None:
    """Register ``build`` and its flags."""
    p = subcommand(sub, "build", __doc__, run)
    source = p.add_argument_group("what to build (one kind of source; none: the embedded default)")
    source.add_argument("--preset", action="append", default=[], metavar="NAME", help="a model preset (repeatable)")
    source.add_argument("--all-presets", action="store_true", help="every preset (see 'ropeexport list --presets')")
    source.add_argument("--hf-config", metavar="FILE", help="a transformers config.json on disk (never fetched)")
    source.add_argument("--spec", metavar="FILE", help="JSON or TOML spec with the same keys (or artifacts = [...])")
    fields = p.add_argument_group("spec fields (override every artifact's value)")
    for field, kind in spec_fields().items():
        flag = f"--{field.replace('_', '-')}"
        text = field_help(field)
        if field in VARIANT_FIELDS:
            extra = " (both: fused and decomposed)" if field == "graph" else ""
            fields.add_argument(
                flag,
                dest=field,
                action="append",
                default=None,
                metavar=field.upper(),
                help=f"repeatable; {text}{extra}",
            )
        elif kind == "bool":
            fields.add_argument(flag, dest=field, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            fields.add_argument(flag, dest=field, metavar=field.upper(), default=None, help=text)
    fields.add_argument(
        "--scaling-param",
        dest="scaling_param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a RoPE schedule parameter (repeatable; lists comma-separated)",
    )
    p.add_argument("--out", metavar="DIR", default=DEFAULT_OUT, help=f"output folder (default ./{DEFAULT_OUT})")
    p.add_argument(
        "--runtime",
        action="append",
        default=None,
        metavar="NAME",
        help="runtime to verify on (repeatable): ort (default), trt, onnx-reference, or all (ort and trt; "
        "a runtime that cannot run here is reported as skipped with the reason); with --artifact decoder and no "
        "--graph, the first runtime's own form (ort: gqa, onnx-reference: fused, trt: tensorrt), and a form it does "
        "not run is refused",
    )
    p.add_argument(
        "--allow-skip",
        action="store_true",
        help="exit 0 even when a runtime named with --runtime could not run here (default: exit 3)",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="replace an artifact of the same name in --out even when its spec differs (default: refuse)",
    )
    p.add_argument("--dry-run", action="store_true", help="validate and list the artifacts; build and write nothing")
    p.add_argument("-j", "--jobs", default="1", metavar="N", help="build N artifacts at once in worker processes")
    p.add_argument("--quiet", action="store_true", help="no progress and no per-artifact lines")
    p.add_argument("--json", action="store_true", help="print one machine-readable summary (the index) on stdout")
    add_tolerance_flags(p)
    decoder.add_flags(p)


def _typed(field: str, kind: str, value: Any) -> Any:
    """A flag's string as the field's type (bool flags arrive typed); a bad number names the flag's field."""
    if kind == "tuple" and isinstance(value, str):  # a list field (mrope_section): comma-separated integers
        return tuple(ascii_int(v.strip(), field) for v in value.split(","))
    if kind not in ("int", "float") or not isinstance(value, str):
        return value
    # ASCII only: Python's int() and float() also read other scripts' digits (Arabic-Indic, Devanagari, ...).
    return ascii_int(value, field) if kind == "int" else ascii_float(value, field)


def _flag_fields(args: argparse.Namespace) -> dict[str, Any]:
    """Spec-field flags other than the variant lists, typed."""
    fields = {
        f: _typed(f, kind, getattr(args, f))
        for f, kind in spec_fields().items()
        if f not in VARIANT_FIELDS and getattr(args, f, None) is not None
    }
    if args.scaling_param:
        params: dict[str, str] = {}
        for item in args.scaling_param:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise SpecError("--scaling-param", f"expected KEY=VALUE, got {item!r}")
            params[key.strip()] = value.strip()
        fields["scaling_params"] = params
    return fields


def _variants(args: argparse.Namespace) -> dict[str, list[str] | None]:
    """The repeatable lists (None where not given); ``--graph both`` is fused and decomposed."""
    graphs = None
    if args.graph:
        graphs = []
        for g in args.graph:
            for one in ("fused", "decomposed") if g == "both" else (g,):
                if one not in graphs:
                    graphs.append(one)
    unique = lambda values: list(dict.fromkeys(values)) if values else None  # noqa: E731  (repeats are harmless)
    return {"artifact": unique(args.artifact), "dtype": unique(args.dtype), "graph": graphs}


def _source_kind(args: argparse.Namespace) -> str | None:
    # An empty value is an error, never "not given": `--hf-config "$UNSET"` must not build the default instead.
    for flag, value in (("--hf-config", args.hf_config), ("--spec", args.spec), ("--out", args.out)):
        if value is not None and not value.strip():
            raise SpecError(flag, "is empty; give a path")
    if any(not name.strip() for name in args.preset):
        raise SpecError("--preset", "is empty; give a preset name (see 'ropeexport list --presets')")
    given = [
        flag
        for flag, value in (
            ("--preset", args.preset),
            ("--all-presets", args.all_presets),
            ("--hf-config", args.hf_config),
            ("--spec", args.spec),
        )
        if value
    ]
    if len(given) > 1:
        raise SpecError(given[0], f"cannot be combined with {given[1]}: give one source of artifacts")
    return given[0] if given else None


def requests_from_args(args: argparse.Namespace) -> list[Request]:
    """What the command line asks for, before validation: presets, a config, a spec file, flags, or the default."""
    kind = _source_kind(args)
    variants = _variants(args)
    overrides = _flag_fields(args)
    listed = {"artifacts": variants["artifact"], "dtypes": variants["dtype"], "graphs": variants["graph"]}
    if kind == "--hf-config":
        # --encoding vision_rope: the config's vision tower (its vision_config), not its text model
        requests = from_hf_config(args.hf_config, **listed, vision=overrides.get("encoding") == "vision_rope")
    elif kind in ("--preset", "--all-presets") or (kind is None and not overrides and not any(variants.values())):
        names = list(presets()) if args.all_presets else (args.preset or list(DEFAULT_PRESETS))
        requests = from_presets(names, **listed)
    elif kind == "--spec":
        requests = from_spec_file(args.spec, variants)
    else:
        requests = from_fields([{}], variants, {"flags": True})
    return with_overrides(requests, overrides, label=lambda key: f"--{key.replace('_', '-')}")


def jobs_from_args(args: argparse.Namespace) -> list[Job]:
    """Every requested artifact, validated (nothing is written on bad input); names must be unique."""
    from ropeexport.batch import Job

    jobs = []
    for request in requests_from_args(args):
        spec = spec_from_dict(request.fields)
        sources = {k: v for k, v in request.sources.items() if k in spec.to_dict()}
        jobs.append(Job(spec.to_dict(), request.origin, sources))
    names = [j.name for j in jobs]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise SpecError("name", f"{duplicate!r} is used by more than one artifact; names must be unique")
    return jobs


def _jobs_count(value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        raise SpecError("--jobs", f"must be an integer >= 1, got {value!r}") from None
    if jobs < 1:
        raise SpecError("--jobs", f"must be an integer >= 1, got {value!r}")
    return jobs


def print_resolved(job: Job) -> None:
    """The spec a config resolved to, each field with the config key (or default) it came from."""
    print(f"resolved {job.name} from {job.origin.get('hf_config')}:")
    if job.origin.get("layers"):
        unrotated = job.origin.get("no_rope_layers")
        print(f"  used by layers {job.origin['layers']} ({', '.join(job.origin['layer_types'])})"
              + (f"; no positional encoding on layers {unrotated}" if unrotated else ""))  # fmt: skip
    print("\n".join(resolved_lines(job.spec, job.sources)))


def run(args: argparse.Namespace) -> int:
    """Validate everything first (nothing is written on bad input), then build, index and summarise."""
    from ropeexport.api import build_all
    from ropeexport.store import Store
    from ropeexport.tree import check_tree

    for field in spec_fields():  # an empty value is an error, never "not given" (a script's unset variable)
        if getattr(args, field, None) == "":
            raise SpecError(field, "is empty; give a value or leave the flag out")
    if decoder.wants_layer_block(args):
        return decoder.run_layer_block(args, spec_fields(), summary_line)
    if decoder.wants_decoder(args):
        return decoder.run(args, spec_fields())
    workers = _jobs_count(args.jobs)
    runtimes = runtimes_of(args)
    atol, rtol = tolerances(args)
    jobs = jobs_from_args(args)
    out = Path(args.out)
    check_tree(out)
    store = Store(out)
    for job in jobs:
        store.check(job.name, job.spec, args.replace)
    if args.dry_run:
        return print_plan(jobs, out, runtimes, args.json)
    for name in store.clean():  # a build killed earlier (kill -9) left its hidden work folder behind
        print(f"ropeexport: removed {name}, the work folder of an interrupted build", file=sys.stderr)
    talk = not (args.quiet or args.json)
    if talk and args.hf_config:
        for before, job in zip([None, *jobs], jobs, strict=False):  # once per encoding the layers use (Gemma 3:
            if before is None or job.origin.get("layers") != before.origin.get("layers"):  # sliding and full)
                print_resolved(job)
    start = time.perf_counter()
    results: list[BuildResult] = []
    with BuildProgress(len(jobs), enabled=talk) as progress:

        def finished(result: BuildResult) -> None:
            results.append(result)
            line = summary_line(result.report, result.path, result.seconds, result.kept)
            progress.done(result.name, line if talk else None)

        build_all(
            [spec_from_dict(j.spec) for j in jobs],
            out,
            workers,
            runtimes,
            atol,
            rtol,
            replace=args.replace,
            on_stage=progress.stage,
            on_done=finished,
            provenance=[(j.origin, j.sources) for j in jobs],
        )
    failed = [r.name for r in results if not r.passed]
    if args.json:
        index = read_json(out / "index.json", "index.json")
        built = {r.name for r in results}
        print(json.dumps(index | {"built": [a for a in index["artifacts"] if a["name"] in built]}, indent=2))
    elif not args.quiet:
        print(
            f"{len(results) - len(failed)} of {len(results)} artifacts verified in {time.perf_counter() - start:.1f}s"
        )
    if failed:
        print(
            f"{len(failed)} artifact(s) FAILED verification: {', '.join(failed)} (see report.html in each)",
            file=sys.stderr,
        )
    if not args.json:
        print(os.path.join(out.resolve(), "index.html"))
    if failed:
        return 1
    return skipped_exit(results, args.runtime, args.allow_skip)


def print_plan(jobs: list[Job], out: Path, runtimes: list[str], as_json: bool) -> int:
    """``--dry-run``: every artifact the command would build, validated, and where; nothing is written."""
    plan: list[dict[str, Any]] = [
        {
            "name": j.name,
            "path": str(out / j.name),
            "exists": (out / j.name).exists(),
            "spec": j.spec,
            "origin": j.origin,
            "sources": {k: j.sources.get(k, "ropeexport default") for k in j.spec},
        }
        for j in jobs
    ]
    if as_json:
        print(json.dumps({"out": str(out.resolve()), "runtimes": runtimes, "artifacts": plan}, indent=2))
        return 0
    for item in plan:
        spec = item["spec"]
        what = f"{spec['encoding']} {spec['artifact']} {spec['dtype']} {spec['graph']}"
        what += f", max_positions {spec['max_positions']}"
        print(f"{item['name']}: {what}{' (replaces the existing folder)' if item['exists'] else ''}")
        print("\n".join(resolved_lines(spec, item["sources"])))  # each value and where it came from
    print(f"{len(plan)} artifact(s) into {out.resolve()}, verified on {', '.join(runtimes)} (dry run: nothing written)")
    return 0


def summary_line(report: dict[str, Any], path: Path, seconds: float, kept: Path | None = None) -> str:
    """One artifact's verdict, worst errors, runtimes and table check, then its path."""
    verdict = "PASS" if report["passed"] else "FAIL"
    worst: dict[str, float] = {}
    ratio: dict[str, float] = {}  # the worst element's share of its allowance (1 is the limit): what the verdict reads
    for c in report["comparisons"]:
        err = float("inf") if c["max_abs"] is None else float(c["max_abs"])  # null: the runtime raised
        worst[c["reference"]] = max(worst.get(c["reference"], 0.0), err)
        share = float("inf") if c.get("max_ratio") is None else float(c["max_ratio"])
        ratio[c["reference"]] = max(ratio.get(c["reference"], 0.0), share)
    errors = ", ".join(f"vs {ref} {words.error(err)} ({_share(ratio[ref])})" for ref, err in worst.items())
    ran = ",".join(r["name"] for r in report["runtimes"] if r["status"] == "verified") or "no runtime"
    skipped = [r["name"] for r in report["runtimes"] if r["status"] == "skipped"]
    if skipped:
        ran += f" ({', '.join(skipped)} skipped: see report.json)"
    tables = ""
    if report["tables"]:
        worst_table = max((t["max_ulp"] or 0.0) for t in report["tables"])
        tables = f"; tables <= {worst_table:.3f} ulp"
    head = f"{verdict} {report['name']}: max |err| {errors} on {ran}{tables} ({seconds:.1f}s)"
    return f"{head}\n  -> {path}{kept_note(path, kept)}"


def _share(ratio: float) -> str:
    """``0.12 of allowed`` (``words.share``); ``raised`` where the runtime raised instead of answering."""
    return "raised" if ratio == float("inf") else words.share(ratio)


def kept_note(path: Path, kept: Path | None) -> str:
    """Where a failed rebuild went and which verified artifact stayed, when the store kept one (else nothing)."""
    if kept is None:
        return ""
    return f"\n  (a verified artifact was there: it stays at {kept}; this failed build is kept apart at {path})"
