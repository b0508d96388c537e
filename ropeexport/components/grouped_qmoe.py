"""DeepSeek's mixture (``grouped_moe.shared_moe``) with its routed experts in ONNX Runtime's QMoE (``components.qmoe``).

The grouped router is computed as ``grouped_moe.grouped_routing`` computes it (its sigmoid or softmax scores in float32,
the correction bias where it has one, the best ``topk_group`` groups, the top k of their experts, each weighed by its
score, renormalized where it is, and scaled): its result, each expert's weight [T, E] with exact zeros for the experts
not chosen, is handed to QMoE twice, as the scores it selects by (the k chosen are the only positive ones, so its top k
are they) and as ``router_weights``, the weights it mixes by, with ``normalize_routing_weights`` 0: QMoE 1.31.1 gathers
the k weights as they are (its CPU kernel, read; measured in ``tests/components/test_qmoe.py``). An exact tie at the
k-th weight cannot arise while the chosen weights are positive, the others 0 (a softmax score that underflows to 0 in
float32 would be one). The routed experts are the silu-gated SwiGLU (gain 1, up + 0, no clamp) on interleaved gate / up
rows; the shared experts' MLP is the portable graph's (``linear``:
MatMulNBits in int4).

Notation: b batch, s tokens, T = b s, n hidden, m a routed expert's width, E experts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto

from ropeexport.components.grouped_moe import GroupedRouter, grouped_routing
from ropeexport.components.linear import linear
from ropeexport.components.qmoe import experts_op
from ropeexport.dtypes import DTYPES

if TYPE_CHECKING:
    from ropeexport.graph.onnx_io import GraphBuilder


def interleaved(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """DeepSeek's canonical experts as QMoE stores them (``qmoe.store``): ``experts_gate_up_proj`` [E, 2m, n] (rows
    gate, up interleaved), ``experts_down_proj`` [E, n, m]; the rest as given. Only transposes: the checkpoint's values.
    """  # noqa: D205
    out = {k: v for k, v in arrays.items() if k not in ("experts_gate_proj", "experts_up_proj", "experts_down_proj")}
    gate, up = arrays["experts_gate_proj"], arrays["experts_up_proj"]  # [E, n, m] each
    E, n, m = gate.shape
    out["experts_gate_up_proj"] = np.stack([gate, up], axis=-1).reshape(E, n, 2 * m).transpose(0, 2, 1)
    out["experts_down_proj"] = arrays["experts_down_proj"].transpose(0, 2, 1)
    return out


def grouped_qmoe(g: GraphBuilder, router: GroupedRouter, dtype: str, x: str, w: Mapping[str, str]) -> str:
    """x [b, s, n] -> [b, s, n]: ``grouped_moe.shared_moe``'s definition with the routed experts in one QMoE node
    (module doc). ``w``: the stored names of ``router_proj`` (in the dtype), ``router_correction`` (float32; a router
    with correction only), the experts as
    ``qmoe.store`` returned them (``interleaved``'s layout) and the shared experts' ``shared_*_proj``.
    """  # noqa: D205
    wide = lambda v: v if dtype == "fp32" else g.op("Cast", [v], to=TensorProto.FLOAT)  # noqa: E731
    logits = g.op("MatMul", [wide(x), wide(w["router_proj"])])  # [b, s, E] float32, as transformers computes it
    spread = grouped_routing(g, router, logits, w.get("router_correction"))  # [b, s, E], 0 for an expert not chosen
    spread = g.op("Flatten", [spread if dtype == "fp32" else g.op("Cast", [spread], to=DTYPES[dtype].onnx)], axis=2)
    routed = experts_op(g, [g.op("Flatten", [x], axis=2), spread, w["experts_gate_up_proj"], "",
                            w["experts_down_proj"], ""], dtype, router_weights=spread, k=router.top_k,
                        activation_type="swiglu", swiglu_fusion=1, activation_alpha=1.0, activation_beta=0.0,
                        normalize_routing_weights=0)  # fmt: skip
    s_gate, s_up = (linear(g, x, w[f"shared_{p}_proj"]) for p in ("gate", "up"))
    shared = linear(g, g.op("Mul", [g.op("Mul", [s_gate, g.op("Sigmoid", [s_gate])]), s_up]), w["shared_down_proj"])
    return g.op("Add", [g.op("Reshape", [routed, g.op("Shape", [x])]), shared])
