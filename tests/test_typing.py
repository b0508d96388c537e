"""Types: mypy over ropeexport/ with the project's own configuration, and a public API whose signatures say what they
take and give (no ``Any``: ``object`` where a value really is arbitrary and checked at run time).
"""

from __future__ import annotations

import ast
import collections.abc
import dataclasses
import inspect
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

import ropeexport

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mypy_reports_no_error_over_the_package() -> None:
    # pyproject.toml's [tool.mypy] names the files and the settings: this is the command a developer runs.
    run = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"mypy failed:\n{run.stdout}{run.stderr}"


class _JsonDocument:
    """Stands for ``results.JsonObject`` while hints are resolved: a JSON document's object (report.json, audit.json)
    holds plain data whose schema is the file's; it is the one place a public signature may hold ``Any``.
    """  # noqa: D205


def _namespace(module_name: str) -> dict[str, object]:
    """The names ``module_name``'s annotations are written with, as a type checker sees them: the module's own and
    those it imports under ``if TYPE_CHECKING:``.
    """  # noqa: D205
    module = sys.modules[module_name]
    namespace = dict(vars(module))
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            exec(compile(ast.Module(body=node.body, type_ignores=[]), str(module.__file__), "exec"), namespace)
    return namespace


def _resolve(annotation: object, module_name: str) -> object:
    if not isinstance(annotation, str):
        return annotation
    return eval(annotation, _namespace(module_name), {"JsonObject": _JsonDocument})  # noqa: S307 - our own source


def _function_hints(function: object) -> dict[str, object]:
    module = getattr(function, "__module__", "")
    annotations = getattr(function, "__annotations__", {})
    return {name: _resolve(a, module) for name, a in annotations.items()}


def _imprecise(hint: object, where: str, seen: set[int]) -> list[str]:
    """What in ``hint`` says nothing: ``Any``, or a callable's ``...`` parameters (a Protocol of ours: its call)."""
    if hint is typing.Any:
        return [f"{where}: Any"]
    if id(hint) in seen:
        return []
    seen.add(id(hint))
    found = []
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is collections.abc.Callable and args and args[0] is Ellipsis:
        found.append(f"{where}: Callable[..., ...] (its parameters unsaid)")
    for arg in args:
        if isinstance(arg, list):  # a Callable's parameter list
            for item in arg:
                found += _imprecise(item, where, seen)
        elif arg is not Ellipsis:
            found += _imprecise(arg, where, seen)
    if isinstance(hint, type) and hint.__module__.startswith("ropeexport") and getattr(hint, "_is_protocol", False):
        call = hint.__dict__.get("__call__")
        if call is not None:
            found += _imprecise_signature(call, f"{where} -> {hint.__name__}.__call__", seen)
    return found


def _imprecise_signature(function: object, where: str, seen: set[int]) -> list[str]:
    found = []
    for name, hint in _function_hints(function).items():
        found += _imprecise(hint, f"{where}({name})" if name != "return" else f"{where} -> return", seen)
    return found


def _members(cls: type) -> list[str]:
    """Every imprecise hint of a public class: its public fields and the signatures of its public methods and
    properties (through the bases ropeexport defines; a dataclass's ``__init__`` is its fields).
    """  # noqa: D205
    found: list[str] = []
    for base in reversed(cls.__mro__):
        if not base.__module__.startswith("ropeexport"):
            continue
        for name, annotation in base.__dict__.get("__annotations__", {}).items():
            if not name.startswith("_"):
                found += _imprecise(_resolve(annotation, base.__module__), f"{cls.__name__}.{name}", set())
        for name, member in vars(base).items():
            if name.startswith("_") and not (name == "__init__" and not dataclasses.is_dataclass(base)):
                continue
            function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
            if isinstance(function, types.FunctionType):
                found += _imprecise_signature(function, f"{cls.__name__}.{name}", set())
    return found


PUBLIC = [name for name in ropeexport.__all__ if name != "__version__"]


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_has_a_precise_signature(name: str) -> None:
    item = getattr(ropeexport, name)
    found = _members(item) if isinstance(item, type) else _imprecise_signature(item, name, set())
    assert not found, "imprecise public types (write the type; object where any value is checked at run time):\n" + (
        "\n".join(found)
    )


def test_the_check_sees_what_it_looks_for() -> None:
    def loose(a: typing.Any, b: collections.abc.Callable[..., None], c: dict[str, list[typing.Any]]) -> None: ...

    found = _imprecise_signature(loose, "loose", set())
    assert [f.split(":")[0] for f in found] == ["loose(a)", "loose(b)", "loose(c)"]
