"""A decoder's layers as components: the component specs each layer is built from, and the position pieces.

Each ``LayerSpec`` (``ropeexport.architectures.layers``) names its components; this turns them into the specs the
graph builders and their float64 twins take, in the decoder's dtype and graph form: ``norm`` (the architecture's norm
at the spec's eps), ``mlp`` (gated or plain) or ``moe`` (a mixture of experts), ``linear`` (the weight format) and
``attention`` (the layer's geometry, mask, variants and position piece). ``decoder.export`` composes their graphs over
the layers; ``decoder.oracle`` composes their float64 twins the same way. A layer's position piece is its encoding's
family piece (``kinds.PositionPiece``: graph and float64 twin), built once per distinct position spec and shared by
every layer that has that spec (its tables are stored once).
"""

from __future__ import annotations

from collections.abc import Sequence

from ropeexport.architectures.base import NORMS
from ropeexport.architectures.feedforward import GROUPED_ROUTERS
from ropeexport.architectures.sharing import sharing_modes
from ropeexport.catalog import recipe_for
from ropeexport.components import qmoe
from ropeexport.components.attention import AttentionSpec
from ropeexport.components.gemma4_moe import Gemma4MoESpec
from ropeexport.components.grouped_moe import GroupedRouter, SharedMoESpec
from ropeexport.components.latent import LatentSpec
from ropeexport.components.latent.indexer import IndexerSpec
from ropeexport.components.linear import WeightFormat
from ropeexport.components.mlp import MLPSpec
from ropeexport.components.moe import MoESpec
from ropeexport.components.norm import NormSpec
from ropeexport.components.query_scale import LearnedScaleSpec, QueryScaleSpec
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.forms import FORMS
from ropeexport.recipes import PositionPiece

Pieces = Sequence[PositionPiece | None]  # per layer its position piece, None: the layer has no positional encoding


def weight_format(spec: DecoderSpec) -> WeightFormat:
    """How the decoder's projections (attention q/k/v/o, the MLP's, lm_head: a tied one in int4 only, ``head_name``)
    are stored: rounded once to its dtype, or int4 (MatMulNBits) with its scales in the dtype. lm_head is quantized
    with the rest, as onnxruntime-genai's builder does by default (``-p int4``); the embedding stays in the dtype,
    or, tied, is gathered from the int4 head's bytes (``Storage.tied_embedding_int4``, ``linear.gather``).
    """  # noqa: D205
    return spec.weight_format()


def head_name(spec: DecoderSpec) -> str:
    """The weight the output head reads: ``lm_head`` [hidden, vocab] (its own, or a tied one stored in int4:
    ``Storage.tied_head_int4``), or ``embed`` [vocab, hidden], read transposed in the dtype.
    """  # noqa: D205
    return "embed" if spec.tie_embeddings and not spec.storage.tied_head_int4 else "lm_head"


def norm_spec(spec: DecoderSpec) -> NormSpec:
    """Every norm of the decoder (embedding, layers, final): the architecture's kind at the spec's eps."""
    kind, offset, wide = NORMS[spec.architecture.norm]
    return NormSpec(kind, spec.norm_eps, spec.dtype, offset=offset, wide=wide)


def mlp_spec(spec: DecoderSpec, i: int) -> MLPSpec | MoESpec | SharedMoESpec | Gemma4MoESpec:
    """Layer i's feed-forward: gated or plain with its activation and inner width; a mixture of experts computed by
    ONNX Runtime's MoE kernel in the gqa form (its contrib form; int4: QMoE where ``qmoe.fits``, ``components.qmoe``),
    by ONNX ops elsewhere (int4: one MatMulNBits per expert, ``linear``); DeepSeek's grouped router
    with its shared experts (``SharedMoESpec``), by ONNX ops in every form (int4 experts in QMoE: ``in_qmoe``);
    Gemma 4's mixture beside its MLP (``Gemma4MoESpec``), by ONNX ops in every form (int4: a MatMulNBits per expert).
    """  # noqa: D205
    ffn = spec.layers[i].ffn
    if ffn.router == "gemma4":
        return Gemma4MoESpec(ffn.experts, ffn.top_k, ffn.inner, ffn.shared * ffn.inner, spec.hidden_size, ffn.act,
                             norm_spec(spec), spec.dtype)  # fmt: skip
    if ffn.router in GROUPED_ROUTERS:  # DeepSeek's: its own graph (every form: ONNX Runtime's MoE has no shared expert)
        router = GroupedRouter.of(ffn.router, ffn.experts, ffn.top_k, ffn.groups, ffn.topk_group, ffn.norm_topk_prob,
                                  ffn.scaling)  # fmt: skip
        return SharedMoESpec(router, ffn.inner, ffn.shared * ffn.inner, spec.dtype)
    if ffn.kind == "moe":
        kernel = FORMS[spec.graph].moe_kernel
        stores = weight_format(spec)  # in int4: QMoE where it holds the widths, else a MatMulNBits per expert
        if stores.quantized and not qmoe.fits(spec.hidden_size, ffn.inner, stores.block_size):
            kernel = "portable"
        shared = ffn.inner * ffn.shared if ffn.router == "topk_sigmoid" else 0  # Llama 4's shared expert
        return MoESpec(ffn.experts, ffn.top_k, ffn.inner, ffn.swiglu_alpha, ffn.swiglu_limit, spec.dtype, kernel,
                       router=ffn.router, expert=ffn.expert, act=ffn.act, bias=ffn.moe_bias, shared=shared,
                       int4=stores.quantized)  # fmt: skip
    return MLPSpec(ffn.kind, ffn.act, ffn.inner, spec.dtype)


