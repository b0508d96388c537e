"""``IndexerSpec``: DeepSeek Sparse Attention's lightning indexer (DSA), a feature of a latent-attention layer.

transformers 5.23, ``models/deepseek_v32/modular_deepseek_v32.py`` (``DeepseekV32Indexer``, 174-268) and the
attention that folds it into its mask (``DeepseekV32Attention``, 271-355): per query token x [n] at position p,

- the indexer's query: ``wq_b`` over the query LoRA's normed low-rank output (``query`` "lora", the attention's
  ``q_a_layernorm(q_a_proj(x))``, 282), or Mistral Large 4's ``wq_b`` over LayerNorm(x) (``query`` "hidden",
  ``mistral_large4/modular_mistral_large4.py``: 319-321, 353-354: Large 4's attention has no query LoRA), [H, D] per
  token; Large 4's query times its learned per-head factor ``q_scale[h] * log(p + 1) + q_bias[h]``
  (``log_scale``; ``MistralLarge4TextSoftmaxScaling``, 295-308, 356);
- ONE key per token shared by the heads, k = LayerNorm(``wk`` x) [D] (eps 1e-6, weight and bias, 200-201);
- RoPE on the FIRST ``rope_dim`` dims of q and k (q_rot, q_pass split in that order, 241-245; the latent attention
  rotates its LAST dims): half-split pairs in DeepSeek V3.2 (246-247, "NON-interleaved"), interleaved in GLM-5
  (``glm_moe_dsa/modular_glm_moe_dsa.py``: 170-171) and Large 4 (362-368), none on Large 4's NoPE layers (322);
  ``position`` is that rotation's piece, in that layout, or None;
- the keys cached per layer beside the attention's cache (``update_indexer``, 251-252): ``past_index_key``
  [b, 1, t, D];
- index[b, s, t] = sum_h w[b, s, h] relu(q[b, s, h] . k[b, t] * D ** -0.5), w = ``weights_proj`` x * H ** -0.5
  (254-260), computed in float32 whatever the model's dtype (``q.float()``; ``weights_proj`` kept in float32,
  ``_keep_in_fp32_modules``);
- masked by the attention's causal and padding mask (262-265), then the top k = min(``topk``, t) keys of each
  query row kept (267-268): only they are visible to the attention (the selection scattered into its mask,
  319-331). Up to ``topk`` keys a query sees them all: DSA is exact-equal to dense attention there.

GLM-5's ``indexer_types`` "shared" layers reuse the previous "full" layer's selection
(``modular_glm_moe_dsa.py``: 104-122, 245-257): a layer spec says ``shared`` and runs no indexer (no weights, no
cache); the decoder hands it the selection.

Notation: b batch, s new tokens, t cached + new, n hidden, H the indexer's heads, D its head width.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ropeexport.errors import SpecError
from ropeexport.recipes import PositionPiece
from ropeexport.specs import require_choice, require_int

QUERIES = ("lora", "hidden")  # wq_b over the query LoRA's normed output (V3.2, GLM-5), or over LayerNorm(x) (Large 4)
INDEXER_NORM_EPS = 1e-6  # nn.LayerNorm(..., eps=1e-6) for k_norm and Large 4's q_input_norm, whatever the config says
# weights stored as vectors (constants rounded once to the dtype), never through the projections' weight format
VECTORS = ("k_norm", "k_norm_bias", "q_norm", "q_norm_bias", "q_scale", "q_bias")


@dataclass(frozen=True)
class IndexerSpec:
    """One layer's indexer (module doc). ``num_heads`` / ``head_dim``: the config's ``index_n_heads`` /
    ``index_head_dim``; ``rope_dim``: ``qk_rope_head_dim`` (the rotated first dims; <= head_dim); ``topk``:
    ``index_topk``; ``query``: ``QUERIES``; ``log_scale``: Large 4's learned per-head query factor; ``position``:
    the rotation's piece over query [b, H, s, rope_dim] and key [b, 1, s, rope_dim] in the indexer's layout, or None
    (no rotation); ``shared``: a layer that reuses the previous full layer's selection (GLM-5's "shared").
    """  # noqa: D205

    num_heads: int
    head_dim: int
    rope_dim: int
    topk: int
    query: str = "lora"
    log_scale: bool = False
    position: PositionPiece | None = None
    shared: bool = False

    def __post_init__(self) -> None:
        require_int("index_topk", self.topk, 1, 2**31 - 1)
        if self.shared:
            return  # it runs no indexer: the widths are the full layer's
        require_int("index_n_heads", self.num_heads, 1, 4096)
        require_int("index_head_dim", self.head_dim, 1, 65536)
        require_int("qk_rope_head_dim", self.rope_dim, 2, 65536)
        if self.rope_dim > self.head_dim:
            raise SpecError("index_head_dim", f"must be at least qk_rope_head_dim ({self.rope_dim}): the indexer "
                            f"rotates its first qk_rope_head_dim dims, got {self.head_dim}")  # fmt: skip
        require_choice("index_query", self.query, QUERIES)
        if not isinstance(self.log_scale, bool):
            raise SpecError("index_log_scale", f"must be True or False, got {self.log_scale!r}")
        if self.position is not None and (not isinstance(self.position, PositionPiece) or self.position.rotary is None):
            raise SpecError("position", "the indexer's must be a RoPE PositionPiece (a rotary graph) or None")

    def shapes(self, hidden: int, q_lora_rank: int) -> dict[str, tuple[int, ...]]:
        """Every indexer weight's shape by canonical name (projections [in, out]); a shared layer has none.

        ``q_lora_rank``: the attention's (the ``lora`` query's input width).
        """
        if self.shared:
            return {}
        H, D = self.num_heads, self.head_dim
        source = hidden if self.query == "hidden" else q_lora_rank
        out: dict[str, tuple[int, ...]] = {"wq_b": (source, H * D), "wk": (hidden, D), "k_norm": (D,),
                                           "k_norm_bias": (D,), "weights_proj": (hidden, H)}  # fmt: skip
        if self.query == "hidden":
            out |= {"q_norm": (hidden,), "q_norm_bias": (hidden,)}
        if self.log_scale:
            out |= {"q_scale": (H,), "q_bias": (H,)}
        return out

    def cache_shape(self) -> tuple[int | str, ...]:
        """The indexer's key cache [b, 1, past, D] (``b`` and ``past`` symbolic); a shared layer caches none."""
        return () if self.shared else ("batch", 1, "past", self.head_dim)


def indexer_weights(weights: Mapping[str, Any]) -> dict[str, Any]:
    """The indexer's weights out of a layer's (``indexer.`` names, the prefix dropped)."""
    return {name.removeprefix("indexer."): w for name, w in weights.items() if name.startswith("indexer.")}
