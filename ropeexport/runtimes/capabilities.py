"""What each runtime runs, as data: one ``Capability`` record per runtime, naming forms from ``ropeexport.forms``.

A runtime is a runner (``runtimes.RUNTIMES``: how to load a model and call it) and one record here (what it can be
handed): the graph forms it runs, the one to build for it first, whether it runs ONNX Runtime's contrib ops
(GroupQueryAttention, MatMulNBits, MoE, SkipSimplifiedLayerNormalization), whether opset-23 RotaryEmbedding is one
kernel there, how its attention takes the cache. Adding a runtime is one record and one runner
(docs/how-to/add-a-runtime.md); ``form_for(runtime)`` is the form a build for that runtime takes, and
``runs(runtime, form)`` says whether a folder of that form can be verified there, with why not.

What each record says comes from where it is measured or read: ONNX Runtime 1.31 CPU runs every form
(``tests/block``, ``tests/decoder``); ``onnx.reference`` (onnx 1.23) implements Attention, RotaryEmbedding and
TensorScatter of the ONNX spec but no com.microsoft op (the gqa form, int4 weights); TensorRT 10.15's parser takes
the tensorrt and decomposed forms (``ropeexport check-trt``'s support table), never contrib ops; not run here (no
GPU): the record is what its support table says.
"""

from __future__ import annotations

from dataclasses import dataclass

from ropeexport.forms import FORMS


@dataclass(frozen=True)
class Capability:
    """What one runtime runs (module doc): ``forms`` in the order to build for it (the first: ``form_for``);
    ``contrib`` com.microsoft ops; ``fused_rotary`` opset-23 RotaryEmbedding as one kernel; ``cache`` how its
    attention takes the cache (``in-op``: Attention reads past and writes present itself; ``concat``: the graph
    concatenates; ``shared-buffer``: one buffer for past and present, written in place); ``source``: where this
    record comes from.
    """  # noqa: D205

    runtime: str
    forms: tuple[str, ...]
    contrib: bool
    fused_rotary: bool
    cache: str
    source: str

    def __post_init__(self) -> None:
        unknown = [f for f in self.forms if f not in FORMS]
        if unknown:
            raise ValueError(f"{self.runtime}: unknown forms {unknown}; forms: {', '.join(FORMS)}")
        needs = [f for f in self.forms if FORMS[f].contrib and not self.contrib]
        if needs:
            raise ValueError(f"{self.runtime}: {needs} need contrib ops, which it does not run")


CAPABILITIES: dict[str, Capability] = {
    c.runtime: c
    for c in (
        Capability("ort", ("gqa", "fused", "decomposed", "static-cache", "tensorrt"), contrib=True,
                   fused_rotary=True, cache="shared-buffer",
                   source="ONNX Runtime 1.31 CPU: every form built and verified in the test suite"),
        Capability("onnx-reference", ("fused", "decomposed", "static-cache", "tensorrt"), contrib=False,
                   fused_rotary=False, cache="in-op",
                   source="onnx.reference 1.23: the ONNX spec's ops (Attention, RotaryEmbedding, TensorScatter), no "
                   "com.microsoft op"),
        Capability("trt", ("tensorrt", "decomposed"), contrib=False, fused_rotary=False, cache="concat",
                   source="TensorRT 10.15's parser (check-trt's support table); not run here: no GPU"),
    )
}  # fmt: skip


def form_for(runtime: str) -> str:
    """The form a build for ``runtime`` takes (its record's first); KeyError naming the runtimes otherwise."""
    if runtime not in CAPABILITIES:
        raise KeyError(f"unknown runtime {runtime!r}; runtimes: {', '.join(CAPABILITIES)}")
    return CAPABILITIES[runtime].forms[0]


def runs(runtime: str, form: str, quantized: bool = False) -> str | None:
    """None when ``runtime`` runs a model of ``form`` (int4 weights when ``quantized``); else why not, in words."""
    capability = CAPABILITIES[runtime]
    if form not in capability.forms:
        return f"{runtime} does not run the {form} form (it runs {', '.join(capability.forms)})"
    if quantized and not capability.contrib:
        return f"{runtime} does not run int4 weights (MatMulNBits, an ONNX Runtime contrib op)"
    return None
