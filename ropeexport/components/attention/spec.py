"""``AttentionSpec``: what one attention layer computes, typed and validated on construction (onnx- and torch-free).

The geometry (query heads, key/value heads, head_dim), the activations' dtype and graph form, the sliding window,
and the position piece or none (``kinds.PositionPiece``: RoPE's rotation or an additive bias, each a graph and its
float64 twin; ``None``: no positional encoding, as SmolLM3's and Llama 4's NoPE layers). And the variants of the
logits: Qwen3's and Gemma 3's per-head q/k norms (``qk_norm``), Gemma's logit scale (``scale``), Gemma 2's
soft-capped logits (``logit_softcap``) and gpt-oss's attention sinks (``sinks``). ``check_weights`` says whether a
weights mapping holds what the spec needs (the graph and the twin both call it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ropeexport.architectures.layers import QK_NORM_OVER
from ropeexport.components.linear import WeightFormat
from ropeexport.components.norm import NormSpec
from ropeexport.components.query_scale import QueryScaleSpec
from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.forms import FORMS
from ropeexport.recipes import PositionPiece
from ropeexport.specs import require_choice, require_int

# Each graph form's opset (``forms.FORMS``): Attention (with its cache inputs) since 23, TensorScatter since 24; the
# decomposed form stays on 17 (primitives only). The gqa form adds ONNX Runtime's contrib domain.
OPSETS = {name: form.opset for name, form in FORMS.items()}


@dataclass(frozen=True)
class AttentionSpec:
    """One attention layer over a KV cache (the forms and the contract in ``components.attention.graph``).

    ``position``: the piece that encodes positions (its ``rotary`` or ``bias`` graph for the graph, its ``rotate64``
    or ``bias64`` for the twin), or None for none. ``window`` > 0: key slot j visible to query slot i only if
    i - j < window. Shapes: hidden [b, s, n] -> output [b, s, n]; cache [b, num_kv_heads, t, head_dim].

    The logits of query head h against key slot j, in this order (transformers' eager attention for each model):
    ``qk_norm`` an RMSNorm over head_dim of every query and key head after the projection, before the rotation
    (weights ``q_norm`` / ``k_norm`` [head_dim]; Qwen3's ``offset`` 0, Gemma 3's 1), or with ``qk_norm_over``
    ``projection`` one RMSNorm over the whole query projection and one over the key's (weights [H * head_dim] and
    [KV * head_dim]; OLMo 2/3's, its ``wide`` product); l = q . k * ``scale`` (0:
    1 / sqrt(head_dim); Gemma: query_pre_attn_scalar ** -0.5); ``logit_softcap`` c > 0: l = c * tanh(l / c) (Gemma 2);
    then the position bias, the mask, and the softmax, with ``sinks`` one more logit per query head in it (weight
    ``sinks`` [num_heads]: it joins the denominator and attends to nothing; gpt-oss). The values: ``v_norm`` an
    RMSNorm of each value head over head_dim with no weight (Gemma 4's ``v_norm``, ``with_scale=False``); ``k_eq_v``
    the values are the key projection's output, taken before the key's norm and rotation (no ``v_proj``; Gemma 4's
    ``attention_k_eq_v``).

    ``chunk`` > 0 (Llama 4's chunked layers): key slot j visible to query slot i only inside i's chunk, the chunks
    counted from each row's first real token (transformers' ``chunked_overlay``: (j - left padding) // chunk ==
    (i - left padding) // chunk; ``masks.chunk_rule``). ``qk_weights`` False: the q/k norm has no weight (Llama 4's
    L2 norm, x / sqrt(mean(x^2) + eps), the RMSNorm times 1; no ``q_norm`` / ``k_norm`` weights).

    ``kv_sharing`` (Gemma 4's ``num_kv_shared_layers``, ``architectures.sharing``): ``store``, the layer also outputs
    ``shared_key`` / ``shared_value``, its new keys and values as its attention reads them (rotated, normed; the
    form's layout: [b, s, KV * d] in the gqa form, else [b, KV, s, d]); ``reuse``, the layer computes its query only
    (no k_proj, v_proj or k_norm) and attends over the inputs ``shared_key`` / ``shared_value`` (a storing layer's)
    and that layer's cache as ``past_key`` / ``past_value``; its present outputs are the storing layer's, again.
    """

    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "fp32"
    graph: str = "fused"
    window: int = 0
    position: PositionPiece | None = None
    qk_norm: NormSpec | None = None  # an RMSNorm of each query and key head before the rotation
    qk_norm_over: str = "head"  # each head's d values, or the whole projection (H * d, KV * d: OLMo 2/3)
    logit_softcap: float = 0.0  # cap * tanh(logits / cap) after the scale, before the bias and the mask; 0: none
    sinks: bool = False  # one learned logit per query head that takes part in the softmax and attends to nothing
    scale: float = 0.0  # the logits' scale; 0: 1 / sqrt(head_dim)
    weights: WeightFormat | None = None  # how q/k/v/o are stored (``linear``); None: rounded once to ``dtype``
    # the rotated query times a factor of its position (``components.query_scale``: Ministral 3); None: none
    query_scale: QueryScaleSpec | None = None
    v_norm: NormSpec | None = None  # a weightless RMSNorm of each value head (Gemma 4)
    k_eq_v: bool = False  # the values are the key projection's output (no v_proj; Gemma 4's full layers)
    chunk: int = 0  # chunked attention's chunk (Llama 4); 0: none
    qk_weights: bool = True  # False: the q/k norm is weightless (Llama 4's L2 norm)
    # keys and values across layers (Gemma 4): "store" gives them out too, "reuse" reads another layer's (class doc)
    kv_sharing: str = ""

    def __post_init__(self) -> None:
        require_int("num_heads", self.num_heads, 1)
        require_int("num_kv_heads", self.num_kv_heads, 1)
        require_int("head_dim", self.head_dim, 1)
        if self.num_heads % self.num_kv_heads:
            raise SpecError("num_kv_heads", f"must divide num_heads ({self.num_heads}), got {self.num_kv_heads}")
        require_choice("dtype", self.dtype, tuple(DTYPES))
        require_choice("graph", self.graph, tuple(FORMS))
        form = FORMS[self.graph]
        require_int("window", self.window, 0)
        require_int("chunk", self.chunk, 0)
        if self.chunk and self.window:
            raise SpecError("chunk", f"a layer is chunked or sliding, not both (window {self.window})")
        form.check("chunk", self.chunk, "chunk")
        if not isinstance(self.qk_weights, bool):
            raise SpecError("qk_weights", f"must be True or False, got {self.qk_weights!r}")
        if self.position is not None and not isinstance(self.position, PositionPiece):
            raise SpecError("position", f"must be a kinds.PositionPiece or None, got {type(self.position).__name__}")
        if self.position is not None and self.position.rotary is not None and self.position.bias is not None:
            raise SpecError("position", "a piece either rotates (rotary) or adds a bias, not both")
        if self.qk_norm is not None:
            if not isinstance(self.qk_norm, NormSpec) or self.qk_norm.kind != "rms":
                raise SpecError("qk_norm", f"must be an RMSNorm NormSpec (kind 'rms') or None, got {self.qk_norm!r}")
            if self.qk_norm.dtype != self.dtype:
                raise SpecError("qk_norm", f"its dtype must be the layer's ({self.dtype}), got {self.qk_norm.dtype}")
        require_choice("qk_norm_over", self.qk_norm_over, QK_NORM_OVER)
        if self.v_norm is not None:
            v_norm = self.v_norm
            if not isinstance(v_norm, NormSpec) or v_norm.kind != "rms" or v_norm.dtype != self.dtype or v_norm.offset:
                raise SpecError("v_norm", f"must be an RMSNorm NormSpec (kind 'rms', offset 0: no weight) in the "
                                f"layer's dtype ({self.dtype}) or None, got {v_norm!r}")  # fmt: skip
        require_choice("kv_sharing", self.kv_sharing, ("", "store", "reuse"))
        if self.kv_sharing == "reuse" and (self.k_eq_v or self.v_norm is not None):
            raise SpecError("kv_sharing", "a layer that reuses another's keys and values computes none: no k_eq_v "
                            "or v_norm")  # fmt: skip
        if not isinstance(self.k_eq_v, bool):
            raise SpecError("k_eq_v", f"must be True or False, got {self.k_eq_v!r}")
        _require_scalar("logit_softcap", self.logit_softcap, "0: no cap")
        _require_scalar("scale", self.scale, "0: 1 / sqrt(head_dim)")
        if not isinstance(self.sinks, bool):
            raise SpecError("sinks", f"must be True or False, got {self.sinks!r}")
        form.check("softcap", self.logit_softcap, "logit_softcap")
        if self.weights is not None:
            if not isinstance(self.weights, WeightFormat) or self.weights.dtype != self.dtype:
                raise SpecError("weights", f"must be a linear.WeightFormat in the layer's dtype ({self.dtype}) or "
                                f"None, got {self.weights!r}")  # fmt: skip
            form.check("int4", self.weights.quantized, "weights")
        form.check("sinks", self.sinks, "sinks")
        if self.query_scale is not None:
            if not isinstance(self.query_scale, QueryScaleSpec) or self.query_scale.dtype != self.dtype:
                raise SpecError("query_scale", f"must be a query_scale.QueryScaleSpec in the layer's dtype "
                                f"({self.dtype}) or None, got {self.query_scale!r}")  # fmt: skip

    @property
    def weight_format(self) -> WeightFormat:
        """How the projections are stored: ``weights``, or rounded once to the dtype."""
        return self.weights if self.weights is not None else WeightFormat(self.dtype)


def _require_scalar(name: str, value: Any, zero: str) -> None:
    """A finite number >= 0 (0 meaning the default, said in ``zero``); else SpecError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise SpecError(name, f"must be a finite number >= 0 ({zero}), got {value!r}")


def check_weights(spec: AttentionSpec, weights: Mapping[str, Any]) -> None:
    """SpecError naming the field when ``weights`` lacks what the spec's variants read, holds one of the wrong length,
    or holds a variant's weight the spec does not ask for (a checkpoint's q_norm read by a spec without ``qk_norm``
    would be silently ignored otherwise).
    """  # noqa: D205
    wide = spec.qk_norm_over == "projection"  # one weight over the whole projection: heads x head_dim
    q_width, k_width = (spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim) if wide else (
        spec.head_dim, spec.head_dim)
    weighted = spec.qk_norm is not None and spec.qk_weights  # Llama 4's L2 norm has no weight
    wanted = {"q_norm": ("qk_norm", q_width, weighted),
              "k_norm": ("qk_norm", k_width, weighted and spec.kv_sharing != "reuse"),
              "sinks": ("sinks", spec.num_heads, spec.sinks)}  # fmt: skip
    if spec.k_eq_v and ("v_proj" in weights or "v_bias" in weights):  # it would go unread
        raise SpecError("k_eq_v", "the values are the key projection's: the weights must hold no v_proj or v_bias")
    if spec.kv_sharing == "reuse":  # another layer's keys and values: its projections would go unread
        held = next((n for n in ("k_proj", "v_proj", "k_bias", "v_bias") if n in weights), None)
        if held is not None:
            raise SpecError("kv_sharing", f"the layer reuses another's keys and values: the weights must hold no "
                            f"{held}")  # fmt: skip
    for name, (field, length, asked) in wanted.items():
        if not asked:
            if name in weights:
                raise SpecError(field, f"the weights hold {name!r} but the spec does not ask for it; set {field}")
            continue
        if name not in weights:
            raise SpecError(field, f"needs the weight {name!r} [{length}], which the weights do not hold")
        shape = tuple(getattr(weights[name], "shape", ()))
        if shape != (length,):
            raise SpecError(field, f"the weight {name!r} must have shape ({length},), got {shape}")
