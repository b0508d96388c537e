"""ONNX Runtime: the one place ropeexport opens an InferenceSession (``open_session``), and its runner.

``open_session`` is what every ONNX Runtime session of the package outside ``audits/`` goes through: verification
(``OrtRunner``), timed and served calls (``iobinding.IoBindingRunner``, ``decoder.serve.DecoderSession``). The caller
chooses the session options and providers (they decide speed: docs/status/speed.md); this module says how the
library is found (``load_onnxruntime``) and how a model it cannot load is told (one line, ``RuntimeUnavailable``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ropeexport.errors import RuntimeUnavailable
from ropeexport.runtimes.base import Runner

if TYPE_CHECKING:
    import onnxruntime

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"


def quiet_telemetry(ort: Any) -> None:
    """Turn off what ONNX Runtime lets us turn off of its telemetry, once per process.

    ``disable_telemetry_events`` stops the events ORT would send (its Windows ETW provider; elsewhere it has nothing
    to send). What remains on Linux, and no API turns off: ORT 1.31 writes ``~/.cache/Microsoft/DeveloperTools/
    .onnxruntime/{deviceid,onnxruntime.db}`` on its first session (docs/reference/artifacts.md, "What a build
    writes outside its output folder").
    """
    global _TELEMETRY_OFF
    if not _TELEMETRY_OFF and hasattr(ort, "disable_telemetry_events"):
        ort.disable_telemetry_events()
        _TELEMETRY_OFF = True


_TELEMETRY_OFF = False


def load_onnxruntime() -> Any:
    """The onnxruntime module, its telemetry off; RuntimeUnavailable when it is not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise RuntimeUnavailable("onnxruntime is not installed (pip install 'ropeexport[cpu]')") from None
    quiet_telemetry(ort)
    return ort


def open_session(
    model: str | Path | bytes, options: onnxruntime.SessionOptions, providers: list[str]
) -> onnxruntime.InferenceSession:
    """``onnxruntime.InferenceSession(model, options, providers=providers)``, exactly those options and providers.

    A model ONNX Runtime cannot load (no kernel for an op or a dtype, a malformed graph) raises RuntimeUnavailable
    with ORT's version and the first line of its message: ``onnxruntime 1.31.1 cannot load the model: ...``.
    """
    ort = load_onnxruntime()
    source = model if isinstance(model, bytes) else str(model)
    try:
        return ort.InferenceSession(source, options, providers=providers)
    except Exception as exc:  # ORT raises its own exception types for missing kernels
        message = (str(exc).splitlines() or [""])[0]
        raise RuntimeUnavailable(f"onnxruntime {ort.__version__} cannot load the model: {message}") from None


class OrtRunner(Runner):
    """Runs a model in an ONNX Runtime InferenceSession; outputs come back as numpy arrays.

    ``providers``: None takes the CUDA provider where present, else the CPU one (``describe()`` says which ran).
    """

    name = "ort"

    def __init__(self, model_path: str | Path, providers: list[str] | None = None) -> None:
        super().__init__(model_path)
        ort = load_onnxruntime()
        if providers is None:
            providers = [p for p in (CUDA, CPU) if p in ort.get_available_providers()]
        options = ort.SessionOptions()
        options.log_severity_level = 4  # errors reach the caller as exceptions; the guard probes expect some
        # Idle ORT threads spin by default and steal cores from whatever runs next (the eager reference here).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = open_session(Path(model_path), options, providers)
        self.version = ort.__version__
        self.providers = self.session.get_providers()

    def close(self) -> None:
        """Let the session go, and the weights it holds with it (a decoder's verification closes it once every
        scenario has run, before its float64 passes: Gemma 4 31B's widths on 2 layers in int4 hold 1.5 GB there).
        """  # noqa: D205
        self.__dict__.pop("session", None)

    def describe(self) -> str:
        """For example ``onnxruntime 1.31.1 CPUExecutionProvider``."""
        return f"onnxruntime {self.version} {self.providers[0]}"

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [o.name for o in self.session.get_outputs()]
        return dict(zip(names, self.session.run(names, feeds), strict=True))
