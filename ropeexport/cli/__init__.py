"""The ``ropeexport`` command: a thin layer over the library.

Exit codes: 0 ok, 1 verification failed, 2 bad input, 3 verified but part of the check could not run here (a
runtime you asked for; graft's far calls over --proof-cache-gib), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from ropeexport.errors import FieldError, RopeExportError
from ropeexport.version import __version__

# name -> (module in this package, one-line help). A subcommand's module (and with it torch and onnx) is imported only
# when that subcommand runs or shows its own help: `ropeexport --version` and `--help` import neither.
COMMANDS: dict[str, tuple[str, str]] = {
    "build": ("build", "export, run and verify artifacts"),
    "verify": ("verify", "re-verify an artifact folder"),
    "diff": ("diff", "compare two reports"),
    "check-trt": ("check_trt", "check a model against the TensorRT ONNX parser of one version"),
    "list": ("listing", "list encodings and schedules"),
    "generate": ("generate", "greedy generation with a built decoder"),
    "audit": ("audit", "check the RoPE (or ALiBi) inside a model another tool exported"),
    "graft": ("graft", "replace a foreign model's RoPE tables with exact ones, and prove it"),
    "package": ("package", "write a built decoder as transformers.js loads it, and check its tokens there"),
}
# verified, but part of the check could not run here: a runtime the user asked for by name (see --allow-skip), or
# graft's far calls whose cache passes --proof-cache-gib (proven up to a position only)
EXIT_SKIPPED = 3


def subcommand(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    doc: str | None,
    run: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    """``name``'s parser, for its module's ``add_parser``: its line of ``COMMANDS`` as its help, the module's
    docstring ``doc`` as its description (shown as written: examples keep their lines), ``run`` as what it runs.
    """  # noqa: D205
    parser = sub.add_parser(name, help=COMMANDS[name][1], description=doc,
                            formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.set_defaults(run=run)
    return parser

# The one place where library field names become the command line's words. Library errors name fields
# (``out_dir: ...``) and refer to other fields in backquotes (``give `replace` ...``); spec fields keep their names
# as prefixes (``theta: must be > 1``) and read as their flags inside a message (`name` -> --name).
FLAGS = {
    "out_dir": "--out",
    "spec_file": "--spec",
    "preset": "--preset",
    "hf_config": "--hf-config",
    "proof_cache_gib": "--proof-cache-gib",
    "trt_version": "--trt-version",
    "runtime": "--runtime",
    "jobs": "--jobs",
    "atol": "--atol",
    "rtol": "--rtol",
    "atol/rtol": "--atol/--rtol",
    "max_growth": "--max-growth",
    "across": "--across",
    "replace": "--replace",
    "path": "DIR",
    "old": "OLD",
    "new": "NEW",
    "model": "MODEL",
    "checkpoint": "--checkpoint",
    "num_layers": "--num-layers",
    "hidden_size": "--hidden-size",
    "vocab_size": "--vocab-size",
    "layer": "--layer",
    "prompt_ids": "--prompt-ids",
    "prompt": "--prompt",
    "max_new_tokens": "--max-new-tokens",
    "position_offset": "--position-offset",
    "threads": "--threads",
    "policy": "--policy",
    "trust": "--trust",
    "out": "--out",
    "for": "--for",
    "decoder": "DECODER",
    "zoo": "--zoo",
    "ray": "--ray",
    "variant": "--variant",
    "optimized_model": "--optimized-model",
}


def flag_of(field: str) -> str:
    """The command line's word for a library field: its flag (``out_dir`` -> ``--out``, ``max_positions`` ->
    ``--max-positions``), or the field itself where it is a file or a key (``manifest.json``).
    """  # noqa: D205
    if field in FLAGS:
        return FLAGS[field]
    return f"--{field.replace('_', '-')}" if re.fullmatch(r"[a-z][a-z0-9_]*", field) else field


def error_line(exc: RopeExportError) -> str:
    """An error as the command line shows it: field names turned into flags (``FLAGS``), one line."""
    if not isinstance(exc, FieldError):
        return str(exc)
    # A reader's field may carry the file: "spec_file 'x.toml'" reads "--spec 'x.toml'".
    word, space, rest = exc.field.partition(" ")
    field = FLAGS.get(word, word) + space + rest
    return f"{field}: {in_flags(exc.message)}"


def in_flags(text: str) -> str:
    """Library text with each field it names in backquotes (`across`) written as its flag (--across)."""
    return re.sub(r"`([a-z][a-z0-9_]*)`", lambda m: flag_of(m.group(1)), text)


def plain(text: str | None) -> str | None:
    """Help text without reST markup: the module docstrings double as help, and a terminal shows no ``literals``."""
    return None if text is None else text.replace("``", "")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit 2, and help text carries no reST markup."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for key in ("description", "epilog"):
            kwargs[key] = plain(kwargs.get(key))
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"ropeexport: error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


def make_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser: ``command``'s full parser (every subcommand's when None), the rest by name only.

    ``command=""`` builds none in full: what ``--version`` and ``--help`` need.
    """
    parser = _Parser(prog="ropeexport", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"ropeexport {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")
    for name, (module, summary) in COMMANDS.items():
        if command is None or name == command:
            importlib.import_module(f"ropeexport.cli.{module}").add_parser(sub)
        else:
            sub.add_parser(name, help=summary)
    return parser


