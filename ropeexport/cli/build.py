"""``ropeexport build``: export, run and verify artifacts.

Examples:
  ropeexport build                                   # the embedded default set into ./ropeexport-out
  ropeexport build --layout interleaved --head-dim 64 --num-heads 16 --dtype fp16 --graph decomposed
  ropeexport build --scaling yarn --scaling-param factor=4 --scaling-param original_max_position_embeddings=32768
  ropeexport build --spec my-model.toml --out artifacts

"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from pathlib import Path
from typing import Any

from ropeexport.build import build, check_target
from ropeexport.cli.options import add_tolerance_flags, tolerances
from ropeexport.defaults import DEFAULT_OUT, DEFAULT_SPECS
from ropeexport.errors import SpecError
from ropeexport.runtimes import check_runtime_names
from ropeexport.spec import encodings, read_spec_file, spec_from_dict

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


def add_parser(sub: Any) -> None:
    """Register ``build`` and its flags."""
    p = sub.add_parser(
        "build",
        help="export, run and verify artifacts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for field, kind in spec_fields().items():
        flag = f"--{field.replace('_', '-')}"
        if kind == "bool":
            p.add_argument(flag, dest=field, action=argparse.BooleanOptionalAction, default=None)
        else:
            p.add_argument(flag, dest=field, metavar=field.upper(), default=None)
    p.add_argument(
        "--scaling-param",
        dest="scaling_param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a RoPE schedule parameter (repeatable; lists comma-separated)",
    )
    p.add_argument("--spec", metavar="FILE", help="JSON or TOML spec with the same keys (or artifacts = [...])")
    p.add_argument("--out", metavar="DIR", default=DEFAULT_OUT, help=f"output folder (default ./{DEFAULT_OUT})")
    p.add_argument(
        "--runtime",
        action="append",
        default=None,
        metavar="NAME",
        help="runtime to verify on: ort (default) or onnx-reference (repeatable)",
    )
    add_tolerance_flags(p)
    p.set_defaults(run=run)


def _typed(field: str, kind: str, value: Any) -> Any:
    """A flag's string as the field's type (bool flags arrive typed); a bad number names the flag's field."""
    if kind not in ("int", "float") or not isinstance(value, str):
        return value
    try:
        return int(value) if kind == "int" else float(value)
    except ValueError:
        raise SpecError(field, f"must be {'an integer' if kind == 'int' else 'a number'}, got {value!r}") from None


def _flag_fields(args: argparse.Namespace) -> dict[str, Any]:
    fields = {
        f: _typed(f, kind, getattr(args, f)) for f, kind in spec_fields().items() if getattr(args, f, None) is not None
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


def specs_from_args(args: argparse.Namespace) -> list[Any]:
    """The specs a command line asks for: a spec file (flags override its fields), the flags, or the default set."""
    flags = _flag_fields(args)
    if args.spec:
        raws = read_spec_file(args.spec)
        if "scaling" in flags and "scaling_params" not in flags:
            raws = [{k: v for k, v in raw.items() if k != "scaling_params"} for raw in raws]  # they were the old one's
        specs = [spec_from_dict(raw | flags) for raw in raws]
    elif flags:
        specs = [spec_from_dict(flags)]
    else:
        specs = [spec_from_dict(d) for d in DEFAULT_SPECS]
    names = [s.name for s in specs]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise SpecError("name", f"{duplicate!r} is used by more than one artifact; names must be unique")
    return specs


def run(args: argparse.Namespace) -> int:
    """Validate everything first (nothing is written on bad input), then build each artifact."""
    specs = specs_from_args(args)
    out = Path(args.out)
    runtimes = check_runtime_names(args.runtime or ["ort"])
    atol, rtol = tolerances(args)
    for spec in specs:
        check_target(out, spec.name)
    failed = 0
    for spec in specs:
        result = build(spec, out, runtimes, atol=atol, rtol=rtol)
        failed += not result.passed
        print(summary_line(result.report, result.path, result.seconds))
    print(f"{len(specs) - failed} of {len(specs)} artifacts verified; output in {out.resolve()}")
    if failed:
        print(f"{failed} artifact(s) FAILED verification: see report.json in each folder", file=sys.stderr)
    return 1 if failed else 0


def summary_line(report: dict[str, Any], path: Path, seconds: float) -> str:
    """One artifact's verdict, worst errors, runtimes and table check, then its path."""
    verdict = "PASS" if report["passed"] else "FAIL"
    worst: dict[str, float] = {}
    for c in report["comparisons"]:
        err = float("inf") if c["max_abs"] is None else float(c["max_abs"])  # null: the runtime raised
        worst[c["reference"]] = max(worst.get(c["reference"], 0.0), err)
    errors = ", ".join(f"vs {ref} {err:.2e}" for ref, err in worst.items())
    ran = ",".join(r["name"] for r in report["runtimes"] if r["status"] == "verified") or "no runtime"
    skipped = [r["name"] for r in report["runtimes"] if r["status"] == "skipped"]
    if skipped:
        ran += f" ({', '.join(skipped)} skipped: see report.json)"
    tables = ""
    if report["tables"]:
        worst_table = max((t["max_ulp"] or 0.0) for t in report["tables"])
        tables = f"; tables <= {worst_table:.3f} ulp"
    head = f"{verdict} {report['name']}: max |err| {errors} on {ran}{tables} ({seconds:.1f}s)"
    return f"{head}\n  -> {path}"
