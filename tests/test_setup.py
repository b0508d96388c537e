"""Fresh-machine truth: CI runs README's test command, and every package the code imports is declared and pinned."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
LOCAL = {"ropeexport", "tests", "tools", "plugins"}
# Imported only where their hardware is (each such import is guarded and skips or says why when absent).
OPTIONAL = {"tensorrt": "gpu extra: TensorRT, GPU hosts only"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[_norm(name)] = version
    return pins


def _readme_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_ci_runs_readmes_exact_test_command_in_a_fresh_venv() -> None:
    script = (ROOT / ".ci" / "run").read_text().splitlines()
    command = script[-1]
    assert "pytest" in command, "the last line of .ci/run is the test command"
    assert any(block.strip() == command for block in _readme_blocks()), "README's test command differs from .ci/run"
    # The venv is made fresh (removed first, no system site packages), so a hand-installed package cannot hide.
    assert "rm -rf .venv" in script and "--system-site-packages" not in command
    assert command.startswith("python3 -m venv .venv && ")


def test_readme_main_job_is_one_command_that_builds_the_default() -> None:
    assert any(block.strip().endswith(".venv/bin/ropeexport build") for block in _readme_blocks())


def _closure(requirements: list[str], extras: set[str]) -> set[str]:
    """Every distribution ``requirements`` pull in (markers evaluated here, extras followed), by normalised name."""
    seen: set[str] = set()
    todo = [(Requirement(r), extras) for r in requirements]
    while todo:
        req, wanted = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in (wanted or {""})):
            continue
        name = _norm(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            continue  # reported by the caller: a declared package that is not installed
        todo += [(Requirement(r), set(req.extras)) for r in dist.requires or []]
    return seen


def test_every_installed_dependency_is_pinned_at_its_installed_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in ("cpu", "test"):
        declared += project["optional-dependencies"][extra]
    pins = _pins()
    closure = _closure(declared, set())
    unpinned = sorted(n for n in closure if n not in pins)
    assert not unpinned, f"add these to constraints.txt: {unpinned}"
    wrong = {n: (pins[n], md.version(n)) for n in closure if md.version(n).split("+")[0] != pins[n].split("+")[0]}
    assert not wrong, f"installed versions differ from constraints.txt: {wrong}"


def _imports(folder: Path) -> set[str]:
    names: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("folder", ["ropeexport", "tests", "tools", "plugins"])
def test_every_imported_package_is_declared(folder: str) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_norm(Requirement(r).name) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        declared |= {_norm(Requirement(r).name) for r in extra}
    owners = md.packages_distributions()
    missing = []
    # A folder's own modules and packages (tools/bench/, imported by tools/bench.py) are not dependencies.
    own = {p.stem for p in (ROOT / folder).glob("*.py")} | {p.name for p in (ROOT / folder).iterdir() if p.is_dir()}
    for module in sorted(_imports(ROOT / folder) - LOCAL - own - set(sys.stdlib_module_names) - set(OPTIONAL)):
        dists = {_norm(d) for d in owners.get(module, [module])}
        if not dists & declared:
            missing.append(f"{module} ({', '.join(sorted(dists))})")
    assert not missing, f"imported in {folder}/ but not declared in pyproject.toml: {missing}"
