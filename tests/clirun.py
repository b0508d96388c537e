"""The one way tests run the ``ropeexport`` command in-process: ``run(argv, capsys) -> (exit code, stdout, stderr)``.

``main`` is called as the entry point calls it; an argparse usage error (SystemExit) becomes its exit code.
"""

from __future__ import annotations

import pytest

from ropeexport.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``ropeexport *argv``; what it printed is taken from ``capsys``."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
