"""How a transformers ``model_type``'s config says its positional encoding, per layer: ``ConfigHook``. Torch-free.

``ropeexport.hf`` reads every config through the hook of its model type: a type with a decoder architecture holds
its hook in its own folder (``Architecture.hook``); a type ropeexport knows only for its encoding (its rope, ALiBi or
T5 artifacts, and audits of other tools' exports) has a line in ``ENCODING_TYPES`` here. A type in neither is an
error naming the known ones: ropeexport never guesses a pairing.

What a hook says, each read from the type's transformers code (the modeling file's rotate_half and its config
class's ``__post_init__``): the encoding (``rope``, ``alibi``, ``t5``); RoPE's channel pairing (``half``: (i, i + d/2),
``interleaved``: (2i, 2i + 1)) and where that is seen; the theta its config class defaults to; which per-layer keys
its code reads (``layer_types``, ``no_rope_layers``: a config of another type holding one is refused, never read as
every layer full and rotated); the layer pattern it derives when the config names none; the layer types it builds
without attention (a hybrid's linear attention, convolution or state-space layers: layers without a positional
encoding, never read as attention).
"""

from __future__ import annotations

from dataclasses import dataclass

_HALF = "rotate_half pairs (i, i + d/2)"
_PAIRS = "interleaved pairs (2i, 2i+1)"
PATTERNS = ("", "alternating", "every-nth")  # a config without layer_types: all full; even layers sliding; N-1 of N
ROPE_ON = ("", "sliding", "sliding-if-windowed")  # which layers rotate: every one, or the sliding ones (class doc)
MROPE = ("", "chunked", "interleaved")  # one position axis, or M-RoPE's recomposition of three (class doc)