def in_qmoe(spec: DecoderSpec, i: int) -> bool:
    """Whether layer i's experts are ONNX Runtime's QMoE (``components.qmoe``): int4, the gqa form, a block dividing
    both widths (``qmoe.fits``), and a router QMoE weighs as the model does (``MoESpec.contrib``; DeepSeek's grouped
    one through ``router_weights``, ``components.grouped_qmoe``). Else each expert is a MatMulNBits (``linear``).
    """  # noqa: D205
    of, stores = mlp_spec(spec, i), weight_format(spec)
    if isinstance(of, MoESpec):
        return of.contrib and stores.quantized
    fits = isinstance(of, SharedMoESpec) and qmoe.fits(spec.hidden_size, of.inner, stores.block_size or 1)
    return fits and stores.quantized and FORMS[spec.graph].moe_kernel == "contrib"


def attention_spec(spec: DecoderSpec, i: int, piece: PositionPiece | None) -> AttentionSpec:
    """Layer i's attention: its geometry, window and variants, ``piece`` (its position piece, or None)."""
    a = spec.layers[i].attention
    _, offset, wide = NORMS[spec.architecture.norm]  # the model's RMSNorm (OLMo 3's times the weight in float32)
    # Llama 4's L2 norm: the RMSNorm at the model's eps without a weight (Llama4TextL2Norm(rms_norm_eps)), offset 0
    # whatever the model's norm: Gemma's 1 + weight over its ones would double every query and key
    l2 = a.qk_norm == "l2"
    qk_norm = NormSpec("rms", spec.norm_eps, spec.dtype, offset=0.0 if l2 else offset, wide=wide) if a.qk_norm else None
    described = spec.layers[i].query_scale  # its table reaches the model's context length
    scaled = None if described is None else QueryScaleSpec.of(described, spec.position_spec().max_positions, spec.dtype)
    # Gemma 4's weightless value norm: normed in float32, cast (its with_scale=False), whatever the model's norm kind
    v_norm = NormSpec("rms", spec.norm_eps, spec.dtype, wide=True) if a.v_norm else None
    return AttentionSpec(num_heads=a.num_heads, num_kv_heads=a.num_kv_heads, head_dim=a.head_dim,
                         dtype=spec.dtype, graph=spec.graph, window=spec.layers[i].window, position=piece,
                         qk_norm=qk_norm, qk_norm_over=a.qk_norm_over, scale=a.scale, logit_softcap=a.softcap,
                         sinks=a.sinks, weights=weight_format(spec), query_scale=scaled, v_norm=v_norm,
                         k_eq_v=a.k_eq_v, chunk=spec.layers[i].chunk, qk_weights=not l2,
                         kv_sharing=sharing_modes(spec.layers)[i])  # fmt: skip


def index_piece(spec: DecoderSpec, i: int) -> PositionPiece | None:
    """Layer i's indexer rotation (DeepSeek Sparse Attention): the layer's RoPE with the indexer's pair layout
    (``index_layout``) over its ``index_n_heads`` query heads and one key, or None (no indexer of its own, or no
    positional encoding). Same frequencies, schedule and range as the attention's rotation (transformers hands both
    the one ``position_embeddings``).
    """  # noqa: D205
    a, position = spec.layers[i].attention, spec.layer_position_spec(i)
    if not a.index_topk or a.index_shared or position is None:
        return None
    own = position.replace(name="", layout=a.index_layout, num_heads=a.index_n_heads, num_kv_heads=1)
    return recipe_for(own).piece_of(own)


def index_pieces(spec: DecoderSpec) -> list[PositionPiece | None]:
    """Per layer its indexer rotation (``index_piece``); one piece object per distinct spec, as ``position_pieces``."""
    built: list[tuple[object, PositionPiece]] = []
    out: list[PositionPiece | None] = []
    for i in range(spec.num_layers):
        a, position = spec.layers[i].attention, spec.layer_position_spec(i)
        key = None if position is None else (position, a.index_layout, a.index_n_heads)
        piece = next((p for k, p in built if k == key), None)
        if piece is None and key is not None and a.index_topk and not a.index_shared:
            piece = index_piece(spec, i)
            if piece is not None:
                built.append((key, piece))
        out.append(piece if a.index_topk and not a.index_shared else None)
    return out


