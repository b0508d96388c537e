"""A decoder layer as what it computes: ``LayerSpec``, its attention, feed-forward, norms and residual form, and
its positional encoding or none. Torch- and onnx-free, validated on construction.

transformers 5 says a model per layer (``layer_types``, nested ``rope_parameters``), and the models of 2026 differ per
layer in more than the window: Llama 4 (experts on every other layer, no RoPE and a query temperature on every 4th,
chunked attention on the rest), Gemma 4 (head_dim 256 on sliding layers, 512 on global ones, key/value shared across
layers), DeepSeek (dense first layers, latent attention). So each layer holds its own:

- ``AttentionLayer``: heads, key/value heads and head_dim of this layer; its ``kind`` (``standard``; latent attention
  will be a sibling component); its mask (``full``, ``sliding`` W or ``chunked`` C); the q/k norm; the logit scale,
  soft cap and sinks; its biases; keys and values computed here or shared from layer j (``kv_from``); the values'
  weightless RMSNorm (``v_norm``) and values read off the key projection (``k_eq_v``), Gemma 4's.
- ``FeedForward``: ``gated``, ``plain`` or ``moe`` (a mixture of experts with its ``router`` kind), its activation,
  inner width and bias.
- ``position``: the encoding's spec fields (``ropeexport.hf`` imports them) or None: no positional encoding (NoPE).
- ``norms`` and ``residual``: the norm slots the layer reads, in its residual form; ``layer_scale``: the layer's
  output (the residual stream after it) times a learned scalar (Gemma 4's ``layer_scalar``).

Which of these a decoder can build today is said in one place (``unbuilt``): a layer may describe what is not built
(a gated attention output), and building it is then one line naming the field. Keys and values shared across layers
are checked across the layers (``architectures.sharing``).

Serialized (``to_dict``): one flat table under the names a decoder's spec uses for its model-wide settings
(``decoder.json``: ``intermediate_size``, ``attn_scale``, ``num_experts``, ...), so a layer that differs from the
model's default layer is written as the fields where it differs (``{"attention": "sliding", "window": 4}``,
``{"position": null}``), exactly as the decoders built before layers had components.
"""  # noqa: D205

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ropeexport.architectures.feedforward import GROUPED_ROUTERS, FeedForward
from ropeexport.errors import SpecError
from ropeexport.forms import FORMS
from ropeexport.specs import require_choice, require_flag, require_int, require_number

# chunked (Llama 4): key slot j seen by query slot i iff (j - l) // C == (i - l) // C, l the row's left padding
# (transformers' chunked_overlay), and causal
MASKS = ("full", "sliding", "chunked")
ATTENTION_KINDS = ("standard", "latent")  # latent: multi-head latent attention (DeepSeek), a sibling component
QK_NORMS = ("", "rms", "l2")  # rms: Qwen3's and Gemma 3's RMSNorm per head; l2: Llama 4's weightless L2 norm
QK_NORM_OVER = ("head", "projection")  # each head's d values (Qwen3, Gemma 3), or the whole projection (OLMo 2/3)
# Position-dependent query scales, by what they compute (``LayerSpec.query_scale``: {"kind": ..., its parameters}):
# ``log_floor`` Ministral 3's q * (1 + beta * log(1 + floor(pos / original))); ``temperature`` Llama 4's NoPE layers'
# q * (log(floor((pos + 1) / floor_scale) + 1) * attn_scale + 1).
# ``learned_log`` Mistral Large 4's q * (scale[h] * log(pos + 1) + bias[h]), scale and bias learned per head (the
# layer's weights ``q_scale`` and ``q_scale_bias``, no parameters in the spec).
QUERY_SCALES = {"log_floor": ("beta", "original_max_position_embeddings"),
                "temperature": ("floor_scale", "attn_scale"), "learned_log": ()}  # fmt: skip
