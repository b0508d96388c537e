"""A decoder's weights under canonical names (``ropeexport.architectures``): which it has, seeded draws, and views.

- ``expected(spec)``: {canonical name: shape} of every weight the spec holds, each layer its own (its geometry, its
  feed-forward, its norms).
- ``seeded_weights(spec)``: normal draws (projections std 1/sqrt(fan_in), embeddings std 1, norm weights 1 + 0.1 N,
  biases 0.1 N) from numpy's default_rng(0), rounded once to the dtype and held in float64.
- ``layer_weights(weights, i)``: layer i's weights without their prefix, read as asked for; ``vocab_part``: a slice of
  the embedding or head alone; ``lm_head``: the output projection (the embedding's transpose when tied).

A checkpoint's weights under the same names: ``decoder.checkpoint``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.architectures.feedforward import GROUPED_ROUTERS
from ropeexport.architectures.layers import LayerSpec
from ropeexport.architectures.sharing import cached_layers
from ropeexport.block.projections import rounded_float64
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.dtypes import DTYPES

SEED = 0


# A layer's attention weights: what its block takes (``block.export.build_block_graph``); the rest is norms and MLP.
BLOCK_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "q_bias", "k_bias", "v_bias", "o_bias", "q_norm", "k_norm",
               "sinks", "q_a_proj", "q_a_norm", "q_b_proj", "kv_a_proj", "kv_a_norm", "kv_b_proj", "q_scale",
               "q_scale_bias", "indexer.wq_b", "indexer.wk", "indexer.k_norm", "indexer.k_norm_bias",
               "indexer.weights_proj", "indexer.q_norm", "indexer.q_norm_bias", "indexer.q_scale",
               "indexer.q_bias")  # fmt: skip


def geometry(spec: DecoderSpec, layer: int | None = None) -> tuple[int, int, int]:
    """(query heads, key/value heads, head_dim) of layer ``layer``'s attention (the default layer's for None)."""
    return (spec.layers[layer] if layer is not None else spec.default).geometry


def cache_shapes(spec: DecoderSpec, layer: int, graph: str | None = None) -> tuple[tuple[int, int], ...]:
    """((heads, width) of layer ``layer``'s cached key, of its value[, of its indexer's keys]) in the decoder's form
    (``graph`` None) or
    ``graph`` ("": as the layer computes it, unpadded and expanded): ``LayerSpec.cache_shapes`` with the spec's
    ``cache`` (a latent layer's latent cache where ``latent_cache``), each tensor [b, heads, past, width].
    """  # noqa: D205
    form = spec.graph if graph is None else graph
    return spec.layers[layer].cache_shapes(form, spec.cache if form else "expanded")  # "": the twin's, expanded


def cache_bytes_per_token(spec: DecoderSpec) -> int:
    """The bytes one token adds to the decoder's whole cache in its dtype and form: each layer with a cache of its own
    (``architectures.sharing.cached_layers``: a layer reading another's keys and values, or latent, has none).
    """  # noqa: D205
    size = DTYPES[spec.dtype].np_dtype(0).itemsize
    # every cached tensor: keys, values and an indexer's keys (DeepSeek Sparse Attention)
    return sum(size * heads * width for i in cached_layers(spec.layers)  # a reusing layer: its indexer keys alone
               for heads, width in cache_shapes(spec, i)[0 if spec.layers[i].attention.kv_from is None else 2:])


def latent_shapes(layer: LayerSpec, hidden: int) -> dict[str, tuple[int, ...]]:
    """A latent layer's attention weights by canonical name ([in, out]; ``components.latent.LatentSpec.shapes``):
    the query (``q_proj``, or ``q_a_proj``, ``q_a_norm``, ``q_b_proj`` with a query LoRA), ``kv_a_proj``,
    ``kv_a_norm``, ``kv_b_proj``, ``o_proj``; the learned query scale's ``q_scale`` and ``q_scale_bias`` (Mistral
    Large 4); a layer with its own indexer, ``indexer.wq_b``, ``indexer.wk``, ``indexer.k_norm`` and its bias,
    ``indexer.weights_proj``. A NoPE layer (no position): the rope slice is part of the nope one, ``kv_a_proj`` r
    wide.
    """  # noqa: D205
    a = layer.attention
    H, r, nope, rope, v = a.num_heads, a.kv_lora_rank, a.qk_nope_head_dim, a.head_dim, a.v_head_dim
    out: dict[str, tuple[int, ...]] = {}
    if (layer.query_scale or {}).get("kind") == "learned_log":
        out |= {"q_scale": (H,), "q_scale_bias": (H,)}
    if layer.position is None:  # transformers' NoPE latent layer (``components.latent``: qk_rope_head_dim 0)
        nope, rope = nope + rope, 0
    if a.q_lora_rank:
        out |= {"q_a_proj": (hidden, a.q_lora_rank), "q_a_norm": (a.q_lora_rank,),
                "q_b_proj": (a.q_lora_rank, H * (nope + rope))}  # fmt: skip
    else:
        out["q_proj"] = (hidden, H * (nope + rope))
    if a.kv_from is None:  # a layer reading another's latent (Mistral Large 4's kv_source_layers) has no kv_a
        out |= {"kv_a_proj": (hidden, r + rope), "kv_a_norm": (r,)}
    out |= {"kv_b_proj": (r, H * (nope + v)), "o_proj": (H * v, hidden)}
    if a.index_topk and not a.index_shared:  # the indexer's (``components.latent.indexer``)
        D, IH = a.index_head_dim, a.index_n_heads
        out |= {"indexer.wq_b": (a.q_lora_rank or hidden, IH * D), "indexer.wk": (hidden, D), "indexer.k_norm": (D,),
                "indexer.k_norm_bias": (D,), "indexer.weights_proj": (hidden, IH)}  # fmt: skip
        if not a.q_lora_rank:  # Mistral Large 4's query over LayerNorm(x), times its per-head log scale
            out |= {"indexer.q_norm": (hidden,), "indexer.q_norm_bias": (hidden,), "indexer.q_scale": (IH,),
                    "indexer.q_bias": (IH,)}  # fmt: skip
    return out


def _layer_of(canonical: str) -> int | None:
    """The layer index of a canonical name (``layers.3.q_proj`` -> 3), None for the model's own weights."""
    if not canonical.startswith("layers."):
        return None
    return int(canonical.split(".", 2)[1])


def expected(spec: DecoderSpec) -> dict[str, tuple[int, ...]]:
    """Every canonical weight of the spec with its shape ([in, out] for projections), each layer its own."""
    arch, hidden, vocab = spec.architecture, spec.hidden_size, spec.vocab_size
    # a LayerNorm's bias where the checkpoint has one (Cohere 2's LayerNorms have none)
    layer_norm = arch.norm == "layer" and arch.has("final_norm.bias")
    out: dict[str, tuple[int, ...]] = {"embed": (vocab, hidden)}

    def norm(name: str) -> None:
        out[f"{name}.weight"] = (hidden,)
        if layer_norm:
            out[f"{name}.bias"] = (hidden,)

    if arch.has("embed_norm.weight"):
        norm("embed_norm")
    for i, layer in enumerate(spec.layers):  # each layer's own geometry, norms and feed-forward
        H, KV, d = layer.geometry
        a, ffn, inner = layer.attention, layer.ffn, layer.ffn.inner
        p = f"layers.{i}."
        if "norm1" in layer.norms:
            norm(f"{p}norm1")
        if a.kind == "latent":  # ``components.latent``'s weights (its LoRAs, norms and projections)
            out |= {f"{p}{n}": shape for n, shape in latent_shapes(layer, hidden).items()}
        else:
            out[f"{p}q_proj"] = (hidden, H * d)
            if a.kv_from is None:  # a layer reading another's keys and values has no k_proj or v_proj (Gemma 4)
                out[f"{p}k_proj"] = (hidden, KV * d)
            if not a.k_eq_v and a.kv_from is None:  # keys as values (Gemma 4's full layers): no v_proj
                out[f"{p}v_proj"] = (hidden, KV * d)
            out[f"{p}o_proj"] = (H * d, hidden)
        if a.qkv_bias:  # (never with k_eq_v: AttentionLayer refuses it)
            out |= {f"{p}q_bias": (H * d,), f"{p}k_bias": (KV * d,), f"{p}v_bias": (KV * d,)}
        if a.o_bias:
            out[f"{p}o_bias"] = (hidden,)
        if a.qk_norm == "rms":  # over each head's d, or the whole projection (OLMo 3)
            wide = a.qk_norm_over == "projection"
            out[f"{p}q_norm"] = (H * d if wide else d,)
            if a.kv_from is None:
                out[f"{p}k_norm"] = (KV * d if wide else d,)
        if a.sinks:
            out[f"{p}sinks"] = (H,)
        for slot in ("norm2", "norm3", "norm4"):
            if slot in layer.norms:
                norm(f"{p}{slot}")
        if layer.layer_scale:
            out[f"{p}layer_scalar"] = (1,)
        if ffn.router in GROUPED_ROUTERS:  # DeepSeek's: no biases, shared experts (``grouped_moe``)
            E, n, m, shared = ffn.experts, hidden, inner, ffn.shared * inner
            out |= {f"{p}router_proj": (n, E), f"{p}router_correction": (E,), f"{p}experts_gate_proj": (E, n, m),
                    f"{p}experts_up_proj": (E, n, m), f"{p}experts_down_proj": (E, m, n)}  # fmt: skip
            if ffn.router != "grouped":  # the softmax kinds add no correction bias (``grouped_moe.KINDS``)
                del out[f"{p}router_correction"]
            if shared:
                out |= {f"{p}shared_gate_proj": (n, shared), f"{p}shared_up_proj": (n, shared),
                        f"{p}shared_down_proj": (shared, n)}  # fmt: skip
            continue
        if ffn.router == "gemma4":  # the dense MLP, the router, the experts and their norms (``gemma4_moe``)
            E, n, m, dense = ffn.experts, hidden, inner, ffn.shared * inner
            out |= {f"{p}gate_proj": (n, dense), f"{p}up_proj": (n, dense), f"{p}down_proj": (dense, n),
                    f"{p}router_proj": (n, E), f"{p}router_scale": (n,), f"{p}router_expert_scale": (E,),
                    f"{p}experts_gate_proj": (E, n, m), f"{p}experts_up_proj": (E, n, m),
                    f"{p}experts_down_proj": (E, m, n)}  # fmt: skip
            for slot in ("post_mlp_norm", "pre_experts_norm", "post_experts_norm"):
                norm(f"{p}{slot}")
            continue
        if ffn.kind == "moe":
            E, n, m = ffn.experts, hidden, inner
            out |= {f"{p}router_proj": (n, E), f"{p}router_bias": (E,), f"{p}experts_gate_proj": (E, n, m),
                    f"{p}experts_up_proj": (E, n, m), f"{p}experts_down_proj": (E, m, n),
                    f"{p}experts_gate_bias": (E, m), f"{p}experts_up_bias": (E, m),
                    f"{p}experts_down_bias": (E, n)}  # fmt: skip
            if not ffn.moe_bias:  # gated experts without mlp_bias (Qwen3-MoE): no router or expert biases
                for name in ("router_bias", "experts_gate_bias", "experts_up_bias", "experts_down_bias"):
                    del out[f"{p}{name}"]
            if ffn.router == "topk_sigmoid" and ffn.shared:  # Llama 4's shared expert, as wide as an expert
                out |= {f"{p}shared_gate_proj": (n, m), f"{p}shared_up_proj": (n, m), f"{p}shared_down_proj": (m, n)}
            continue
        if ffn.kind == "gated":
            out[f"{p}gate_proj"] = (hidden, inner)
            if ffn.bias:
                out[f"{p}gate_bias"] = (inner,)
        out |= {f"{p}up_proj": (hidden, inner), f"{p}down_proj": (inner, hidden)}
        if ffn.bias:
            out |= {f"{p}up_bias": (inner,), f"{p}down_bias": (hidden,)}
    norm("final_norm")
    out |= per_layer_shapes(spec)  # Gemma 4's per-layer input embeddings ({} without them)
    if not spec.tie_embeddings:
        out["lm_head"] = (hidden, vocab)
    if arch.has("lm_head_bias"):
        out["lm_head_bias"] = (vocab,)
    return out


def per_layer_shapes(spec: DecoderSpec) -> dict[str, tuple[int, ...]]:
    """{canonical name: shape} of Gemma 4's per-layer input embeddings' weights (``decoder.per_layer``; {} without
    them): the table [per_layer_vocab, L * P], the model's projection [n, L * P] and its norm [P]; per layer the gate
    [n, P], the projection [P, n] and its norm [n].
    """  # noqa: D205
    P, L, n = spec.per_layer_input, spec.num_layers, spec.hidden_size
    if not P:
        return {}
    out: dict[str, tuple[int, ...]] = {"embed_per_layer": (spec.per_layer_vocab, L * P),
                                       "per_layer_model_projection": (n, L * P),
                                       "per_layer_projection_norm.weight": (P,)}  # fmt: skip
    for i in range(L):
        out |= {f"layers.{i}.per_layer_input_gate": (n, P), f"layers.{i}.per_layer_projection": (P, n),
                f"layers.{i}.per_layer_norm.weight": (n,)}  # fmt: skip
    return out


def seeded_weights(spec: DecoderSpec) -> dict[str, np.ndarray]:
    """Seeded draws for every expected weight (float64 holding dtype values); the same bytes on every build."""
    rng = np.random.default_rng(SEED)
    out = {}
    for name, shape in expected(spec).items():
        if name in ("embed", "embed_per_layer") or name.endswith("sinks"):  # a sink is a logit: of the logits' order
            values = rng.standard_normal(shape)
        elif name.endswith((".weight", "_norm", "layer_scalar", "_scale")):  # a norm's scale, a layer's or router's
            values = 1.0 + 0.1 * rng.standard_normal(shape)
        elif "bias" in name or name.endswith("_correction"):  # DeepSeek's router correction is a bias too
            values = 0.1 * rng.standard_normal(shape)
        else:  # a projection [in, out] (an expert's [E, in, out]): std 1/sqrt(in)
            values = rng.standard_normal(shape) / math.sqrt(shape[-2])
        out[name] = rounded_float64(values, spec.dtype)
    return out


def lm_head(spec: DecoderSpec, weights: Mapping[str, np.ndarray]) -> np.ndarray:
    """[hidden, vocab]: the output projection, the embedding's transpose when tied."""
    return weights["embed"].T if spec.tie_embeddings else weights["lm_head"]


class LayerWeights(Mapping[str, np.ndarray]):
    """Layer i's weights without the ``layers.{i}.`` prefix: a view, each weight read from ``weights`` when asked
    for (a checkpoint's are read then, one at a time).
    """  # noqa: D205

    def __init__(self, weights: Mapping[str, np.ndarray], i: int) -> None:
        prefix = f"layers.{i}."
        self._weights, self._prefix = weights, prefix
        self._names = [k[len(prefix) :] for k in weights if k.startswith(prefix)]

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise KeyError(name)
        return self._weights[self._prefix + name]

    def __contains__(self, name: object) -> bool:
        return name in self._names  # Mapping's own reads the weight

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def layer_weights(weights: Mapping[str, np.ndarray], i: int) -> LayerWeights:
    """Layer i's weights without the ``layers.{i}.`` prefix (``LayerWeights``: read as they are asked for)."""
    return LayerWeights(weights, i)


def vocab_part(weights: Mapping[str, np.ndarray], name: str, start: int, stop: int) -> np.ndarray:
    """Rows [start, stop) of ``embed`` [vocab, hidden] or columns of ``lm_head`` [hidden, vocab]; read alone when
    the weights can (``CheckpointWeights``, ``oracle.Stored64``), else sliced from the held array.
    """  # noqa: D205
    part = getattr(weights, "vocab_part", None)
    if part is not None:
        return np.asarray(part(name, start, stop))
    value = weights[name]
    return value[start:stop] if name == "embed" else value[:, start:stop]


def describe(source: Any) -> str:
    """The report's words for where the weights came from."""
    return "seeded (numpy default_rng(0))" if source is None else f"checkpoint {str(Path(source).resolve())!r}"