def indexer_spec(spec: DecoderSpec, i: int, piece: PositionPiece | None) -> IndexerSpec | None:
    """Layer i's indexer (``components.latent.indexer``) with its rotation ``piece`` (``index_piece``), or None."""
    a = spec.layers[i].attention
    if not a.index_topk:
        return None
    # no query LoRA (Mistral Large 4): the query over LayerNorm(x), times its per-head log scale; rope_dim the
    # config's qk_rope_head_dim on a NoPE layer too (its piece None: nothing rotated)
    hidden = not a.q_lora_rank and not a.index_shared
    return IndexerSpec(num_heads=a.index_n_heads or 1, head_dim=a.index_head_dim or a.head_dim, rope_dim=a.head_dim,
                       topk=a.index_topk, query="hidden" if hidden else "lora", log_scale=hidden, position=piece,
                       shared=a.index_shared)  # fmt: skip


def latent_spec(spec: DecoderSpec, i: int, piece: PositionPiece | None, graph: str | None = None,
                cache: str | None = None, index: PositionPiece | None = None) -> LatentSpec:  # fmt: skip
    """Layer i's latent attention (``components.latent``) over the decoder's cache (``DecoderSpec.cache``) in its
    form, or over the expanded cache in ``graph`` (the float64 recompute's: unpadded, any form but gqa; the twin of
    the absorbed latent graph is the plain attention it rewrites; ``cache`` ``latent``: over the latent cache, the
    graft proof's random latent entries expanded by the twin as the model expands them): its widths, the logit scale
    (YaRN's mscale squared in it), ``piece`` rotating the rope slice. The LoRA norms are RMSNorms at the
    architecture's ``latent_norm_eps``: 1e-6 whatever the config's rms_norm_eps for DeepSeek V3 (transformers'
    ``DeepseekV3RMSNorm(q_lora_rank)`` and ``(kv_lora_rank)``), the model's for Mistral Large 4.
    ``index``: the indexer's rotation (``index_pieces``; built here when the layer has an indexer and none is given).
    """  # noqa: D205
    a, layer = spec.layers[i].attention, spec.layers[i]
    if index is None and a.index_topk and not a.index_shared:
        index = index_piece(spec, i)
    # NoPE (no position, Mistral Large 4): the rope slice joins the part never rotated (``components.latent``)
    nope, rope = (a.qk_nope_head_dim, a.head_dim) if layer.position is not None else (
        a.qk_nope_head_dim + a.head_dim, 0)  # fmt: skip
    described = layer.query_scale  # Mistral 4's or Mistral Large 4's; its table reaches the context length
    positions = spec.position_spec().max_positions
    scaled = None if described is None else LearnedScaleSpec(positions, spec.dtype) if described.get("kind") == (
        "learned_log") else QueryScaleSpec.of(described, positions, spec.dtype)  # fmt: skip
    eps = spec.architecture.latent_norm_eps or spec.norm_eps
    return LatentSpec(num_heads=a.num_heads, kv_lora_rank=a.kv_lora_rank, qk_nope_head_dim=nope,
                      qk_rope_head_dim=rope, v_head_dim=a.v_head_dim, norm=NormSpec("rms", eps, spec.dtype),
                      kv_sharing=sharing_modes(spec.layers)[i],
                      q_lora_rank=a.q_lora_rank, scale=a.scale, dtype=spec.dtype,
                      graph=spec.graph if graph is None else graph, position=piece, weights=weight_format(spec),
                      cache=cache or (spec.cache if graph is None else "expanded"), query_scale=scaled,
                      indexer=indexer_spec(spec, i, index))  # fmt: skip


def position_pieces(spec: DecoderSpec) -> list[PositionPiece | None]:
    """Per layer its encoding's piece (graph and float64 twin) or None; one piece object per distinct spec."""
    built: list[tuple[object, PositionPiece]] = []  # (block spec, its piece); specs hold dicts: no hashing
    out: list[PositionPiece | None] = []
    for i in range(spec.num_layers):
        position = spec.layer_position_spec(i)
        if position is None:
            out.append(None)
            continue
        piece = next((p for s, p in built if s == position), None)
        if piece is None:
            piece = recipe_for(position).piece_of(position)
            built.append((position, piece))
        out.append(piece)
    return out


def twins(spec: DecoderSpec, piece: PositionPiece) -> list[PositionPiece | None]:
    """``piece`` for every layer that has a positional encoding (None for the others): a uniform decoder's pieces
    from its one piece; ValueError when the layers' encodings differ (each layer then needs its own).
    """  # noqa: D205
    if len(spec.position_specs()) > 1:
        raise ValueError("the layers' positional encodings differ: give each layer its piece (position_pieces)")
    return [None if layer.position is None else piece for layer in spec.layers]