DIVISORS = ("original_max_position_embeddings", "floor_scale")  # the parameters a position is floor-divided by
RESIDUALS = ("sequential", "parallel", "shared", "sandwich", "post")
# A layer's norm slots, by their canonical weight names: norm1 before attention (input_layernorm), norm2 before the
# MLP (post_attention_layernorm in Llama's names); Gemma's sandwich: norm1 before attention, norm2 on its output,
# norm3 before the MLP, norm4 on its output. GPT-J's shared residual has norm1 only; the post residual (OLMo 2/3,
# EXAONE 4) has the sandwich's outer two, norm2 on the attention's output and norm4 on the MLP's, none before either.
NORMS = ("norm1", "norm2", "norm3", "norm4")
PAIR = NORMS[:2]
RESIDUAL_NORMS = {"sequential": PAIR, "parallel": PAIR, "shared": NORMS[:1], "sandwich": NORMS,
                  "post": (NORMS[1], NORMS[3])}
GEOMETRY = ("num_heads", "num_kv_heads", "head_dim")
LATENT_WIRE = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "v_head_dim")  # a latent layer's widths' wire names
# a latent layer's indexer (DeepSeek Sparse Attention) by wire name, with the value that says "none"
INDEX_WIRE = {"index_topk": 0, "index_n_heads": 0, "index_head_dim": 0, "index_layout": "", "index_shared": False}


