"""The graph forms an attention layer is lowered to, named once, with what each offers; torch- and onnx-free.

One canonical attention (``components.attention.graph``: projections, q/k norms, the position piece, the mask rule,
the output) is lowered to a form: the ops one runtime runs best. A form is a ``Form`` record here (its opset, whether
it needs ONNX Runtime's contrib ops, what it cannot offer and why) and one lowering module
(``components.attention.lowering.<name>``); what a runtime runs is its capability record
(``runtimes.capabilities``), which names forms from here. Adding a form is one record and one lowering module;
everything else (spec validation, the decoder's opset and contrib domain, the mixture-of-experts kernel, fused norms,
serving with one shared cache buffer, the forms latent attention is built in and its cache's widths) reads the
record, and no other module compares a form's name (``tests/layout/test_form_names.py``, which lists the four older
comparisons it still allows).

Encoding artifacts have two forms (``GRAPHS``: ``fused``, ``decomposed``); the block and the decoder have the forms of
their cache (``BLOCK_FORMS``): ``tensorrt``, ``static-cache``, ``gqa``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ropeexport.errors import SpecError

# What a layer may ask of a form (``Form.refuses`` keys): each a feature the spec can hold.
FEATURES = ("softcap", "sinks", "window", "int4", "bias", "chunk")


@dataclass(frozen=True)
class Form:
    """One graph form (module doc).

    ``opset``: the ONNX opset its ops need. ``contrib``: it runs ONNX Runtime's com.microsoft ops (GroupQueryAttention,
    SkipSimplifiedLayerNormalization, MoE), so ONNX Runtime alone runs it. ``static``: its cache is a preallocated
    buffer, with ``cache_length`` [b] saying how many tokens each row holds. ``decoder``: a decoder layer takes its I/O
    as is (the static cache's buffers are a block's). ``shared_buffer``: past and present may be one buffer
    (onnxruntime-genai's past_present_share_buffer). ``refuses``: each feature of ``FEATURES`` it cannot offer, with
    why (the spec that asks for it is a one-line error naming the feature and the forms that have it).
    ``fused_ops``: its rotation and attention are one node each (RotaryEmbedding, Attention or GroupQueryAttention);
    False spells them in primitives (MatMul, Softmax, ...). ``one_head_size``: its attention (GroupQueryAttention)
    takes keys and values of one head size, so a layer whose values are narrower than its keys (latent attention)
    caches them padded with zeros to the key's width; ``head_multiple``: that head size must be a multiple of it.
    ``latent_caches``: the latent-attention caches (``components.latent.CACHES``) built in this form; () none.
    """

    name: str
    opset: int
    words: str
    contrib: bool = False
    static: bool = False
    decoder: bool = True
    shared_buffer: bool = False
    refuses: Mapping[str, str] = field(default_factory=dict)
    fused_ops: bool = True
    one_head_size: bool = False
    head_multiple: int = 1
    latent_caches: tuple[str, ...] = ()

    @property
    def moe_kernel(self) -> str:
        """The mixture-of-experts graph it takes (``components.moe``): ONNX Runtime's MoE where contrib ops run."""
        return "contrib" if self.contrib else "portable"

    @property
    def fused_norms(self) -> bool:
        """Whether a decoder fuses each residual add with the RMSNorm after it (contrib SkipSimplifiedLayerNorm)."""
        return self.contrib

    def check(self, feature: str, asked: object, field_name: str) -> None:
        """SpecError naming ``field_name`` when ``asked`` (truthy) and this form refuses ``feature``."""
        if asked and feature in self.refuses:
            others = [f.name for f in FORMS.values() if feature not in f.refuses and f.decoder == self.decoder]
            raise SpecError(field_name, f"is not offered in the {self.name} form ({self.refuses[feature]}); use "
                            f"{', '.join(others)}")  # fmt: skip


_TRT_SOFTCAP = "TensorRT's Attention takes no softcap"
_INT4 = "int4 (MatMulNBits, an ONNX Runtime contrib op) is not parsed by TensorRT"
FORMS: dict[str, Form] = {
    f.name: f
    for f in (
        Form("fused", 23, "opset-23 Attention reading and writing the cache itself", latent_caches=("expanded",)),
        Form("decomposed", 17, "opset-17 primitives (MatMul, Softmax, ...): any runtime, TensorRT included",
             fused_ops=False, latent_caches=("expanded", "latent")),
        Form("tensorrt", 23, "what TensorRT 10.15 parses: the cache concatenated outside a cache-less Attention, an "
             "additive mask", refuses={"softcap": _TRT_SOFTCAP, "int4": _INT4}),
        Form("static-cache", 24, "a preallocated cache as a server keeps it (TensorScatter, nonpad_kv_seqlen)",
             static=True, decoder=False,
             refuses={"sinks": "Attention reads the static buffer in place; a sink slot beside it would copy the "
                      "whole buffer per call", "window": "a sliding window over a static buffer is not built",
                      "chunk": "chunked attention over a static buffer is not built"}),
        # head_multiple 8: ONNX Runtime 1.31 CPU's GroupQueryAttention says "head_size must be a multiple of 8"
        Form("gqa", 23, "ONNX Runtime's GroupQueryAttention (its own rotary on decode steps)", contrib=True,
             shared_buffer=True, one_head_size=True, head_multiple=8, latent_caches=("expanded",)),
    )
}  # fmt: skip
GRAPHS = ("fused", "decomposed")  # the forms of an encoding artifact
BLOCK_FORMS = tuple(name for name in FORMS if name not in GRAPHS)  # the forms only a block (and a decoder) has
DECODER_FORMS = tuple(name for name, f in FORMS.items() if f.decoder)


def form(name: str) -> Form:
    """The form of that name; SpecError listing the forms otherwise."""
    if name not in FORMS:
        raise SpecError("graph", f"must be one of {', '.join(FORMS)}; got {name!r}")
    return FORMS[name]