class _PipeSafeStdout:
    """stdout that turns into /dev/null once its reader goes away (``ropeexport build | head -1``).

    A closed pipe is not a failed verification: the work goes on, artifacts and the index are written whole, and
    the exit code is the verdict's, with no traceback. Everything else is the wrapped stream's.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.broken = False

    def _silence(self) -> None:
        self.broken = True
        try:  # later writes, and the interpreter's own flush at exit, go nowhere instead of raising again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return int(self._stream.write(text))
            except BrokenPipeError:
                self._silence()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._silence()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is so that it unwinds as Ctrl-C does: a write in flight is removed."""


def _interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt (or Terminated) ``exc`` was raised from, if any (its chain of causes and contexts)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _interrupted(exc: KeyboardInterrupt) -> int:
    terminated = isinstance(exc, Terminated)
    sys.stderr.write(f"ropeexport: {'terminated' if terminated else 'interrupted'}\n")
    return 143 if terminated else 130


class _Signals:
    """Ctrl-C (SIGINT) and SIGTERM while ``main`` runs: ``with _Signals(): ...`` on the main thread.

    Each signal unwinds the work as Ctrl-C does (KeyboardInterrupt; SIGTERM as ``Terminated``): the artifact in
    flight removes its work folder on the way out, and ``main`` says "interrupted" or "terminated" and returns 130 or
    143. That is all a process sees (``entry``, or a script calling ``main``): it has Python's own handlers, and
    docs/reference/exit-codes.md holds.

    A caller that installed a handler of its own for the signal gets the signal back once the work has unwound and
    the caller's handlers are in place again: its handler is called then, and decides what happens next (the test
    suite's raises, so a SIGTERM stops the whole suite instead of becoming one in-process call's exit 143). A handler
    that returns lets ``main`` return its code. A signal the caller ignores or left to the system (SIGINT as
    ``SIG_IGN`` in a job started in the background, or ``SIG_DFL``) is not taken over; SIGTERM always is, as before.
    """

    def __init__(self) -> None:
        self.received: list[int] = []  # the signals that arrived while main ran, in order
        self.previous: dict[int, Any] = {}  # signal -> the caller's handler, restored on the way out

    def __enter__(self) -> _Signals:
        if threading.current_thread() is not threading.main_thread():  # only the main thread may set a handler
            return self
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous = signal.getsignal(signum)
            if signum == signal.SIGINT and not callable(previous):
                continue  # ignored or the system's: Ctrl-C keeps doing what the caller chose
            self.previous[signum] = previous
            signal.signal(signum, self._unwind)
        return self

    def _unwind(self, signum: int, frame: Any) -> None:
        self.received.append(signum)
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    def __exit__(self, *_: object) -> None:
        for signum, previous in self.previous.items():
            if previous is not None:  # None: a handler not set from Python, which cannot be put back
                signal.signal(signum, previous)
        for signum in dict.fromkeys(self.received):
            handler = self.previous.get(signum)
            # Python's own SIGINT handler only raises the KeyboardInterrupt main has just turned into exit 130.
            if callable(handler) and handler is not signal.default_int_handler:
                handler(signum, None)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run the subcommand, map errors to exit codes (the module docstring lists them).

    A signal that arrives meanwhile ends the work (130 or 143); where the caller has a handler of its own for it,
    that handler is then called (``_Signals``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    stdout = sys.stdout
    sys.stdout = _PipeSafeStdout(stdout)
    with _Signals():
        try:
            # Everything, start-up imports included, runs inside this try: Ctrl-C at any moment exits 130, one line.
            command = _command(argv)
            args = make_parser(command if command in COMMANDS else "").parse_args(argv)
            return int(args.run(args))
        except RopeExportError as exc:
            sys.stderr.write(f"ropeexport: error: {error_line(exc)}\n")
            return 2
        except KeyboardInterrupt as exc:  # finished artifacts are whole and indexed; the one in flight left nothing
            return _interrupted(exc)
        except Exception as exc:
            # Ctrl-C while a C extension initialises (numpy, torch at start-up) surfaces as an ImportError
            # ("initialization failed") whose cause is the KeyboardInterrupt: an interruption all the same.
            interrupt = _interrupt_behind(exc)
            if interrupt is None:
                raise
            return _interrupted(interrupt)
        finally:
            sys.stdout.flush()
            sys.stdout = stdout


def entry() -> None:
    """The ``ropeexport`` executable: ``main``, then exit with its code whatever Ctrl-C does meanwhile.

    ``main`` turns a Ctrl-C during its work into exit 130; one that lands after it returned (the interpreter winding
    down) would otherwise end the process by the signal itself (exit -2), with no message. The verdict is decided by
    then, so further Ctrl-C is ignored from here to the end.
    """
    try:
        code = main()
    except KeyboardInterrupt as exc:  # between main's own handler and here
        terminated = isinstance(exc, Terminated)
        sys.stderr.write(f"ropeexport: {'terminated' if terminated else 'interrupted'}\n")
        code = 143 if terminated else 130
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if code in (130, 143):
        # CPython remembers a KeyboardInterrupt raised inside C code that runs Python (an extension's import does)
        # even when it was caught, and then ends the process by SIGINT (exit -2) at shutdown: leave at once, with
        # the code said. Everything is written and flushed by now; an interrupted build cleaned up as it unwound.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