def plain(value: Any, field_name: str) -> Any:
    """``value`` as plain JSON data (lists, not tuples): what decoder.json gives back, so a spec round-trips."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as error:
        raise SpecError(field_name, f"must be plain data (numbers, strings, lists, tables): {error}") from None


@dataclass(frozen=True)
class AttentionLayer:
    """One layer's attention (its graph and float64 twin: ``components.attention``).

    Geometry: ``num_heads`` query heads, ``num_kv_heads`` key/value heads (dividing them), ``head_dim``. ``mask``:
    ``full`` (causal), ``sliding`` (key slot j seen by query slot i only if i - j < ``window``) or ``chunked`` (only
    within the same chunk of ``window`` slots). ``qk_norm``: a norm of each query and key head before the rotation.
    The logits: q . k * ``scale`` (0: 1 / sqrt(head_dim)), ``softcap`` c > 0: c * tanh(l / c), ``sinks``: one learned
    logit per query head in the softmax. ``qk_norm_over``: the norm over each head or the whole projection. ``gate``:
    the output times a sigmoid gate of the layer input (Qwen3-Next, Qwen3.5). ``kv_from``: the layer whose keys and
    values this one reads (None: its own). A ``latent`` layer (``components.latent``, DeepSeek's MLA): ``head_dim``
    the rotated slice of each head (qk_rope_head_dim), ``qk_nope_head_dim`` the slice never rotated, ``v_head_dim``
    the values', ``kv_lora_rank`` the latent's width, ``q_lora_rank`` the query's LoRA (0: a plain q_proj), one
    key/value head per query head; a standard layer has none of the four (0). ``v_norm``: each value head
    RMS-normalized over head_dim with no weight (Gemma 4's ``v_norm``). ``k_eq_v``: the values are the key
    projection's output before its norm and rotation, the layer has no v_proj (Gemma 4's ``attention_k_eq_v`` on its
    full layers). ``index_topk`` > 0: DeepSeek Sparse Attention's indexer on a latent layer
    (``components.latent.indexer``): ``index_n_heads`` heads ``index_head_dim`` wide, its RoPE on the first
    head_dim dims in ``index_layout`` (``half`` DeepSeek V3.2, ``interleaved`` GLM-5 and Mistral Large 4), each query
    keeping its ``index_topk`` best keys; ``index_shared``: the previous full indexer layer's selection reused (GLM-5's
    and Large 4's ``indexer_types`` "shared"; no indexer weights or key cache of its own).
    """

    num_heads: int
    num_kv_heads: int
    head_dim: int
    kind: str = "standard"
    mask: str = "full"
    window: int = 0
    qk_norm: str = ""
    qk_norm_over: str = "head"
    scale: float = 0.0
    softcap: float = 0.0
    sinks: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    gate: bool = False
    kv_from: int | None = None
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    v_norm: bool = False
    k_eq_v: bool = False
    index_topk: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_layout: str = ""
    index_shared: bool = False

    def __post_init__(self) -> None:
        heads = require_int("num_heads", self.num_heads, 1, 4096)
        kv = require_int("num_kv_heads", self.num_kv_heads, 1, heads)
        if heads % kv:
            raise SpecError("num_kv_heads", f"must divide num_heads ({heads}), got {kv}")
        object.__setattr__(self, "num_heads", heads)
        object.__setattr__(self, "num_kv_heads", kv)
        object.__setattr__(self, "head_dim", require_int("head_dim", self.head_dim, 1, 65536))
        require_choice("attention_kind", self.kind, ATTENTION_KINDS)
        require_choice("attention", self.mask, MASKS)
        window = require_int("window", self.window, 0)
        if self.mask != "full" and not window:
            raise SpecError("window", f"a {self.mask} layer needs a window of at least 1 (the key slots it sees)")
        if self.mask == "full" and window:
            raise SpecError("window", f"a full layer has no window (0), got {window}; say attention='sliding'")
        object.__setattr__(self, "window", window)
        require_choice("qk_norm", self.qk_norm, QK_NORMS)
        require_choice("qk_norm_over", self.qk_norm_over, QK_NORM_OVER)
        object.__setattr__(self, "scale", require_number("attn_scale", self.scale, "0: 1 / sqrt(head_dim)"))
        object.__setattr__(self, "softcap", require_number("attn_softcap", self.softcap, "0: no cap"))
        for name in ("sinks", "qkv_bias", "o_bias", "gate", "v_norm", "k_eq_v", "index_shared"):
            require_flag(name, getattr(self, name))
        if self.kv_from is not None:
            object.__setattr__(self, "kv_from", require_int("kv_from", self.kv_from, 0))
        self._check_latent()
        self._check_indexer()

    def _check_indexer(self) -> None:
        """An indexed layer's fields (the class doc): on a latent layer only, index_topk >= 1, index_head_dim at
        least the rotated slice; all 0 / "" otherwise. SpecError naming the field.
        """  # noqa: D205
        if not self.index_topk:
            named = next((n for n in ("index_n_heads", "index_head_dim", "index_layout", "index_shared")
                          if getattr(self, n)), None)  # fmt: skip
            if named is not None:
                raise SpecError(named, "is an indexer's: the layer has none (index_topk 0)")
            return
        object.__setattr__(self, "index_topk", require_int("index_topk", self.index_topk, 1, 2**31 - 1))
        if self.kind != "latent":
            raise SpecError("index_topk", f"DeepSeek Sparse Attention's indexer is a latent layer's; a {self.kind} "
                            "attention has none")  # fmt: skip
        if self.index_shared:
            return
        require_int("index_n_heads", self.index_n_heads, 1, 4096)
        require_int("index_head_dim", self.index_head_dim, 1, 65536)
        if self.index_head_dim < self.head_dim:
            raise SpecError("index_head_dim", f"must be at least qk_rope_head_dim ({self.head_dim}): the indexer "
                            f"rotates its first qk_rope_head_dim dims, got {self.index_head_dim}")  # fmt: skip
        require_choice("index_layout", self.index_layout, ("half", "interleaved"))

    def _check_latent(self) -> None:
        """A latent layer's widths (the class doc); a standard layer's all 0. SpecError naming the field."""
        names = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "v_head_dim", "index_topk")
        if self.kind != "latent":
            if self.k_eq_v and self.qkv_bias:  # no released Gemma 4 has attention_bias; its weights would differ
                raise SpecError("k_eq_v", "keys as values with q/k/v biases (attention_bias) are not built: the "
                                "values would carry the key's bias and there is no v_bias")  # fmt: skip
            named = next((n for n in names if getattr(self, n)), None)
            if named is not None:
                raise SpecError(named, f"must be 0: a {self.kind} attention has no latent (say attention_kind "
                                "latent)")  # fmt: skip
            return
        for name, low, top in zip(names, (0, 1, 0, 1, 0), (2**16,) * 4 + (2**24,), strict=True):
            object.__setattr__(self, name, require_int(name, getattr(self, name), low, top))
        if self.head_dim % 2:
            raise SpecError("head_dim", f"a latent layer's head_dim is its rotated slice (qk_rope_head_dim): even, "
                            f"got {self.head_dim}")  # fmt: skip
        if self.num_kv_heads != self.num_heads:
            raise SpecError("num_kv_heads", f"a latent layer rebuilds one key/value head per query head: "
                            f"{self.num_heads}, got {self.num_kv_heads}")  # fmt: skip


# The wire names of each component's fields (``LayerSpec.to_dict``): decoder.json's names for the same settings.
ATTENTION_WIRE = {"num_heads": "num_heads", "num_kv_heads": "num_kv_heads", "head_dim": "head_dim",
                  "kind": "attention_kind", "mask": "attention", "window": "window", "qk_norm": "qk_norm",
                  "qk_norm_over": "qk_norm_over", "scale": "attn_scale", "softcap": "attn_softcap", "sinks": "sinks",
                  "qkv_bias": "qkv_bias", "o_bias": "o_bias", "gate": "attn_gate", "kv_from": "kv_from",
                  "q_lora_rank": "q_lora_rank", "kv_lora_rank": "kv_lora_rank",
                  "qk_nope_head_dim": "qk_nope_head_dim", "v_head_dim": "v_head_dim", "v_norm": "v_norm",
                  "k_eq_v": "k_eq_v", "index_topk": "index_topk", "index_n_heads": "index_n_heads",
                  "index_head_dim": "index_head_dim", "index_layout": "index_layout",
                  "index_shared": "index_shared"}  # fmt: skip
FEEDFORWARD_WIRE = {"kind": "mlp", "act": "act", "inner": "intermediate_size", "bias": "mlp_bias",
                    "experts": "num_experts", "top_k": "experts_per_token", "router": "router",
                    "swiglu_alpha": "swiglu_alpha", "swiglu_limit": "swiglu_limit", "expert": "expert",
                    "groups": "n_group", "topk_group": "topk_group", "norm_topk_prob": "norm_topk_prob",
                    "scaling": "routed_scaling_factor", "shared": "n_shared_experts"}  # fmt: skip
LAYER_WIRE = ("position", "norms", "residual", "query_scale", "layer_scale")
WIRE = (*LAYER_WIRE, *ATTENTION_WIRE.values(), *FEEDFORWARD_WIRE.values())


@dataclass(frozen=True)
class LayerSpec:
    """One decoder layer: its ``attention``, its ``ffn``, its ``position`` (the encoding's spec fields, or None: no
    positional encoding) and the ``norms`` it reads in its ``residual`` form (``sequential``, ``parallel`` (attention
    and MLP read their own norm of the layer input), ``shared`` (one norm, GPT-J), ``sandwich`` (a norm before and
    after each of attention and MLP, Gemma) or ``post`` (a norm after each, none before: OLMo 2/3, EXAONE 4)).
    ``query_scale``: a scale of the query that follows its position (``QUERY_SCALES``: {"kind": ..., its
    parameters}), or None. ``layer_scale``: the residual stream after the layer times its learned scalar (weight
    ``layers.{i}.layer_scalar`` [1]; Gemma 4).

    Shapes: hidden [b, s, n] -> [b, s, n]; its cache [b, heads, past, width] per tensor (``cache_shapes``:
    [b, num_kv_heads, past, head_dim] both for a standard layer).
    """  # noqa: D205

    attention: AttentionLayer
    ffn: FeedForward
    position: Mapping[str, object] | None = None
    norms: tuple[str, ...] = PAIR
    residual: str = "sequential"
    query_scale: Mapping[str, object] | None = None
    layer_scale: bool = False
    # the wire's fields of this layer (``to_dict``), made once (frozen: nothing it reads changes)
    _wire: dict[str, object] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.attention, AttentionLayer):
            raise SpecError("attention", f"must be an AttentionLayer, got {type(self.attention).__name__}")
        if not isinstance(self.ffn, FeedForward):
            raise SpecError("ffn", f"must be a FeedForward, got {type(self.ffn).__name__}")
        if self.position is not None:
            if not isinstance(self.position, Mapping):
                raise SpecError("position", f"must be a table of the encoding's fields, or None for no positional "
                                f"encoding; got {self.position!r}")  # fmt: skip
            object.__setattr__(self, "position", plain(dict(self.position), "position"))
        require_choice("residual", self.residual, RESIDUALS)
        require_flag("layer_scale", self.layer_scale)
        if self.query_scale is not None:
            object.__setattr__(self, "query_scale", _query_scale(self.query_scale))
        norms = self.norms
        if isinstance(norms, str) or not isinstance(norms, (list, tuple)):
            raise SpecError("norms", f"must be a list of norm slots ({', '.join(NORMS)}), got {norms!r}")
        for name in norms:
            require_choice("norms", name, NORMS)
        if len(set(norms)) != len(norms):
            raise SpecError("norms", f"names a slot twice: {list(norms)}")
        object.__setattr__(self, "norms", tuple(norms))

    @property
    def geometry(self) -> tuple[int, int, int]:
        """(query heads, key/value heads, head_dim) of this layer's attention."""
        a = self.attention
        return a.num_heads, a.num_kv_heads, a.head_dim

    def cache_shapes(self, graph: str = "", cache: str = "expanded") -> tuple[tuple[int, int], ...]:
        """((heads, width) of the key's cache, of the value's[, of the indexer's keys]): each cached tensor.

        Each [b, heads, past, width]; a layer with its own indexer (``AttentionLayer.index_topk``, not shared) caches
        its keys third, (1, index_head_dim), in either latent cache.

        The one place a decoder reads its cache's geometry from. A standard layer: (num_kv_heads, head_dim) both. A
        latent layer's ``expanded`` cache: keys (heads, nope + rope), values (heads, v_head_dim), or (heads, nope +
        rope) in a form of one head size (``forms.Form.one_head_size``: gqa's GroupQueryAttention; values padded with
        zeros, as ``components.latent.LatentSpec.cache_shapes`` pads them); its ``latent`` cache: the normed latent (1,
        kv_lora_rank) and the rotated rope key (1, qk_rope_head_dim). ``graph`` "" (or any other form): the cache
        as the layer computes it, unpadded (what the float64 recompute holds).
        """
        a = self.attention
        if a.kind != "latent":
            return (a.num_kv_heads, a.head_dim), (a.num_kv_heads, a.head_dim)
        require_choice("latent_cache", cache, ("expanded", "latent"))
        index = ((1, a.index_head_dim),) if a.index_topk and not a.index_shared else ()
        if cache == "latent":  # a NoPE latent layer's rope key is 0 wide (``components.latent``)
            return (1, a.kv_lora_rank), (1, a.head_dim if self.position is not None else 0), *index
        key = a.qk_nope_head_dim + a.head_dim
        padded = graph in FORMS and FORMS[graph].one_head_size  # values padded to the key's width
        return (a.num_heads, key), (a.num_heads, key if padded else a.v_head_dim), *index

    @property
    def window(self) -> int:
        """The key slots a sliding layer sees (0: not sliding)."""
        return self.attention.window if self.attention.mask == "sliding" else 0

    @property
    def chunk(self) -> int:
        """The slots of each chunk a chunked layer attends within (0: not chunked)."""
        return self.attention.window if self.attention.mask == "chunked" else 0

    def to_dict(self) -> dict[str, object]:
        """The layer as one flat table of plain data (module doc: decoder.json's names)."""
        if not self._wire:
            scale = None if self.query_scale is None else dict(self.query_scale)
            out: dict[str, object] = {"position": None if self.position is None else dict(self.position),
                                      "attention": self.attention.mask, "window": self.attention.window,
                                      "norms": list(self.norms), "residual": self.residual,
                                      "query_scale": scale, "layer_scale": self.layer_scale}  # fmt: skip
            for name, wire in ATTENTION_WIRE.items():
                out.setdefault(wire, getattr(self.attention, name))
            for name, wire in FEEDFORWARD_WIRE.items():
                out[wire] = getattr(self.ffn, name)
            self._wire.update(out)
        return dict(self._wire)

    def diff(self, other: LayerSpec) -> dict[str, object]:
        """The wire fields where this layer differs from ``other`` (``{}``: the same layer)."""
        mine, theirs = self.to_dict(), other.to_dict()
        return {k: v for k, v in mine.items() if v != theirs[k]}

    def with_fields(self, changes: Mapping[str, object], where: str = "layers") -> LayerSpec:
        """The layer with ``changes`` (wire names, ``WIRE``) applied; SpecError names ``where.field``.

        A new ``position`` without a new geometry brings its own heads and head_dim (a layer's attention has its
        position's geometry).
        """
        unknown = next((k for k in changes if k not in WIRE), None)
        if unknown is not None:
            raise SpecError(f"{where}.{unknown}", f"is not a layer field; a layer has {', '.join(WIRE)}")
        # any values: the components' constructors validate them, naming the field at fault
        attention: dict[str, Any] = {name: changes[wire] for name, wire in ATTENTION_WIRE.items() if wire in changes}
        position = changes.get("position", self.position)
        if "position" in changes and isinstance(position, Mapping):
            for name in GEOMETRY:
                if name not in attention and name in position:
                    attention[name] = position[name]
            if "num_kv_heads" not in attention and "num_heads" in attention and "num_kv_heads" not in position:
                attention["num_kv_heads"] = attention["num_heads"]  # one key/value head per query head
        ffn: dict[str, Any] = {name: changes[wire] for name, wire in FEEDFORWARD_WIRE.items() if wire in changes}
        try:
            made_attention = replace(self.attention, **attention) if attention else self.attention
        except SpecError as exc:
            raise SpecError(f"{where}.{exc.field}", exc.message) from None
        try:
            made_ffn = replace(self.ffn, **ffn) if ffn else self.ffn
        except SpecError as exc:
            raise SpecError(f"{where}.{exc.field}", exc.message) from None
        layer: dict[str, Any] = {k: changes[k] for k in LAYER_WIRE if k in changes}
        try:
            return replace(self, attention=made_attention, ffn=made_ffn, **layer)
        except SpecError as exc:
            raise SpecError(f"{where}.{exc.field}", exc.message) from None


def unbuilt(layer: LayerSpec) -> tuple[str, str] | None:
    """(the wire field, why) of the first thing ``layer`` describes that no decoder graph builds yet; None if built."""
    a = layer.attention
    # the latent component reads none of these (``components.latent``): each would be dropped from the graph and
    # its twin alike, so verification could not see it (Gemma 4's v_norm and k_eq_v came after latent attention)
    learned = (layer.query_scale or {}).get("kind") == "learned_log"
    if a.kind == "latent" and (a.mask != "full" or a.qk_norm or a.softcap or a.sinks or a.gate
                               or a.v_norm or a.k_eq_v or a.qkv_bias or a.o_bias):  # fmt: skip
        return "attention_kind", ("latent attention is built full and causal only (no window, q/k norm, soft cap, "
                                  "sinks, gate, value norm, keys as values or attention biases beside it)")
    if learned and a.kind != "latent":
        return "query_scale", "learned_log (Mistral Large 4's) is built beside latent attention only"
    if layer.ffn.router in GROUPED_ROUTERS and a.kind != "latent":
        return "router", "DeepSeek's grouped router is built in DeepSeek's layer only (beside latent attention)"
    if layer.ffn.router in GROUPED_ROUTERS and not layer.ffn.shared:
        return "n_shared_experts", ("0 is not built: DeepSeek's mixture is composed with its shared experts "
                                    "(components.grouped_moe.shared_moe; DeepSeek V3 and Kimi K2 have 1)")
    if a.gate:
        return "attn_gate", "a gated attention output (Qwen3-Next, Qwen3.5) is described but not built yet"
    return None


def _query_scale(value: object) -> dict[str, object]:
    """A query scale as plain data, its kind and parameters checked (``QUERY_SCALES``)."""
    if not isinstance(value, Mapping):
        raise SpecError("query_scale", f"must be a table {{kind, parameters}} or None, got {value!r}")
    kind = value.get("kind")
    require_choice("query_scale.kind", kind, tuple(QUERY_SCALES))
    wanted = QUERY_SCALES[str(kind)]
    unknown = next((k for k in value if k != "kind" and k not in wanted), None)
    if unknown is not None:
        raise SpecError(f"query_scale.{unknown}", f"is not a parameter of {kind}; it has {', '.join(wanted)}")
    for name in wanted:
        require_number(f"query_scale.{name}", value.get(name), f"{kind}'s {name}", positive=True)
        if name in DIVISORS:  # the position is floor-divided by it: a whole number of positions
            require_int(f"query_scale.{name}", value.get(name), 1)
    return dict(plain(dict(value), "query_scale"))

