"""The ``ropeexport`` command: a thin layer over the library. Exit codes: 0 ok, 1 verification failed, 2 bad input."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ropeexport import __version__
from ropeexport.errors import RopeExportError


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"ropeexport: error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


def make_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subcommand per module in this package."""
    from ropeexport.cli import build, check_trt, diff, listing, verify

    parser = _Parser(prog="ropeexport", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ropeexport {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in (build, verify, diff, check_trt, listing):
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run the subcommand, map errors to exit codes."""
    args = make_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except RopeExportError as exc:
        sys.stderr.write(f"ropeexport: error: {exc}\n")
        return 2
    except KeyboardInterrupt:  # finished artifacts are whole and indexed; the one in flight left nothing
        sys.stderr.write("ropeexport: interrupted\n")
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
