"""Runtimes by name. A runtime that cannot run here raises RuntimeUnavailable with the reason; the others still work.

Every kind of artifact is verified through this table, decoders included: adding a runtime is one entry here and
its runner (``base.Runner``: ``infer(feeds) -> outputs``, ``describe()``), and ``--runtime NAME`` then reaches it
for every kind (docs/how-to/add-a-runtime.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ropeexport.errors import SpecError
from ropeexport.runtimes.base import Runner


def _ort(path: Path, cpu_only: bool) -> Runner:
    from ropeexport.runtimes.ort import CPU, OrtRunner

    return OrtRunner(path, providers=[CPU] if cpu_only else None)


def _reference(path: Path, cpu_only: bool) -> Runner:
    from ropeexport.runtimes.onnx_reference import OnnxReferenceRunner

    return OnnxReferenceRunner(path)  # numpy on the host: it has no device to choose


def _trt(path: Path, cpu_only: bool) -> Runner:
    from ropeexport.runtimes.trt import TrtRunner

    return TrtRunner(path)  # named on purpose: TensorRT is a GPU runtime, cpu_only is no choice it has


# name -> open(model path, cpu_only) -> Runner (module doc)
RUNTIMES: dict[str, Callable[[Path, bool], Runner]] = {"ort": _ort, "onnx-reference": _reference, "trt": _trt}


def check_runtime_names(names: list[str]) -> list[str]:
    """Return the names if every one is a known runtime; else raise SpecError listing the valid ones."""
    for name in names:
        if name not in RUNTIMES:
            raise SpecError("runtime", f"unknown runtime {name!r}; allowed: {', '.join(RUNTIMES)}")
    return names


def open_runner(name: str, model_path: str | Path, *, cpu_only: bool = False) -> Runner:
    """Open the named runtime on a model; unknown names list the valid ones.

    ``cpu_only``: a runtime that picks a GPU device by itself where one is present (``ort``: the CUDA provider) stays
    on the host CPU; a kind whose bounds were measured there asks for it (decoders: ``decoder.runs``). A runtime that
    is a GPU runtime by name (``trt``) is what was asked for and is unaffected.
    """
    check_runtime_names([name])
    return RUNTIMES[name](Path(model_path), cpu_only)
