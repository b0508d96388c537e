"""Keys and values shared across layers (Gemma 4's ``num_kv_shared_layers``): which layer stores what others read.

A layer with ``kv_from = j`` (``AttentionLayer.kv_from``) computes its own query only: it attends over layer j's keys
and values (rotated and normed as layer j computed them, layer j's cache and its new tokens) with its own mask, and
has no cache of its own: a decoder graph gives it no ``past_key_values.{i}`` input and no ``present.{i}`` output
(``decoder.export``). transformers 5.23 (``Gemma4TextConfig.kv_sharing_modes``): the last ``num_kv_shared_layers``
layers "reuse", each the last earlier layer of its own layer type, which "store"s.

Torch- and onnx-free: what the decoder spec checks (``check_sharing``) and what its graph, twin and runners read
(``sharing_modes``, ``cached_layers``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ropeexport.architectures.layers import LayerSpec
from ropeexport.errors import SpecError

# The forms a layer that reads another's keys and values is built in: the tensorrt form's cache-less Attention and
# the static-cache form's buffers are not written for it.
SHARING_FORMS = ("fused", "decomposed", "gqa")


def sharing_modes(layers: Sequence[LayerSpec]) -> list[str]:
    """Per layer: ``reuse`` (reads ``kv_from``'s keys and values), ``store`` (read by a later layer), or ""."""
    read = {layer.attention.kv_from for layer in layers if layer.attention.kv_from is not None}
    return ["reuse" if layer.attention.kv_from is not None else "store" if i in read else ""
            for i, layer in enumerate(layers)]  # fmt: skip


def own_index_cache(layer: LayerSpec) -> bool:
    """Whether the layer caches its own indexer keys (DeepSeek Sparse Attention: an indexer, not a shared one)."""
    a = layer.attention
    return bool(a.index_topk and a.index_n_heads and not a.index_shared)


def cached_layers(layers: Sequence[LayerSpec]) -> list[int]:
    """The layers with a cache of their own, in order: every layer but those that reuse another's keys and values,
    and those too when they keep their own indexer keys (Mistral Large 4's ``reuse_but_indexer``: that cache alone).
    """  # noqa: D205
    return [i for i, layer in enumerate(layers) if layer.attention.kv_from is None or own_index_cache(layer)]


def check_sharing(layers: Sequence[LayerSpec], graph: str) -> None:
    """SpecError naming ``layers[i].kv_from`` when a layer reads keys and values it cannot: from itself or a later
    layer, from a layer that reads another's (transformers' producers compute theirs), of another key/value geometry,
    with keys and values of its own described (``k_eq_v``, ``v_norm``, q/k/v biases), or in a form not built for it.
    """  # noqa: D205
    for i, layer in enumerate(layers):
        a, where = layer.attention, f"layers[{i}].kv_from"
        if a.kv_from is None:
            continue
        j = a.kv_from
        if j >= i:
            raise SpecError(where, f"must name an earlier layer (0 to {i - 1}), got {j}")
        if graph not in SHARING_FORMS:
            raise SpecError("graph", f"a layer reading another's keys and values is built in the "
                            f"{', '.join(SHARING_FORMS)} forms, not {graph}")  # fmt: skip
        b = layers[j].attention
        if b.kv_from is not None:
            raise SpecError(where, f"layer {j} reads layer {b.kv_from}'s keys and values itself; name the layer that "
                            "computes them")  # fmt: skip
        if a.kind == "latent" and b.kind == "latent":  # Mistral Large 4: the latent and the rotated rope key
            if (a.kv_lora_rank, a.head_dim) != (b.kv_lora_rank, b.head_dim) or (
                    (layers[i].position is None) != (layers[j].position is None)):  # fmt: skip
                raise SpecError(where, f"layer {j}'s latent ({b.kv_lora_rank} wide, rope {b.head_dim}, "
                                f"{'NoPE' if layers[j].position is None else 'RoPE'}) is not layer {i}'s kind "
                                f"({a.kv_lora_rank}, {a.head_dim}, {'NoPE' if layers[i].position is None else 'RoPE'})")
            continue
        if (a.num_kv_heads, a.head_dim) != (b.num_kv_heads, b.head_dim) or b.kind != "standard":
            raise SpecError(where, f"layer {j}'s keys are ({b.num_kv_heads} heads, {b.head_dim} wide, {b.kind}); "
                            f"layer {i} takes ({a.num_kv_heads}, {a.head_dim}, {a.kind})")  # fmt: skip
        own = next((n for n, v in (("k_eq_v", a.k_eq_v), ("v_norm", a.v_norm), ("qkv_bias", a.qkv_bias)) if v), None)
        if own is not None:
            raise SpecError(f"layers[{i}].{own}", f"must be false: the layer reads layer {j}'s keys and values "
                            "(kv_from), it computes none")  # fmt: skip
