"""Flags shared by several subcommands."""

from __future__ import annotations

import argparse

from ropeexport.errors import SpecError


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
        try:
            number = float(value)
        except ValueError:
            raise SpecError(f"--{flag}", f"expected VALUE or OUTPUT:VALUE with a number, got {item!r}") from None
        if not 0 <= number < float("inf"):
            raise SpecError(f"--{flag}", f"must be a finite number >= 0, got {item!r}")
        out[name if sep else ""] = number
    return out


def tolerances(args: argparse.Namespace) -> tuple[dict[str, float], dict[str, float]]:
    """The parsed ``--atol`` and ``--rtol`` overrides: {output or "": value}."""
    return _parse("atol", args.atol), _parse("rtol", args.rtol)
