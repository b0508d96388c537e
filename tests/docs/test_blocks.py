"""Every command and code block of the docs runs, as ``tests/docs/pages.py`` says: every other page's Python, and
every ``ropeexport`` line parsed; the tutorials (and the re-verify how-to) top to bottom in ``test_tutorials.py``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from ropeexport.cli import make_parser
from tests.docs.pages import ROOT, RUN, SHELL, Block, all_blocks, blocks, pages
from tests.toolmod import tool

site = tool("docs_site")

TIMEOUT = 1800  # seconds a block may take (a tutorial's decoder build on a loaded 2-core machine)


def _env() -> dict[str, str]:
    """The user's shell after the install: this interpreter's bin first (``ropeexport``, ``python``), this checkout."""
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT),
            "NO_MKDOCS_2_WARNING": "1", "MPLBACKEND": "Agg"}  # fmt: skip


def _run(block: Block, folder: Path) -> str:
    """One block in ``folder``: a shell block with bash -e (a failing line fails it), a Python block as a script;
    what it printed (stdout, then stderr).
    """  # noqa: D205
    if block.info in SHELL:
        argv = ["bash", "-e", "-o", "pipefail", "-c", block.text]
    else:
        argv = [sys.executable, "-c", block.text]
    proc = subprocess.run(argv, cwd=folder, env=_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, (
        f"{block.page}:{block.line} exited {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n"
        f"--- stderr\n{proc.stderr[-3000:]}"
    )
    return proc.stdout + proc.stderr


def _python_pages() -> list[str]:
    return [p for p in pages() if p not in RUN and any(b.info == "python" and not b.skip for b in blocks(p))]


# Pages whose Python takes more than a few seconds (it builds and verifies an artifact)
SLOW_PYTHON = {"docs/how-to/add-a-schedule.md"}


@pytest.mark.parametrize(
    "page", [pytest.param(p, marks=[pytest.mark.slow] if p in SLOW_PYTHON else []) for p in _python_pages()]
)
def test_a_pages_python_runs(page: str, tmp_path: Path) -> None:
    for block in (b for b in blocks(page) if b.info == "python" and not b.skip):
        _run(block, tmp_path)


def _command_lines() -> list[tuple[str, str]]:
    """(where, line) for every command line of every shell block."""
    return [(f"{b.page}:{b.line}", line) for b in all_blocks() if b.info in SHELL for line in b.commands()]


def _ropeexport_lines() -> list[tuple[str, list[str]]]:
    found = []
    for where, line in _command_lines():
        for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", line):
            words = shlex.split(part)
            if words and words[0] == "ropeexport":
                found.append((where, words[1:]))
    return found


def test_the_docs_have_commands_to_check() -> None:
    assert len(_ropeexport_lines()) >= 30


@pytest.mark.parametrize(("where", "argv"), _ropeexport_lines(), ids=[f"{w} {' '.join(a)[:60]}" for w, a in
                                                                     _ropeexport_lines()])  # fmt: skip
def test_every_ropeexport_command_parses(where: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    parser = make_parser(argv[0] if argv and not argv[0].startswith("-") else "")
    try:
        parser.parse_args(argv)
    except SystemExit as done:
        assert done.code == 0, f"{where}: {capsys.readouterr().err}"


def _other_lines() -> list[tuple[str, str]]:
    """Command lines that name the project's own files or extras: installs, tools, pytest."""
    keep = ("pip install", "tools/", "pytest")
    return [(w, line) for w, line in _command_lines() if any(k in line for k in keep)]


@pytest.mark.parametrize(("where", "line"), _other_lines(), ids=[f"{w} {line[:50]}" for w, line in _other_lines()])
def test_commands_name_files_and_extras_that_exist(where: str, line: str) -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for word in shlex.split(line):
        named = re.fullmatch(r'\.\[([a-z,]+)\]', word) or re.fullmatch(r"\.\[([a-z,]+)\]", word.strip('"'))
        if named:
            assert set(named.group(1).split(",")) <= set(extras), f"{where}: {word}"
        elif word.startswith(("tools/", "tests/")) and not word.endswith(".json"):
            assert (ROOT / word.split("::")[0]).exists(), f"{where}: {word} does not exist"
        elif word in ("-c", "constraints.txt"):
            assert (ROOT / "constraints.txt").is_file()
