"""Run the Triton kernel in Triton's interpreter (CPU tensors) unless ROPEEXPORT_TRITON_NATIVE=1 asks for CUDA.

Triton picks interpreter or compiler when a kernel is decorated, i.e. when ``plugins.triton_rope`` is imported, so
the variable is set here, before any test module of this folder imports it. The ``gpu`` test reruns the kernel tests
natively in a subprocess with ROPEEXPORT_TRITON_NATIVE=1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

if os.environ.get("ROPEEXPORT_TRITON_NATIVE") != "1":
    os.environ["TRITON_INTERPRET"] = "1"

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def run_natively() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run pytest on a test file in a subprocess with the kernel compiled for CUDA (TRITON_INTERPRET unset)."""

    def run(test_file: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"ROPEEXPORT_TRITON_NATIVE": "1"}
        path = str(Path(test_file).resolve().relative_to(ROOT))
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path, *args]
        return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)

    return run
