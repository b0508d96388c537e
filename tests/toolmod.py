"""A script of tools/ loaded as a module (tools/ is not a package): ``tool("bench_sizes").markdown(...)``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def tool(name: str) -> ModuleType:
    """tools/NAME.py, executed as a fresh module."""
    found = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module