@dataclass(frozen=True)
class ConfigHook:
    """One model type's reading of its encoding (module doc).

    ``encoding``: ``rope``, ``alibi`` or ``t5``; ``alibi_key`` (Falcon: ``alibi``) makes a RoPE type ALiBi where
    its config sets that key true, ``alibi_in`` (MPT: ``attn_config``) reads the switch inside that object.
    ``pairing`` / ``pairing_why``: RoPE's channel pairs and where the code says so. ``default_theta``: the config
    class's rope_theta when the config has none; ``theta_required``: the error to raise instead (gpt-oss fills in a
    whole YaRN setting). ``shared_rope_key``: the rotary key is one head shared by every query head, rotating only
    ``qk_rope_head_dim`` channels (latent attention). ``multi_query``: Falcon's one key head under ``multi_query``.
    ``reads_layer_types`` / ``reads_no_rope_layers``: the per-layer keys its code reads. ``pattern``: the layers its
    config class derives without layer_types (``PATTERNS``; ``every-nth``: every ``pattern_every``-th layer full,
    the rest sliding, the interval from ``pattern_key`` if set); ``no_rope_interval``: no RoPE on every N-th layer
    unless ``no_rope_layers`` says otherwise (``no_rope_layer_interval`` overrides it). ``rope_on``: which layers
    rotate (``ROPE_ON``: every one; ``sliding``, the sliding layers only (Cohere 2: its attention rotates only where
    it has a window); ``sliding-if-windowed``, the sliding layers only where the config has a ``sliding_window``,
    every layer where it has none (EXAONE 4)). ``local_theta``: 4.x Gemma 3's ``rope_local_base_freq`` (the sliding
    layers' theta) is read. ``head_dim_derived``: the config class sets head_dim to hidden_size / heads whatever the
    config says (Cohere 2), so a ``head_dim`` that differs is refused. ``default_partial``: the
    ``partial_rotary_factor`` the config class fills in when the config has none (GLM-4: 0.5). ``flat_scaling_on``:
    the layer type a flat (4.x) ``rope_scaling`` and ``rope_theta`` apply to, the other types taking the default
    schedule at ``default_theta`` (OLMo 3's ``convert_rope_params_to_dict``). ``text_model``: a multimodal wrapper
    whose text model's config is its ``text_config`` (of that type). ``global_head_dim``: the full-attention layers
    have a head_dim (and key/value heads) of their own, read from ``per_layer_config`` or ``global_head_dim`` (this
    value when the config has neither; ``num_global_key_value_heads`` under ``attention_k_eq_v``): Gemma 4's
    ``Gemma4TextConfig.__post_init__``.

    Hybrids: ``other_layers``, the layer types its code builds without attention (no positional encoding on them);
    ``pattern_other``, the type ``every-nth`` gives the layers that are not full (sliding unless said);
    ``attention_index_key``, a config key listing the attention layers where there is no layer_types (the rest are
    ``other_layers[0]``; absent too: every layer attention, as the config class derives it); ``position_key``, the
    config key that switches RoPE on (its value ``rope``; anything else is a model with no positional encoding,
    refused by name); ``rope_extra_keys``, keys of the scaling dict its code reads outside the schedule (refused
    elsewhere as parameters of no schedule).

    Multimodal RoPE: ``mrope``, how the type's rotary module recomposes position_ids [3, batch, seq] (``chunked``:
    contiguous ``mrope_section`` blocks, Qwen2-VL; ``interleaved``: by frequency index, Qwen3-VL), its code computing
    that whatever ``mrope_interleaved`` says (a config saying the other is refused by that key); ``mrope_default``, the
    ``mrope_section`` its code takes when the config has none; ``text_flat``: a wrapper whose hub configs may hold the
    text model's keys at the top level instead of a ``text_config`` (``Qwen2VLConfig.__post_init__``).

    ``chunked``: its code builds ``chunked_attention`` layers (Llama 4: attention within chunks of
    ``attention_chunk_size``, which its architecture's per-layer hook reads); refused by name for every other type.
    """

    model_type: str
    encoding: str = "rope"
    pairing: str = "half"
    pairing_why: str = _HALF
    default_theta: float = 10_000.0
    theta_required: str = ""
    shared_rope_key: bool = False
    multi_query: bool = False
    alibi_key: str = ""
    alibi_in: str = ""
    reads_layer_types: bool = False
    reads_no_rope_layers: bool = False
    pattern: str = ""
    pattern_key: str = ""
    pattern_every: int = 0
    no_rope_interval: int = 0
    local_theta: bool = False
    rope_on: str = ""
    head_dim_derived: bool = False
    default_partial: float = 0.0
    flat_scaling_on: str = ""
    text_model: str = ""
    other_layers: tuple[str, ...] = ()
    pattern_other: str = "sliding_attention"
    attention_index_key: str = ""
    # its layer_types say ``indexed_attention`` (DeepSeek sparse attention, Mistral Large 4): full causal attention as
    # far as the encoding goes; the indexer is its architecture's (``AttentionLayer.index_topk``)
    indexed: bool = False
    position_key: str = ""
    rope_extra_keys: tuple[str, ...] = ()
    mrope: str = ""
    full_alias: str = ""  # a layer type its config names for full attention (DeepSeek V3.2's "indexed_attention")
    mrope_default: tuple[int, ...] = ()
    text_flat: bool = False
    global_head_dim: int = 0
    chunked: bool = False
    # latent attention whose partial_rotary_factor is a share of qk_nope_head_dim + qk_rope_head_dim (Mistral 4's
    # head_dim, Mistral4Config.__post_init__): it must come to the rope slice, every channel of which rotates
    partial_of_qk_head: bool = False

    def __post_init__(self) -> None:
        if self.rope_on not in ROPE_ON:
            raise ValueError(f"{self.model_type}: rope_on must be one of {ROPE_ON}, got {self.rope_on!r}")
        if self.mrope not in MROPE:
            raise ValueError(f"{self.model_type}: mrope must be one of {MROPE}, got {self.mrope!r}")

    @property
    def per_layer(self) -> bool:
        """Whether the type's config says its layers apart even without layer_types or no_rope_layers."""
        return bool(self.pattern or self.no_rope_interval or self.rope_on or self.attention_index_key)

    @property
    def layout(self) -> tuple[str, str]:
        """RoPE's (layout, why): the spec's ``layout`` field and the words a provenance line gives it."""
        return self.pairing, f"{self.model_type}: {self.pairing_why}"


def mrope_text(model_type: str) -> ConfigHook:
    """The hook of a Qwen-VL text model (M-RoPE over position_ids [3, batch, seq]), as transformers 5.23 reads it.

    Qwen2-VL / Qwen2.5-VL text (Qwen2VLTextConfig.convert_rope_params_to_dict: rope type "mrope" read as default,
    default_theta 1e6; Qwen2VLRotaryEmbedding.recomposition_frequencies: contiguous mrope_section blocks, default
    [16, 24, 24]); Qwen3-VL text (Qwen3VLTextConfig: default_theta 5e5; Qwen3VLTextRotaryEmbedding: interleaved by
    frequency index whatever mrope_interleaved says, default [24, 20, 20]).
    """
    if model_type == "qwen3_vl_text":
        return ConfigHook(model_type, default_theta=500_000.0, mrope="interleaved", mrope_default=(24, 20, 20))
    if model_type in ("qwen2_vl_text", "qwen2_5_vl_text"):
        return ConfigHook(model_type, default_theta=1_000_000.0, reads_layer_types=True, mrope="chunked",
                          mrope_default=(16, 24, 24))  # fmt: skip
    raise ValueError(f"{model_type!r} is not a Qwen-VL text model (qwen2_vl_text, qwen2_5_vl_text, qwen3_vl_text)")


