"""A decoder's layers as components: the component specs each layer is built from, and the position pieces.

The architecture row (``decoder.architectures``) and the spec name the components: ``norm`` (the row's RMSNorm or
LayerNorm at the spec's eps), ``mlp`` (gated or plain, the spec's activation; or ``moe``, a mixture of experts),
``linear`` (the weight format) and, per layer, ``attention`` (the model's geometry, the layer's own window and position
piece: ``spec.layers``). ``decoder.export`` composes their graphs over the layers; ``decoder.oracle`` composes their
float64 twins the same way. A layer's position piece is its encoding's family piece (``kinds.PositionPiece``: graph and
float64 twin), built once per distinct position spec and shared by every layer that has that spec (its tables are stored
once).
"""

from __future__ import annotations

from collections.abc import Sequence

from ropeexport.catalog import kind_for
from ropeexport.components.attention import AttentionSpec
from ropeexport.components.linear import WeightFormat
from ropeexport.components.mlp import MLPSpec
from ropeexport.components.moe import MoESpec
from ropeexport.components.norm import NormSpec
from ropeexport.decoder.checkpoint import geometry
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.kinds import PositionPiece

Pieces = Sequence[PositionPiece | None]  # per layer its position piece, None: the layer has no positional encoding


def weight_format(spec: DecoderSpec) -> WeightFormat:
    """How the decoder's projections (attention q/k/v/o, the MLP's, lm_head: a tied one in int4 only, ``head_name``)
    are stored: rounded once to its dtype, or int4 (MatMulNBits) with its scales in the dtype. lm_head is quantized
    with the rest, as onnxruntime-genai's builder does by default (``-p int4``); the embedding stays in the dtype,
    or, tied, is gathered from the int4 head's bytes (``DecoderSpec.tied_embedding_int4``, ``linear.gather``).
    """  # noqa: D205
    if spec.weight_format == "int4":
        return WeightFormat.int4(spec.dtype, spec.block_size, spec.accuracy_level, spec.symmetric)
    return WeightFormat(spec.dtype)


def head_name(spec: DecoderSpec) -> str:
    """The weight the output head reads: ``lm_head`` [hidden, vocab] (its own, or a tied one stored in int4:
    ``DecoderSpec.tied_head_int4``), or ``embed`` [vocab, hidden], read transposed in the dtype.
    """  # noqa: D205
    return "embed" if spec.tie_embeddings and not spec.tied_head_int4 else "lm_head"


def norm_spec(spec: DecoderSpec) -> NormSpec:
    """Every norm of the decoder (embedding, layers, final): the architecture's kind at the spec's eps."""
    arch = spec.architecture
    return NormSpec(arch.norm, spec.norm_eps, spec.dtype, offset=arch.norm_offset, wide=arch.norm_wide)


def mlp_spec(spec: DecoderSpec) -> MLPSpec | MoESpec:
    """Every layer's MLP: the architecture's kind with the spec's activation and inner width; a mixture of experts
    (``moe`` rows) with the spec's experts, computed by ONNX Runtime's MoE kernel in the gqa form (its contrib form).
    """  # noqa: D205
    if spec.architecture.mlp == "moe":
        kernel = "contrib" if spec.graph == "gqa" else "portable"
        return MoESpec(spec.num_experts, spec.experts_per_token, spec.intermediate_size, spec.swiglu_alpha,
                       spec.swiglu_limit, spec.dtype, kernel)  # fmt: skip
    return MLPSpec(spec.architecture.mlp, spec.act, spec.intermediate_size, spec.dtype)


def attention_spec(spec: DecoderSpec, i: int, piece: PositionPiece | None) -> AttentionSpec:
    """Layer i's attention: the model's geometry, the layer's window, ``piece`` (its position piece, or None)."""
    H, KV, d = geometry(spec, i)
    arch = spec.architecture
    qk_norm = NormSpec("rms", spec.norm_eps, spec.dtype, offset=arch.norm_offset) if arch.qk_norm else None
    return AttentionSpec(num_heads=H, num_kv_heads=KV, head_dim=d, dtype=spec.dtype, graph=spec.graph,
                         window=spec.layer(i).window, position=piece, qk_norm=qk_norm, scale=spec.attn_scale,
                         logit_softcap=spec.attn_softcap, sinks=arch.sinks, weights=weight_format(spec))  # fmt: skip


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
            piece = kind_for(position).piece_of(position)
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
