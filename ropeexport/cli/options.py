"""Flags shared by several subcommands, and the one way an integer flag is read."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from typing import Any

from ropeexport.cli import EXIT_SKIPPED
from ropeexport.errors import SpecError

SERVING_RUNTIMES = ("ort", "trt")  # --runtime all


def runtimes_of(args: argparse.Namespace) -> list[str]:
    """The runtimes ``--runtime`` names (repeatable; ``all``: ort and trt), in order, each once (default: ort)."""
    from ropeexport.runtimes import check_runtime_names  # the registry loads the runners' module only when asked

    names: list[str] = []
    for name in args.runtime or ["ort"]:
        for one in SERVING_RUNTIMES if name == "all" else (name,):
            if one not in names:
                names.append(one)
    try:
        return check_runtime_names(names)
    except SpecError as exc:
        raise SpecError("--runtime", f"{exc.message}, all") from None


def add_tolerance_flags(parser: argparse.ArgumentParser) -> None:
    """``--atol`` / ``--rtol``, Polygraphy style: ``VALUE`` for every output or ``OUTPUT:VALUE`` (repeatable)."""
    for flag in ("atol", "rtol"):
        parser.add_argument(
            f"--{flag}",
            action="append",
            default=[],
            metavar="[OUTPUT:]VALUE",
            help=f"override the dtype's {flag} for every output or one (repeatable)",
        )


def _parse(flag: str, items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.rpartition(":")
        if not _FLOAT.fullmatch(value.strip()):  # ASCII only (module note at _INTEGER)
            raise SpecError(f"--{flag}", f"expected VALUE or OUTPUT:VALUE with a number, got {item!r}")
        number = float(value)
        if not 0 <= number < float("inf"):
            raise SpecError(f"--{flag}", f"must be a finite number >= 0, got {item!r}")
        out[name if sep else ""] = number
    return out


def tolerances(args: argparse.Namespace) -> tuple[dict[str, float], dict[str, float]]:
    """The parsed ``--atol`` and ``--rtol`` overrides: {output or "": value}."""
    return _parse("atol", args.atol), _parse("rtol", args.rtol)


# ASCII digits only: Python's int() also takes Arabic-Indic ("١٢"), full-width and other Unicode digits, "1_000" and
# surrounding whitespace, so a command line that reads as one number could build or run another.
_INTEGER = re.compile(r"-?[0-9]{1,30}", re.ASCII)
_FLOAT = re.compile(r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.I)


def ascii_int(text: str, field: str) -> int:
    """``text`` as an int written in ASCII digits (an optional leading ``-``); else SpecError naming ``field``."""
    if not isinstance(text, str) or not _INTEGER.fullmatch(text):
        raise SpecError(field, f"must be an integer in ASCII digits (0-9), got {text!r}")
    return int(text)


def ascii_float(text: str, field: str) -> float:
    """``text`` as a float written in ASCII (digits, one '.', an exponent, ``inf``/``nan`` spelled out: the spec's
    own check refuses those); else SpecError naming ``field``. Python's float() also reads other scripts' digits.
    """  # noqa: D205
    if not isinstance(text, str) or not _FLOAT.fullmatch(text.strip()):
        raise SpecError(field, f"must be a number in ASCII digits (0-9, '.', 'e'), got {text!r}")
    return float(text)


def int_flag(field: str) -> Any:
    """An argparse ``type`` reading ``ascii_int``: a bad value is argparse's one-line usage error (exit 2)."""

    def parse(text: str) -> int:
        try:
            return ascii_int(text, field)
        except SpecError as error:
            raise argparse.ArgumentTypeError(error.message) from None

    parse.__name__ = "integer"
    return parse


def skipped_exit(results: list[Any], asked: list[str] | None, allow_skip: bool) -> int:
    """0, or EXIT_SKIPPED (with one line on stderr) when a runtime named with --runtime could not run here.

    The default runtime (no --runtime) may fall back without failing; a runtime asked for by name, or through
    ``all``, is a promise a green exit must keep: a CI that asks for TensorRT must not pass without it.
    """
    if asked is None:
        return 0
    skipped: dict[str, str] = {}
    for result in results:
        for r in result.report["runtimes"]:
            if r["status"] == "skipped":
                skipped.setdefault(r["name"], r.get("reason", ""))
    if not skipped:
        return 0
    what = "; ".join(f"{name}: {reason}" for name, reason in skipped.items())
    if allow_skip:
        print(f"ropeexport: note: requested runtime(s) skipped (--allow-skip): {what}", file=sys.stderr)
        return 0
    print(
        f"ropeexport: requested runtime(s) could not run here: {what}; exit {EXIT_SKIPPED} "
        "(verified on the others; --allow-skip accepts this)",
        file=sys.stderr,
    )
    return EXIT_SKIPPED


def resolved_lines(fields: Mapping[str, Any], sources: Mapping[str, str]) -> list[str]:
    """``  key = value  <- source`` for each (dotted) field of a resolved spec: what a dry run shows before a long
    build. A field inside a table whose source is said for the whole table (``position.scaling_params``: "factor <-
    rope_parameters.factor; ...") takes that table's; a field no source names is ropeexport's default.
    """  # noqa: D205
    from ropeexport.store import flat

    def source(key: str) -> str:
        while key not in sources and "." in key:
            key = key.rpartition(".")[0]
        return sources.get(key, "ropeexport default")

    return [f"  {key} = {json.dumps(value, default=list)}  <- {source(key)}"
            for key, value in flat(fields).items()]  # fmt: skip
