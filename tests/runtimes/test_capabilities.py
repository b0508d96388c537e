"""The runtimes' capability records (``runtimes.capabilities``): one per runtime of the registry, each naming forms
that exist, and what they say held against what the runtimes do.
"""  # noqa: D205

from __future__ import annotations

import pytest

from ropeexport.forms import DECODER_FORMS, FORMS
from ropeexport.runtimes import RUNTIMES
from ropeexport.runtimes.capabilities import CAPABILITIES, Capability, form_for, runs


def test_every_runtime_has_its_record_and_no_record_is_of_nothing() -> None:
    assert set(CAPABILITIES) == set(RUNTIMES)
    for capability in CAPABILITIES.values():
        assert set(capability.forms) <= set(FORMS) and capability.forms
        assert form_for(capability.runtime) in DECODER_FORMS  # what a decoder build for it takes


# (runtime, form, int4, runs) — onnx.reference's rows as measured by tests/decoder/test_decoder_runtimes.py
RUNS = [("ort", "gqa", True, True), ("onnx-reference", "gqa", False, False), ("onnx-reference", "fused", True, False),
        ("onnx-reference", "decomposed", False, True), ("trt", "fused", False, False), ("trt", "tensorrt", False, True),
        ("trt", "decomposed", True, False)]  # fmt: skip


@pytest.mark.parametrize(("runtime", "form", "int4", "expected"), RUNS, ids=[f"{r}-{f}-{q}" for r, f, q, _ in RUNS])
def test_runs_says_why_not(runtime: str, form: str, int4: bool, expected: bool) -> None:
    why = runs(runtime, form, int4)
    assert (why is None) is expected
    if why is not None:
        assert why.startswith(runtime)


def test_a_record_naming_a_contrib_form_without_contrib_ops_is_refused() -> None:
    with pytest.raises(ValueError, match="need contrib ops"):
        Capability("x", ("gqa",), contrib=False, fused_rotary=False, cache="concat", source="test")
    with pytest.raises(ValueError, match="unknown forms"):
        Capability("x", ("flash",), contrib=True, fused_rotary=False, cache="concat", source="test")