def interleaved(model_type: str, why: str, shared_rope_key: bool = False, full_alias: str = "") -> ConfigHook:
    """The hook of a RoPE type whose pairs are (2i, 2i + 1), ``why`` the code that says so."""
    return ConfigHook(model_type, pairing="interleaved", pairing_why=f"{_PAIRS} ({why})",
                      shared_rope_key=shared_rope_key, full_alias=full_alias)  # fmt: skip


# The model types ropeexport reads only for their encoding (no decoder architecture): one line each.
ENCODING_TYPES: dict[str, ConfigHook] = {
    h.model_type: h
    for h in (
        *(ConfigHook(t) for t in ("mixtral", "qwen2_moe", "phi", "phimoe", "gemma", "starcoder2",
                                  "olmo", "olmo2", "stablelm", "granite", "granitemoe", "nemotron", "persimmon")),
        ConfigHook("falcon", alibi_key="alibi", multi_query=True),  # Falcon 7B/40B use RoPE; Falcon-RW uses ALiBi
        interleaved("codegen", "rotate_every_two"),
        interleaved("cohere", "its rotate_half takes x[..., ::2], x[..., 1::2]"),
        interleaved("glm", "repeat_interleave cos/sin"),
        interleaved("helium", "repeat_interleave cos/sin"),
        ConfigHook("mpt", encoding="alibi", alibi_in="attn_config"),
        *(ConfigHook(t, encoding="t5") for t in ("t5", "mt5", "umt5")),  # umt5: the same buckets, a table per layer
        # Hybrids of 2026 (transformers 5.23 code, cited per field), read for audits and proofs only:
        # Qwen3.5 text (Qwen3_5TextConfig.__post_init__: layer_types from full_attention_interval 4, the rest
        # linear_attention; partial_rotary_factor 0.25 set by default; Qwen3_5TextRotaryEmbedding reads mrope_section
        # and mrope_interleaved, which recompose the three position axes: one axis for text, so no change)
        ConfigHook("qwen3_5_text", reads_layer_types=True, pattern="every-nth", pattern_key="full_attention_interval",
                   pattern_every=4, pattern_other="linear_attention", other_layers=("linear_attention",),
                   rope_extra_keys=("mrope_section", "mrope_interleaved"), default_partial=0.25),
        # Qwen2-VL / Qwen2.5-VL: their text models are architectures (``mrope_text``); the wrappers' hub configs are
        # often flat (Qwen2VLConfig.__post_init__).
        *(ConfigHook(t, text_model=f"{t}_text", text_flat=True) for t in ("qwen2_vl", "qwen2_5_vl")),
        # Qwen3-VL: its text model is an architecture (``mrope_text``); its wrapper reads text_config only.
        ConfigHook("qwen3_vl", text_model="qwen3_vl_text"),
        # Granite 4 (GraniteMoeHybridConfig: layer_types default all linear_attention, the Mamba2 mixer; RoPE only
        # where position_embedding_type is "rope": GraniteMoeHybridModel.rotary_emb)
        ConfigHook("granitemoehybrid", reads_layer_types=True, other_layers=("linear_attention",),
                   position_key="position_embedding_type"),
        # LFM2 (Lfm2Config: layer_types from full_attn_idxs, the rest conv; default_theta 1e6)
        ConfigHook("lfm2", default_theta=1_000_000.0, reads_layer_types=True, other_layers=("conv",),
                   attention_index_key="full_attn_idxs"),
        # Gemma 3n text (Gemma3nTextConfig: every 5th layer full, the rest sliding; per layer type rope_parameters,
        # its default_theta one per type, global 1e6 and local 1e4: refused rather than one taken for both)
        ConfigHook("gemma3n_text", reads_layer_types=True, pattern="every-nth", pattern_every=5,
                   theta_required="Gemma 3n's thetas default per layer type (full 1e6, sliding 1e4): give each "
                   "layer type's rope_theta in rope_parameters"),
    )
}  # fmt: skip


# Multimodal wrappers of those types, read through their text_config (transformers 5.23: Qwen3_5Config and
# Gemma3nConfig hold the text model's config as text_config); the wrappers of types ropeexport builds are their
# architectures' (``Architecture.wrappers``)
ENCODING_WRAPPERS: dict[str, str] = {"qwen3_5": "qwen3_5_text", "gemma3n": "gemma3n_text"}

# Model types read by nothing here yet, each with what is missing (named instead of "unknown"). None today: Gemma 4
# (issue 39) is an architecture, what it does not build refused by its config key (``architectures.gemma4_text``).
NOT_BUILT_TYPES: dict[str, str] = {}
