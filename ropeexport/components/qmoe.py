"""A mixture's experts in int4 for ONNX Runtime's ``com.microsoft.QMoE``: how they are stored, and the one node.

``moe.moe``'s contrib graph calls ``experts_op``: ``com.microsoft.MoE`` over float experts, or, where the experts were
stored by ``store`` (int4), ``QMoE`` over the same routing and the same SwiGLU attributes. QMoE holds each expert's
weights as MatMulNBits does one weight: [E, o, i / 2] uint8 (two values a byte, low nibble first, blocks of
``block_size`` along the in features), scales [E, o, i / block_size] in the activation dtype, zero points
[E, o, ceil(blocks / 2)] or none (8); ``store`` packs each expert with ``WeightFormat.pack`` (ONNX Runtime's own
quantizer) and stacks them, so every value is the one ``WeightFormat.read64`` dequantizes for that expert, and the
float64 truth reads them so.

What ONNX Runtime 1.31.1's CPU kernel computes (measured, ``tests/components/test_qmoe.py``; its source read in
``onnxruntime/contrib_ops/cpu/moe/moe_quantization_cpu.cc``): the fused SwiGLU with gpt-oss's gain, clamp and
up + 1 (``swiglu_fusion`` 1, interleaved gate / up rows) and the silu-gated expert (gain 1, up + 0, no clamp); fp32
and fp16 activations; block sizes of 16 and more, symmetric or with zero points, only where the block size divides
both the hidden and the inner width (``fits``; the kernel refuses other shapes, and MatMulNBits' padding of a last
block has no QMoE form). Its default routing is always the softmax of the k chosen logits, whatever
``normalize_routing_weights`` says; the softmax over all E taken at the k chosen (Qwen3-MoE without
``norm_topk_prob``) is given to it as ``router_weights`` (the weights gathered at the chosen experts,
``normalize_routing_weights`` 0), the softmax in float32 as transformers takes it; DeepSeek's grouped router's
weights likewise (``grouped_qmoe``). Llama 4's router scales each expert's input, which no QMoE attribute says: its
experts stay one MatMulNBits each (``linear``).

Notation: T tokens, n hidden, m an expert's inner width, E experts, o / i a weight's out / in features.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import TensorProto

from ropeexport.components import MICROSOFT
from ropeexport.dtypes import DTYPES

if TYPE_CHECKING:
    from ropeexport.components.linear import WeightFormat
    from ropeexport.graph.onnx_io import GraphBuilder

# The QMoE experts stored in a graph builder: {the packed weight's name: (scales, zero points or "", attributes)}.
_QMOE: weakref.WeakKeyDictionary[GraphBuilder, dict[str, tuple[str, str, dict[str, int]]]] = (
    weakref.WeakKeyDictionary()
)


def fits(hidden: int, inner: int, block_size: int) -> bool:
    """Whether QMoE holds experts of these widths in blocks of ``block_size``: the block divides both (module doc)."""
    return hidden % block_size == 0 and inner % block_size == 0


def store(g: GraphBuilder, fmt: WeightFormat, name: str, weight: np.ndarray) -> str:
    """Experts' weight [E, o, i] (``moe.to_graph``'s contrib layout: rows the out features) packed for QMoE; the name
    ``experts_op`` reads. Each expert packed alone (``WeightFormat.pack`` of its [i, o]), then stacked.
    """  # noqa: D205
    packs = [fmt.pack(expert.T) for expert in weight]
    if packs[0].K % fmt.block_size:
        raise ValueError(f"{name}: {packs[0].K} in features are not whole blocks of {fmt.block_size} (fits)")
    stored = g.const(f"{name}_Q4", np.stack([p.weight.reshape(p.N, -1) for p in packs]))  # [E, o, i / 2]
    scales = g.const(f"{name}_scales", np.stack([p.scales for p in packs]))  # [E, o, i / block]
    zeros = [p.zero_points for p in packs if p.zero_points is not None]  # none: symmetric
    zero_points = g.const(f"{name}_zero_points", np.stack(zeros)) if zeros else ""
    attributes = {"expert_weight_bits": 4, "block_size": fmt.block_size}
    if fmt.accuracy_level:  # unset at 0, as MatMulNBits' (fp32 activations on the CPU)
        attributes["accuracy_level"] = fmt.accuracy_level
    _QMOE.setdefault(g, {})[stored] = (scales, zero_points, attributes)
    return stored


def holds(g: GraphBuilder, name: str) -> bool:
    """Whether ``name`` is experts' weight ``store`` packed for QMoE in ``g``."""
    return name in _QMOE.get(g, {})


def experts_op(g: GraphBuilder, inputs: list[str], dtype: str, router_weights: str = "", **attributes: Any) -> str:
    """x [T, n], router logits [T, E], fc1 (gate | up interleaved), its bias or "", fc2, its bias or "" -> [T, n]:
    ``com.microsoft.MoE`` with ``attributes``, or QMoE where fc1 and fc2 were stored by ``store`` (module doc:
    ``normalize_routing_weights`` 0 becomes the softmax over all E as ``router_weights``, unless ``router_weights``
    [T, E] is given: the weights QMoE mixes the chosen experts by, ``grouped_qmoe``'s).
    """  # noqa: D205
    held = _QMOE.get(g, {})
    x, logits, fc1, fc1_bias, fc2, fc2_bias = inputs
    if fc1 not in held:
        return g.op("MoE", inputs, domain=MICROSOFT, **attributes)
    (fc1_scales, fc1_zero, quantized), (fc2_scales, fc2_zero, _) = held[fc1], held[fc2]
    routed = [x, logits, fc1, fc1_scales, fc1_bias, fc2, fc2_scales, fc2_bias, "", "", "", fc1_zero, fc2_zero]
    if router_weights:
        routed += ["", router_weights]
    elif not attributes["normalize_routing_weights"]:  # the softmax over all E, in float32 (Qwen3MoeTopKRouter's)
        wide = logits if dtype == "fp32" else g.op("Cast", [logits], to=TensorProto.FLOAT)
        probs = g.op("Softmax", [wide], axis=-1)
        routed += ["", probs if dtype == "fp32" else g.op("Cast", [probs], to=DTYPES[dtype].onnx)]
    while not routed[-1]:  # trailing optional inputs left out
        routed.pop()
    merged: dict[str, Any] = {**attributes, **quantized}
    return g.op("QMoE", routed, domain=MICROSOFT, **merged)

