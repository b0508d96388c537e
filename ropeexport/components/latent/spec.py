"""``LatentSpec``: what one latent-attention (MLA) layer computes, typed and validated on construction.

DeepSeek-V2 (arXiv:2405.04434, section 2.1) and transformers 5.23's ``DeepseekV3Attention``: per token x [n],

- the query: ``q_proj`` x, or with a query LoRA (``q_lora_rank`` > 0) ``q_b_proj`` RMSNorm(``q_a_proj`` x)
  (norm weight ``q_a_norm``), [H, nope + rope] per token, split into q_nope [nope] and q_rope [rope] per head;
- ``kv_a_proj`` x = [c, k_rope]: the latent c [kv_lora_rank], RMS-normalized (``kv_a_norm``), and ONE key slice
  k_rope [rope] shared by every head;
- q_rope and k_rope rotated by the position piece (RoPE on the ``qk_rope_head_dim`` slice only; the nope dims are
  never rotated), interleaved pairs (2i, 2i + 1) when the config's ``rope_interleave`` says so (the piece's layout);
- ``kv_b_proj`` c = [k_nope, v] per head ([H, nope + v]); the key of head h is [k_nope_h, k_rope];
- with a ``query_scale`` (Mistral 4, transformers 5.23 ``Mistral4Attention.forward``, modular_mistral4.py:145-149)
  the whole query [q_nope, rotated q_rope] times the factor of its position (``components.query_scale``);
- logits q . k * scale (``softmax_scale``: (nope + rope) ** -0.5 times YaRN's mscale(factor, mscale_all_dim)
  squared), causal over the cache, softmax, times v, ``o_proj`` [H v, n].

Mistral Large 4 adds two things (``architectures.mistral_large4_text``): a NoPE layer (``position`` None,
``qk_rope_head_dim`` 0: ``kv_a_proj`` x = c alone, every key width from ``kv_b_proj``, nothing rotated) and a learned
query scale (a ``query_scale.LearnedScaleSpec``): the whole query [q_nope, q_rope] of head h at position p times
``q_scale[h] * log(p + 1) + q_scale_bias[h]`` (transformers' ``MistralLarge4TextSoftmaxScaling``, following
``position_ids`` as the rotation does). Its latent caches are shared across layers (``kv_sharing``): a ``reuse``
layer has no ``kv_a_proj`` / ``kv_a_norm`` and no cache; it reads ``shared_latent`` [b, 1, t, r] and the rotated
``shared_rope_key`` [b, 1, t, rope] another layer cached (its cache and its new tokens) and expands them through its
own ``kv_b_proj`` (built over the latent cache only: the expanded cache holds the source's keys as its own
``kv_b_proj`` made them).

Two caches (``CACHES``): ``expanded`` stores the rebuilt keys [b, H, t, nope + rope] and values [b, H, t, v] (plain
attention, any runtime); ``latent`` stores c [b, 1, t, kv_lora_rank] and the rotated k_rope [b, 1, t, rope] and
absorbs ``kv_b_proj`` into the query and the output (what a serving engine caches: ``cache_bytes_per_token``).

Notation: b batch, s new tokens, t cached + new, n hidden, H heads, nope / rope / v the head widths, r the rank.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ropeexport.components.latent.indexer import IndexerSpec
from ropeexport.components.linear import WeightFormat
from ropeexport.components.norm import NormSpec
from ropeexport.components.query_scale import LearnedScaleSpec, QueryScaleSpec
from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.forms import FORMS
from ropeexport.recipes import PositionPiece
from ropeexport.specs import require_choice, require_int

CACHES = ("expanded", "latent")
# the forms built: those that build a latent cache (``forms.Form.latent_caches``), sorted as messages have listed them
GRAPHS = tuple(sorted(name for name, f in FORMS.items() if f.latent_caches))


def softmax_scale(qk_head_dim: int, rope_parameters: Mapping[str, Any]) -> float:
    """The logits' scale as transformers 5.23 applies it (``yarn_apply_mscale`` in ``modeling_deepseek_v3``).

    qk_head_dim ** -0.5, times mscale(factor, mscale_all_dim) ** 2 when the rope type is not ``default`` and
    ``mscale_all_dim`` is nonzero, with mscale(s, m) = 1 for s <= 1 else 0.1 m ln(s) + 1. The cos/sin tables carry
    YaRN's own attention factor (mscale / mscale_all_dim's ratio, the rope family's yarn schedule): the two are
    separate, and DeepSeek V3's mscale = mscale_all_dim makes the table's factor exactly 1.
    """
    scale = qk_head_dim**-0.5
    # a 4.x config says "type" (DeepSeek V3 and V2-Lite as released); transformers reads it as rope_type
    if rope_parameters.get("rope_type", rope_parameters.get("type", "default")) != "default":
        all_dim = rope_parameters.get("mscale_all_dim", 0) or 0
        if all_dim:
            factor = float(rope_parameters["factor"])
            m = 1.0 if factor <= 1 else 0.1 * float(all_dim) * math.log(factor) + 1.0
            scale = scale * m * m
    return float(scale)


@dataclass(frozen=True)
class LatentSpec:
    """One latent-attention layer over a cache (module doc). ``q_lora_rank`` 0: a plain ``q_proj``. ``scale`` 0:
    (nope + rope) ** -0.5 (give ``softmax_scale``'s value for YaRN). ``norm``: the LoRA norms' RMSNorm (its eps and
    dtype). ``position``: the RoPE piece over query [b, H, s, rope] and key [b, 1, s, rope], or None (no rotation).
    ``graph``: ``decomposed`` (opset-17 primitives, either cache), ``fused`` (opset-23 Attention) or ``gqa``
    (GroupQueryAttention, values padded to the key's width), the expanded cache; tensorrt and static-cache are not
    built (refused by name). ``query_scale``: the query times a factor of its position alone (a ``QueryScaleSpec``:
    Mistral 4's), or of each head and position learned (a ``LearnedScaleSpec``: Mistral Large 4's, its weights
    ``q_scale`` and ``q_scale_bias``), or None (module doc; both ``components.query_scale``). ``qk_rope_head_dim`` 0
    only without a ``position`` (a NoPE layer).
    """  # noqa: D205

    num_heads: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    norm: NormSpec
    q_lora_rank: int = 0
    scale: float = 0.0
    dtype: str = "fp32"
    cache: str = "expanded"
    graph: str = "decomposed"
    position: PositionPiece | None = None
    weights: WeightFormat | None = None
    kv_sharing: str = ""  # "", "store" (another layer reads its latent) or "reuse" (module doc)
    query_scale: QueryScaleSpec | LearnedScaleSpec | None = None
    indexer: IndexerSpec | None = None

    def __post_init__(self) -> None:
        require_int("num_heads", self.num_heads, 1, 4096)
        require_int("kv_lora_rank", self.kv_lora_rank, 1, 2**16)
        require_int("qk_nope_head_dim", self.qk_nope_head_dim, 0, 65536)
        require_int("qk_rope_head_dim", self.qk_rope_head_dim, 0 if self.position is None else 2, 65536)
        if self.qk_rope_head_dim % 2:
            raise SpecError("qk_rope_head_dim", f"must be even (RoPE rotates pairs), got {self.qk_rope_head_dim}")
        require_int("v_head_dim", self.v_head_dim, 1, 65536)
        require_int("q_lora_rank", self.q_lora_rank, 0, 2**16)
        if not isinstance(self.norm, NormSpec) or self.norm.kind != "rms" or self.norm.dtype != self.dtype:
            raise SpecError(
                "norm", f"must be an RMSNorm NormSpec in the layer's dtype ({self.dtype}), got {self.norm!r}"
            )
        if isinstance(self.scale, bool) or not isinstance(self.scale, (int, float)) or not 0 <= self.scale < math.inf:
            raise SpecError(
                "attn_scale", f"must be a finite number >= 0 (0: (nope + rope) ** -0.5), got {self.scale!r}"
            )
        require_choice("dtype", self.dtype, tuple(DTYPES))
        require_choice("latent_cache", self.cache, CACHES)
        require_choice("kv_sharing", self.kv_sharing, ("", "store", "reuse"))
        require_choice("graph", self.graph, GRAPHS)
        multiple = FORMS[self.graph].head_multiple  # gqa, ORT 1.31 CPU: "head_size must be a multiple of 8"
        if self.qk_head_dim % multiple:
            raise SpecError("graph", f"the {self.graph} form needs nope + rope a multiple of {multiple} "
                            f"(GroupQueryAttention's head size), got {self.qk_head_dim}")  # fmt: skip
        if self.position is not None and (not isinstance(self.position, PositionPiece) or self.position.rotary is None):
            raise SpecError("position", "must be a RoPE PositionPiece (a rotary graph) or None")
        if self.weights is not None and (
            not isinstance(self.weights, WeightFormat) or self.weights.dtype != self.dtype
        ):
            raise SpecError("weights", f"must be a linear.WeightFormat in the layer's dtype ({self.dtype}) or None")
        if self.query_scale is not None and (
            not isinstance(self.query_scale, (QueryScaleSpec, LearnedScaleSpec)) or self.query_scale.dtype != self.dtype
        ):
            raise SpecError("query_scale", f"must be a query_scale.QueryScaleSpec or LearnedScaleSpec in the layer's "
                            f"dtype ({self.dtype}) or None, got {self.query_scale!r}")  # fmt: skip
        if self.indexer is not None:
            if not isinstance(self.indexer, IndexerSpec):
                raise SpecError("indexer", f"must be an IndexerSpec or None, got {self.indexer!r}")
            if self.indexer.query == "lora" and not self.indexer.shared and not self.q_lora_rank:
                raise SpecError("index_query", "'lora' reads the query LoRA's normed output: the layer needs "
                                "q_lora_rank > 0 (or the 'hidden' query, Mistral Large 4's)")  # fmt: skip
            if FORMS[self.graph].one_head_size:
                raise SpecError("graph", f"the {self.graph} form is not built with the indexer: GroupQueryAttention "
                                "takes no mask beyond causal and the sequence lengths, so the selection cannot "
                                "narrow it (the decomposed and fused forms can)")  # fmt: skip

    @property
    def qk_head_dim(self) -> int:
        """Each head's query / key width: nope + rope."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def logit_scale(self) -> float:
        """The logits' scale: ``scale``, or (nope + rope) ** -0.5."""
        return float(self.scale) if self.scale else self.qk_head_dim**-0.5

    @property
    def weight_format(self) -> WeightFormat:
        """How the projections are stored: ``weights``, or rounded once to the dtype."""
        return self.weights if self.weights is not None else WeightFormat(self.dtype)

    def shapes(self, hidden: int) -> dict[str, tuple[int, ...]]:
        """Every weight's shape by canonical name for a model of width ``hidden`` (projections [in, out])."""
        H, r, qk = self.num_heads, self.kv_lora_rank, self.qk_head_dim
        out: dict[str, tuple[int, ...]] = {"kv_a_proj": (hidden, r + self.qk_rope_head_dim), "kv_a_norm": (r,),
                                           "kv_b_proj": (r, H * (self.qk_nope_head_dim + self.v_head_dim)),
                                           "o_proj": (H * self.v_head_dim, hidden)}  # fmt: skip
        if self.kv_sharing == "reuse":  # the latent is another layer's
            del out["kv_a_proj"], out["kv_a_norm"]
        if self.q_lora_rank:
            out |= {"q_a_proj": (hidden, self.q_lora_rank), "q_a_norm": (self.q_lora_rank,),
                    "q_b_proj": (self.q_lora_rank, H * qk)}  # fmt: skip
        else:
            out["q_proj"] = (hidden, H * qk)
        if isinstance(self.query_scale, LearnedScaleSpec):
            out |= {"q_scale": (H,), "q_scale_bias": (H,)}
        if self.indexer is not None:
            out |= {f"indexer.{n}": shape for n, shape in self.indexer.shapes(hidden, self.q_lora_rank).items()}
        return out

    def cache_shapes(self) -> dict[str, tuple[int | str, ...]]:
        """The cache inputs by name, [b, heads, past, width] (``b`` and ``past`` symbolic); an indexer's key cache
        ``past_index_key`` [b, 1, past, index_head_dim] last, in either cache (a shared indexer layer has none).
        """  # noqa: D205
        index = {} if self.indexer is None or self.indexer.shared else {"past_index_key": self.indexer.cache_shape()}
        if self.cache == "latent":
            return {"past_latent": ("batch", 1, "past", self.kv_lora_rank),
                    "past_rope_key": ("batch", 1, "past", self.qk_rope_head_dim), **index}  # fmt: skip
        value = self.qk_head_dim if FORMS[self.graph].one_head_size else self.v_head_dim  # values padded to the key's
        return {"past_key": ("batch", self.num_heads, "past", self.qk_head_dim),
                "past_value": ("batch", self.num_heads, "past", value), **index}  # fmt: skip

    def cache_bytes_per_token(self) -> int:
        """Bytes one token adds to this layer's cache in the dtype (both caches: ``cache_shapes``' last two axes)."""
        width = sum(int(s[1]) * int(s[3]) for s in self.cache_shapes().values())
        return width * DTYPES[self.dtype].np_dtype(0).itemsize


def check_weights(spec: LatentSpec, weights: Mapping[str, Any]) -> int:
    """The model width the weights say; SpecError naming the weight when one is missing, extra or misshapen."""
    if "o_proj" not in weights:
        raise SpecError("weights", "latent attention needs 'o_proj', which the weights do not hold")
    hidden = int(weights["o_proj"].shape[-1])
    wanted = spec.shapes(hidden)
    for name, shape in wanted.items():
        if name not in weights:
            raise SpecError("weights", f"latent attention needs {name!r} {list(shape)}, which the weights do not hold")
        got = tuple(getattr(weights[name], "shape", ()))
        if got != shape:
            raise SpecError("weights", f"the weight {name!r} must have shape {shape}, got {got}")
    extra = next((name for name in weights if name not in wanted), None)
    if extra is not None:
        raise SpecError("weights", f"latent attention does not read {extra!r} (it reads {', '.join(wanted)})")
    return hidden
