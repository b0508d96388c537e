"""Runtimes by name. A runtime that cannot run here raises RuntimeUnavailable with the reason; the others still work."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ropeexport.errors import SpecError
from ropeexport.runtimes.base import Runner


def _ort(path: Path) -> Runner:
    from ropeexport.runtimes.ort import OrtRunner

    return OrtRunner(path)


def _reference(path: Path) -> Runner:
    from ropeexport.runtimes.onnx_reference import OnnxReferenceRunner

    return OnnxReferenceRunner(path)


def _trt(path: Path) -> Runner:
    from ropeexport.trt.runner import TrtRunner

    return TrtRunner(path)


RUNTIMES: dict[str, Callable[[Path], Runner]] = {"ort": _ort, "onnx-reference": _reference, "trt": _trt}


def check_runtime_names(names: list[str]) -> list[str]:
    """Return the names if every one is a known runtime; else raise SpecError listing the valid ones."""
    for name in names:
        if name not in RUNTIMES:
            raise SpecError("runtime", f"unknown runtime {name!r}; allowed: {', '.join(RUNTIMES)}")
    return names


def open_runner(name: str, model_path: str | Path) -> Runner:
    """Open the named runtime on a model; unknown names list the valid ones."""
    check_runtime_names([name])
    return RUNTIMES[name](Path(model_path))
