"""The house's shape, checked: one home per family, an explicit catalog, one-way imports, torch-free specs.

These read the source (``ast``) and never import what they check, except where the claim is about importing.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import setuptools
import tomllib

from ropeexport import catalog

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ropeexport"
FAMILIES = PACKAGE / "families"
SHARED = {"bias"}  # families/bias: the additive-bias machinery ALiBi, T5, KERPLE and Sandwich share


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def _imports(module: str) -> set[str]:
    """Every ropeexport module ``module`` imports, at module level or inside functions."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:  # `from pkg import module` names a module; `from module import name` does not
                full = f"{node.module}.{alias.name}"
                out.add(full if full in MODULES else node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in MODULES and m != module}


GRAPH = {m: _imports(m) for m in MODULES}


def _closure(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        for nxt in GRAPH[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


@pytest.mark.fast
def test_no_import_cycle_counting_lazy_imports() -> None:
    cycles = sorted(m for m in MODULES if m in _closure(m))
    assert not cycles, f"modules on an import cycle: {cycles}"


@pytest.mark.fast
@pytest.mark.parametrize("family", sorted(p.name for p in FAMILIES.iterdir() if (p / "spec.py").exists()))
def test_every_family_folder_is_in_the_catalog_with_its_stages(family: str) -> None:
    package = f"ropeexport.families.{family}"
    stages = {p.stem for p in (FAMILIES / family).glob("*.py")}
    if family in SHARED:
        assert package not in catalog.FAMILIES
        return
    assert package in catalog.FAMILIES, f"{package} has a folder but no line in catalog.FAMILIES"
    assert {"spec", "reference", "export", "oracle", "recipes"} <= stages, f"{family} lacks stages: {sorted(stages)}"


@pytest.mark.fast
def test_the_catalog_lists_only_family_folders() -> None:
    for package in catalog.FAMILIES:
        assert (ROOT / package.replace(".", "/") / "spec.py").is_file(), package


@pytest.mark.fast
def test_only_the_catalog_and_what_sits_above_it_know_the_families() -> None:
    # Below the catalog nothing may look a family up: the pipeline, verification, runtimes and report are handed a
    # kind. The modules allowed to import the catalog are the ones that turn user input into specs and kinds.
    above = {"ropeexport.batch", "ropeexport.requests", "ropeexport.presets", "ropeexport.encoding",
             "ropeexport.artifacts"}  # fmt: skip
    above |= {m for m in MODULES if m.startswith(("ropeexport.api", "ropeexport.cli", "ropeexport.planted",
                                                  "ropeexport.decoder", "ropeexport.audits"))}  # fmt: skip
    users = {m for m, deps in GRAPH.items() if "ropeexport.catalog" in deps}
    assert users <= above, f"unexpected catalog users: {sorted(users - above)}"
    for stage in ("ropeexport.pipeline", "ropeexport.verification.core", "ropeexport.report", "ropeexport.tree"):
        assert not any(m.startswith("ropeexport.families") for m in _closure(stage)), stage


def test_no_family_imports_the_block() -> None:
    # The block is a model-level artifact made from a family's positions (``kinds.Positions``, ``block.kinds``): a
    # family offers them and never reaches up into the block that composes them.
    reaching = sorted(m for m in MODULES if m.startswith("ropeexport.families") and any(
        d.startswith("ropeexport.block") for d in GRAPH[m]))  # fmt: skip
    assert not reaching, f"families importing ropeexport.block: {reaching}"


@pytest.mark.fast
@pytest.mark.parametrize("family", sorted(p.name for p in FAMILIES.iterdir() if (p / "oracle.py").exists()))
def test_no_oracle_imports_an_exporter(family: str) -> None:
    # The float64 oracle is the independent reference: sharing code with the graph builder would let one bug pass
    # both. Checked over everything the oracle imports, directly or not.
    reached = _closure(f"ropeexport.families.{family}.oracle")
    exporters = sorted(m for m in reached if m.endswith(".export") or m.startswith("ropeexport.graph"))
    assert not exporters, f"families/{family}/oracle.py reaches {exporters}"


def test_specs_load_without_torch_or_onnx() -> None:
    code = (
        "import sys, ropeexport.catalog as c, ropeexport.cli as cli; "
        "[cls() for cls in c.encodings().values()]; "
        "heavy = sorted(m for m in ('torch', 'onnx', 'onnxruntime') if m in sys.modules); "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"importing the specs loaded {run.stdout.strip()} {run.stderr[-500:]}"


def test_the_wheel_installs_no_top_level_plugins_module() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    # pyproject.toml's find looks for namespace packages unless told not to (setuptools' default there): a folder
    # with no __init__.py that the pattern matches (plugins/) would be installed, and importable from an editable
    # install, as a top-level package.
    find = setuptools.find_namespace_packages if config.get("namespaces", True) else setuptools.find_packages
    packages = find(where=str(ROOT), include=config["include"], exclude=config.get("exclude", ()))
    assert packages and all(p == "ropeexport" or p.startswith("ropeexport.") for p in packages), packages
    assert "ropeexport.trt" in packages  # TensorRT's runner, support table, plugin and kernel live there
    # A folder without __init__.py is a namespace package: it imports from a checkout but the wheel leaves it out.
    folders = {_module(p / "__init__.py") for p in PACKAGE.rglob("*") if p.is_dir() and any(p.glob("*.py"))}
    assert folders <= set(packages), f"folders the wheel would leave out: {sorted(folders - set(packages))}"


def _package(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def test_no_private_name_is_imported_across_packages() -> None:
    # A name with a leading underscore is its package's own: another package that needs it gets a public name (or
    # the code moves). Within one package (audit's modules, say) private names may be shared.
    crossings = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in MODULES:
                if _package(node.module) == _package(module):
                    continue
                crossings += [f"{module} <- {node.module}.{a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]  # fmt: skip
    assert not crossings, crossings


# Every module of ropeexport/ at 500 lines or under (house style: a long module is asking to be split by concept).
MAX_LINES = 500


def test_no_module_is_over_500_lines() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    over = {m: n for m, n in sizes.items() if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines: {over}"


def _layers() -> list[tuple[str, tuple[str, ...]]]:
    """The layer order docs/explanation/architecture.md gives, top first: (layer, module prefixes)."""
    page = (ROOT / "docs" / "explanation" / "architecture.md").read_text()
    section = page.split("## Imports point one way", 1)[1]
    block = section.split("```text\n", 1)[1].split("```", 1)[0]
    out = []
    for line in block.strip().splitlines():
        name, _, prefixes = line.partition(":")
        out.append((name.strip(), tuple(p.strip() for p in prefixes.split(","))))
    return out


def _layer_of(module: str, layers: list[tuple[str, tuple[str, ...]]]) -> int | None:
    """The index of the layer whose longest prefix names ``module`` (None: no layer names it)."""
    best: tuple[int, int] | None = None
    for i, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (i, len(prefix))
    return None if best is None else best[0]


def test_imports_point_down_the_layers_the_docs_give() -> None:
    layers = _layers()
    assert len(layers) >= 8, layers
    placed = {m: _layer_of(m, layers) for m in MODULES}
    assert not [m for m, i in placed.items() if i is None], "modules in no layer of architecture.md"
    upward = sorted(f"{m} ({layers[placed[m]][0]}) -> {d} ({layers[placed[d]][0]})"  # type: ignore[index]
                    for m, deps in GRAPH.items() for d in deps if placed[d] < placed[m])  # type: ignore[operator]
    assert not upward, f"imports upward: {upward}"


def test_every_architecture_folder_is_in_the_catalog() -> None:
    from ropeexport import architectures

    folders = {p.name for p in (PACKAGE / "architectures").iterdir() if (p / "__init__.py").exists()}
    assert {f"ropeexport.architectures.{f}" for f in folders} == set(architectures.PACKAGES)
