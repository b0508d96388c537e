"""ropeexport: positional encodings out of PyTorch, into ONNX Runtime and TensorRT, verified position by position.

The Python API (``import ropeexport as rx``; see ``ropeexport.api`` and docs/tutorials/python-api.md):
``rx.spec``, ``rx.from_preset``, ``rx.from_hf_config``, ``rx.load_specs`` -> specs; ``rx.export(spec)`` -> an
``onnx.ModelProto``; ``rx.build``, ``rx.build_all``, ``rx.verify``, ``rx.diff``, ``rx.check_trt``;
``rx.build_decoder(rx.DecoderRequest(...), out_dir)`` builds a whole decoder from a transformers config and verifies
it by generation; ``rx.generate`` / ``rx.open_decoder`` serve one (greedy generation in ONNX Runtime); ``rx.audit`` /
``rx.graft`` check and repair models other tools exported. The spec, request and result types are exported too
(``rx.SpecBase``, ``rx.DecoderSpec``, ``rx.DecoderRequest``, ``rx.BuildResult``, ...); every result of a check follows
``rx.Result``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ropeexport.version import __version__

# ONNX Runtime 1.31 on Linux keeps a telemetry database and device id under ~/.cache/Microsoft/DeveloperTools and a
# session file in TMPDIR unless this is set before its first session; ropeexport writes only into its output folder.
# setdefault: a user who wants ORT's telemetry sets ORT_DISABLE_TELEMETRY=0 themselves.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

# Every public name, with the module that defines it: loaded on first use (module doc).
_HOMES = {
    "audit": "ropeexport.api",
    "audit_zoo": "ropeexport.api",
    "audit_folder": "ropeexport.api",
    "build": "ropeexport.api",
    "build_all": "ropeexport.api",
    "build_decoder": "ropeexport.api",
    "build_layer_block": "ropeexport.api",
    "check_trt": "ropeexport.api",
    "diff": "ropeexport.api",
    "export": "ropeexport.api",
    "from_hf_config": "ropeexport.api",
    "from_preset": "ropeexport.api",
    "generate": "ropeexport.api",
    "graft": "ropeexport.api",
    "load_specs": "ropeexport.api",
    "open_decoder": "ropeexport.api",
    "package": "ropeexport.api",
    "verify_package": "ropeexport.api",
    "resolve_decoder": "ropeexport.api",
    "spec": "ropeexport.api",
    "verify": "ropeexport.api",
    # specs
    "SpecBase": "ropeexport.specs",
    "DecoderSpec": "ropeexport.decoder.spec",
    "LayerSpec": "ropeexport.decoder.spec",
    "DecoderRequest": "ropeexport.decoder.request",  # what a decoder build is asked for
    # results (``Result`` is the protocol they share)
    "Result": "ropeexport.results",
    "BuildResult": "ropeexport.pipeline",
    "VerifyResult": "ropeexport.pipeline",
    "DecoderVerifyResult": "ropeexport.decoder.kind",
    "ReportDiff": "ropeexport.report.diff_result",
    "CompatResult": "ropeexport.trt.compat",
    "AuditResult": "ropeexport.audits.core",
    "ZooResult": "ropeexport.audits.zoo",
    "GraftResult": "ropeexport.audits.graft",
    "FolderAudit": "ropeexport.api.audits",
    "PackageResult": "ropeexport.api.packages",
    "Generation": "ropeexport.decoder.serve",
    "DecoderSession": "ropeexport.decoder.serve",
}
__all__ = ["__version__", *_HOMES]

if TYPE_CHECKING:  # what a type checker sees; at run time each name loads on first use (__getattr__)
    from ropeexport.api import (  # noqa: F401
        audit,
        audit_folder,
        audit_zoo,
        build,
        build_all,
        build_decoder,
        build_layer_block,
        check_trt,
        diff,
        export,
        from_hf_config,
        from_preset,
        generate,
        graft,
        load_specs,
        open_decoder,
        package,
        resolve_decoder,
        spec,
        verify,
        verify_package,
    )
    from ropeexport.api.audits import FolderAudit  # noqa: F401
    from ropeexport.api.packages import PackageResult  # noqa: F401
    from ropeexport.audits.core import AuditResult  # noqa: F401
    from ropeexport.audits.graft import GraftResult  # noqa: F401
    from ropeexport.audits.zoo import ZooResult  # noqa: F401
    from ropeexport.decoder.kind import DecoderVerifyResult  # noqa: F401
    from ropeexport.decoder.request import DecoderRequest  # noqa: F401
    from ropeexport.decoder.serve import DecoderSession, Generation  # noqa: F401
    from ropeexport.decoder.spec import DecoderSpec, LayerSpec  # noqa: F401
    from ropeexport.pipeline import BuildResult, VerifyResult  # noqa: F401
    from ropeexport.report.diff_result import ReportDiff  # noqa: F401
    from ropeexport.results import Result  # noqa: F401
    from ropeexport.specs import SpecBase  # noqa: F401
    from ropeexport.trt.compat import CompatResult  # noqa: F401


def __getattr__(name: str) -> Any:
    # The API loads torch and onnx: only when a name is first used, so `ropeexport --version` stays instant.
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'ropeexport' has no attribute {name!r}")
