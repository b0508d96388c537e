"""The Python API: everything the ``ropeexport`` command does, as functions (``import ropeexport as rx``).

Specs come from ``spec``, ``from_preset``, ``from_hf_config`` or ``load_specs``; ``export`` turns one into an
``onnx.ModelProto``; ``build`` exports, runs, verifies and reports one into ``OUT/NAME``; ``build_all`` builds many
and writes the tree's index; ``verify``, ``diff`` and ``check_trt`` read what a build wrote. ``build_decoder``
builds the whole decoder-only model a ``DecoderRequest`` asks for (``rx.DecoderRequest``: a transformers config, a
local checkpoint or a preset, sizes, dtype, form, weight format) and verifies it by greedy generation against a
float64 recompute; ``generate`` / ``open_decoder`` serve a built decoder (greedy, ONNX Runtime, IO binding, a
preallocated cache); ``audit`` / ``graft`` check and repair the positional encoding of models other tools exported.
Every function's result is a typed object (``BuildResult``, ``VerifyResult``, ``ReportDiff``, ...: ``passed``,
``path``, ``to_dict()``, and true when it passed). Errors are ``ropeexport.errors.InputError`` (bad input,
``SpecError`` among them) or ``OutputError`` (a disk that cannot be written), each naming the field at fault
(``str(error)`` is one line: ``"field: what is allowed"``).

Example::

    import ropeexport as rx

    spec = rx.spec("rope", head_dim=64, num_heads=8, max_positions=4096, scaling="linear",
                   scaling_params={"factor": 2.0})
    result = rx.build(spec, "out")
    assert result.passed, result.report["comparisons"]
"""

from __future__ import annotations

from ropeexport.api.audits import audit, audit_folder, audit_zoo, graft
from ropeexport.api.checks import check_trt, diff, verify
from ropeexport.api.decoders import build_decoder, build_layer_block, generate, open_decoder, resolve_decoder
from ropeexport.api.encodings import build, build_all, export, from_hf_config, from_preset, load_specs, spec
from ropeexport.api.packages import package, verify_package

# One module per thing a user does (``encodings``, ``checks``, ``decoders``, ``audits``; ``shared``: what they
# share); no module here is named after a function, or importing it would replace the function on this package.
__all__ = [
    "audit",
    "audit_zoo",
    "audit_folder",
    "build",
    "build_all",
    "build_decoder",
    "build_layer_block",
    "check_trt",
    "diff",
    "export",
    "from_hf_config",
    "from_preset",
    "generate",
    "graft",
    "load_specs",
    "open_decoder",
    "package",
    "resolve_decoder",
    "spec",
    "verify",
    "verify_package",
]
