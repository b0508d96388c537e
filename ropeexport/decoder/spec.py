"""The decoder's spec: a whole decoder-only model as a list of layers, validated on construction.

Torch-free. ``DecoderSpec`` holds what is the model's as a whole (its type, sizes, norm eps, embeddings and head,
dtype, graph form, how the weights are stored: ``Storage``) and ``layers``: one ``LayerSpec`` per layer
(``ropeexport.architectures.layers``: its attention, feed-forward, norms and residual form, positional encoding or
none). ``default``: the layer every layer is unless said otherwise, made by the architecture's builder from the
model-wide fields (``Architecture.default_layer``); its ``position`` is the model's (``position_spec()``: what
scenarios, regimes, the context length and reports read). ``layer_position_spec(i)`` is layer i's encoding (None: no
positional encoding), ``position_specs()`` the distinct ones.

Serialized (``to_dict``: decoder.json and the model's metadata): the model-wide fields as the decoders built before
layers had components wrote them (the default layer's settings under decoder.json's names: ``intermediate_size``,
``sliding_window``, ``attn_scale``, ...), and ``layers`` only when some layer differs from the default one, each layer
as the fields where it does (``{}``, ``{"position": null}``, ``{"attention": "sliding", "window": 4}``,
``{"head_dim": 512, ...}``). ``DecoderSpec.from_dict(spec.to_dict())`` is the same spec; every decoder.json written
before reads and hashes as it did.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ropeexport.architectures import ARCHITECTURES
from ropeexport.architectures.base import Architecture
from ropeexport.architectures.feedforward import GROUPED
from ropeexport.architectures.layers import (
    GEOMETRY,
    INDEX_WIRE,
    LATENT_WIRE,
    RESIDUAL_NORMS,
    LayerSpec,
    plain,
    unbuilt,
)
from ropeexport.architectures.sharing import check_sharing
from ropeexport.catalog import spec_from_dict
from ropeexport.components.linear import DEFAULT_BLOCK_SIZE, WeightFormat
from ropeexport.errors import SpecError
from ropeexport.families.alibi.spec import AlibiSpec
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.forms import DECODER_FORMS
from ropeexport.forms import FORMS as ALL_FORMS
from ropeexport.hf import TEXT_CONFIGS
from ropeexport.positions import ONE_AXIS, PositionInputs
from ropeexport.specs import NAME_PATTERN, require_choice, require_int

PositionSpec = RopeSpec | AlibiSpec  # a decoder's encoding (the two it takes), as its layers' block spec
FORMS = DECODER_FORMS  # the block forms whose I/O a decoder layer can take as is (``ropeexport.forms``)
DTYPES = ("fp32", "fp16")  # ONNX Runtime's CPU kernels run no bf16 Attention or MatMul
POLICIES = ("re-prefill", "keep")
DEFAULT_ALIBI_LENGTH = 2048
# decoder.json's model-wide fields, in the order it writes them; each with whether it is written only where set (the
# fields added after the first decoders, so that earlier specs serialize and hash as before).
WIRE = (("name", False), ("model_type", False), ("num_layers", False), ("hidden_size", False),
        ("vocab_size", False), ("intermediate_size", False), ("norm_eps", False), ("act", False),
        ("residual", False), ("position", False), ("qkv_bias", False), ("o_bias", False), ("mlp_bias", False),
        ("tie_embeddings", False), ("sliding_window", False), ("dtype", False), ("graph", False),
        ("attn_scale", True), ("attn_softcap", True), ("final_softcap", True), ("logit_scale", True), ("text_of", True),
        ("num_experts", True), ("experts_per_token", True), ("swiglu_alpha", True), ("swiglu_limit", True),
        *((name, True) for name in LATENT_WIRE), *((name, True) for name in GROUPED),
        ("weight_format", True), ("block_size", True), ("accuracy_level", True), ("symmetric", True),
        ("tied_head_int4", True), ("tied_embedding_int4", True), ("query_scale", True),
        ("latent_cache", True), ("per_layer_input", True), ("per_layer_vocab", True),
        *((name, True) for name in INDEX_WIRE))  # fmt: skip
STORAGE = ("weight_format", "block_size", "accuracy_level", "symmetric", "tied_head_int4", "tied_embedding_int4")


@dataclass(frozen=True)
class Storage:
    """How the projections are stored (``components.linear.WeightFormat``): ``format`` "" rounded once to the dtype;
    "int4" MatMulNBits blocks of ``block_size`` in features (0: 32), ``symmetric`` or with a zero point per block, run
    at ``accuracy_level``. The embedding (unless ``tied_embedding_int4``), norms and biases stay in the dtype.

    ``tied_head_int4``: a head tied to the embedding stored as the format stores a projection (MatMulNBits of the
    embedding's transpose, as onnxruntime-genai's builder quantizes a tied head); False: the head is the embedding
    read transposed, in the dtype (a float MatMul over the whole vocabulary: 27 of the 88 ms of a Llama-3.2-1B int4
    decode step at accuracy level 0). ``tied_embedding_int4``: with it, the embedding gathered from the head's own
    int4 bytes (com.microsoft GatherBlockQuantized; no embedding in the dtype stored: Llama-3.2-1B fp32's folder
    1.73 -> 0.75 GiB, the builder's size).
    """  # noqa: D205

    format: str = ""
    block_size: int = 0
    accuracy_level: int = 0
    symmetric: bool = True
    tied_head_int4: bool = False
    tied_embedding_int4: bool = False

    def weight_format(self, dtype: str) -> WeightFormat:
        """The linear component's format of these settings in ``dtype``."""
        if self.format == "int4":
            return WeightFormat.int4(dtype, self.block_size, self.accuracy_level, self.symmetric)
        return WeightFormat(dtype)

    def to_dict(self) -> dict[str, object]:
        """decoder.json's names for these settings (``STORAGE``)."""
        return dict(zip(STORAGE, (self.format, self.block_size, self.accuracy_level, self.symmetric,
                                  self.tied_head_int4, self.tied_embedding_int4), strict=True))  # fmt: skip


@dataclass(frozen=True)
class DecoderSpec:
    """A decoder-only model: ``layers``, each norm, attention (its position piece inside) and feed-forward.

    Build one from a config (``decoder.config.from_config``), from decoder.json's fields (``from_dict``), or change one
    (``replace``). ``layers``: one ``LayerSpec`` per layer once constructed; given as () (every layer ``default``) or
    as a list whose items are LayerSpecs, tables of the fields where the layer differs from the default (what
    ``to_dict`` writes), or None / ``{}`` for the default layer.

    Shapes: input_ids [batch, seq] -> logits [batch, seq, vocab_size]; layer i's cache [batch, num_kv_heads, past,
    head_dim] (that layer's geometry).
    """

    name: str
    model_type: str
    hidden_size: int
    vocab_size: int
    norm_eps: float
    default: LayerSpec
    layers: tuple[LayerSpec, ...] = ()
    num_layers: int = 0  # 0: as many as ``layers`` holds
    dtype: str = "fp32"
    graph: str = "fused"
    tie_embeddings: bool = False
    final_softcap: float = 0.0  # cap * tanh(logits / cap) on the output logits (Gemma 2); 0: none
    logit_scale: float = 0.0  # the output logits times this, in the dtype (Cohere 2's logit_scale); 0: none (1)
    # "" or the multimodal wrapper whose text model this is (``hf.TEXT_CONFIGS``: "gemma3"): its checkpoint holds the
    # text model's weights under the wrapper's prefix beside other towers' tensors
    text_of: str = ""
    storage: Storage = Storage()
    # latent layers cache the normed latent and the rotated rope key (``components.latent``'s ``latent`` cache,
    # kv_b_proj absorbed), not the expanded keys and values: the decomposed form only
    latent_cache: bool = False
    # Gemma 4's per-layer input embeddings (``decoder.per_layer``): P wide per layer, its table per_layer_vocab rows
    per_layer_input: int = 0
    per_layer_vocab: int = 0
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_PATTERN.match(self.name):
            raise SpecError("name", f"must match {NAME_PATTERN.pattern}, got {self.name!r}")
        require_choice("model_type", self.model_type, tuple(ARCHITECTURES))
        require_choice("dtype", self.dtype, DTYPES)
        require_choice("graph", self.graph, FORMS)
        if self.text_of:
            require_choice("text_of", self.text_of, tuple(TEXT_CONFIGS))
        count = self.num_layers or (len(self.layers) if isinstance(self.layers, (list, tuple)) else 0)
        object.__setattr__(self, "num_layers", require_int("num_layers", count, 1, 1024))
        for name, top in (("hidden_size", 2**17), ("vocab_size", 2**22)):
            object.__setattr__(self, name, require_int(name, getattr(self, name), 1, top))  # 32.0 -> 32
        if isinstance(self.norm_eps, bool) or not isinstance(self.norm_eps, (int, float)) or not 0 < self.norm_eps < 1:
            raise SpecError("norm_eps", f"must be a number in (0, 1), got {self.norm_eps!r}")
        cap = self.final_softcap
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 <= cap < float("inf"):
            raise SpecError("final_softcap", f"must be a finite number >= 0 (0: none), got {cap!r}")
        object.__setattr__(self, "final_softcap", float(cap))
        scale = self.logit_scale
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 <= scale < float("inf"):
            raise SpecError("logit_scale", f"must be a finite number >= 0 (0: none), got {scale!r}")
        object.__setattr__(self, "logit_scale", float(scale))
        if not isinstance(self.default, LayerSpec):
            raise SpecError("default", f"must be a LayerSpec, got {type(self.default).__name__}")
        self._check_storage()
        object.__setattr__(self, "latent_cache", _boolean("latent_cache", self.latent_cache))
        object.__setattr__(self, "per_layer_input", require_int("per_layer_input", self.per_layer_input, 0, 2**14))
        low = 1 if self.per_layer_input else 0  # a table only beside its width
        object.__setattr__(self, "per_layer_vocab", require_int("per_layer_vocab", self.per_layer_vocab, low,
                                                                2**22 if low else 0))  # fmt: skip
        if self.latent_cache and self.default.attention.kind != "latent":
            raise SpecError("latent_cache", f"is latent attention's cache; {self.model_type}'s layers have none")
        self._check_layer("default", self.default)
        object.__setattr__(self, "layers", self._read_layers())
        check_sharing(self.layers, self.graph)  # keys and values read from another layer (Gemma 4)

    # -- decoder.json ------------------------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, given: Mapping[str, object], sources: Mapping[str, str] | None = None) -> DecoderSpec:
        """The spec decoder.json's fields stand for (``to_dict``'s; a field added after the first decoders may be
        absent); SpecError names an unknown, missing or wrong field.
        """  # noqa: D205
        if not isinstance(given, Mapping):
            raise SpecError("spec", f"must be a table of decoder fields, got {type(given).__name__}")
        data: dict[str, Any] = dict(given)  # any values: the constructors validate them, naming the field at fault
        known = {name for name, _ in WIRE} | {"layers"}
        unknown = next((k for k in data if k not in known), None)
        if unknown is not None:
            raise SpecError(unknown, f"is not a decoder field; a decoder has {', '.join(sorted(known))}")
        missing = next((name for name, optional in WIRE if not optional and name not in data), None)
        if missing is not None:
            raise SpecError(missing, "missing: every decoder spec names it")
        model_type = require_choice("model_type", data["model_type"], tuple(ARCHITECTURES))
        arch = ARCHITECTURES[model_type]
        position = data["position"]
        if not isinstance(position, Mapping):
            raise SpecError("position", f"must be a table of the encoding's fields, got {position!r}")
        for name in ("num_heads", "head_dim"):
            if name not in position:
                raise SpecError(f"position.{name}", "missing: a decoder's encoding names its heads and head_dim")
        fields = {name: data.get(name, _ZERO.get(name)) for name, _ in WIRE}
        try:
            default = arch.default_layer(fields)
        except (TypeError, ValueError) as exc:  # a number of the wrong type where the layer reads it
            raise SpecError("spec", f"is not a decoder spec ({exc})") from None
        storage = Storage(*(data.get(name, getattr(Storage(), _STORAGE_FIELD[name])) for name in STORAGE))
        layers = () if data.get("layers") is None else data["layers"]
        return cls(name=data["name"], model_type=model_type, hidden_size=data["hidden_size"],
                   vocab_size=data["vocab_size"], norm_eps=data["norm_eps"], default=default, layers=layers,
                   num_layers=data["num_layers"], dtype=data["dtype"], graph=data["graph"],
                   tie_embeddings=_boolean("tie_embeddings", data["tie_embeddings"]),
                   final_softcap=data.get("final_softcap", 0.0), logit_scale=data.get("logit_scale", 0.0),
                   text_of=data.get("text_of", ""), storage=storage,
                   latent_cache=data.get("latent_cache", False), per_layer_input=data.get("per_layer_input", 0),
                   per_layer_vocab=data.get("per_layer_vocab", 0), sources=dict(sources or {}))  # fmt: skip

    def to_dict(self) -> dict[str, object]:
        """Every field but ``sources``, as plain data (what decoder.json and the model's metadata store; module doc):
        ``layers`` only when some layer differs from the default, each layer as the fields where it does.
        """  # noqa: D205
        d = self.default
        wide = d.to_dict()
        values: dict[str, object] = {
            "name": self.name, "model_type": self.model_type, "num_layers": self.num_layers,
            "hidden_size": self.hidden_size, "vocab_size": self.vocab_size, "norm_eps": self.norm_eps,
            "tie_embeddings": self.tie_embeddings, "sliding_window": d.window, "dtype": self.dtype,
            "graph": self.graph, "final_softcap": self.final_softcap, "logit_scale": self.logit_scale,
            "text_of": self.text_of, "latent_cache": self.latent_cache, "per_layer_input": self.per_layer_input,
            "per_layer_vocab": self.per_layer_vocab,
            **{k: v for k, v in self.storage.to_dict().items()},
        }  # fmt: skip
        for name in ("intermediate_size", "act", "residual", "position", "qkv_bias", "o_bias", "mlp_bias",
                     "attn_scale", "attn_softcap", "num_experts", "experts_per_token", "swiglu_alpha",
                     "swiglu_limit", "query_scale", *LATENT_WIRE, *GROUPED, *INDEX_WIRE):  # fmt: skip
            values[name] = wide[name]
        out = {}
        for name, optional in WIRE:
            if optional and not values[name] and name not in ("block_size", "accuracy_level", "symmetric"):
                continue
            out[name] = values[name]
        if not self.storage.format:  # weights in the dtype: no int4 settings (earlier specs serialize as before)
            for name in ("block_size", "accuracy_level", "symmetric"):
                del out[name]
        if not self.uniform:
            out["layers"] = [layer.diff(d) for layer in self.layers]
        return out

    def digest_text(self) -> str:
        """The spec as canonical JSON (what the model's metadata stores)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def replace(self, **changes: object) -> DecoderSpec:
        """A copy with ``changes`` (decoder.json's field names), validated again. Layers that were the default one
        stay the default one (a new ``position`` or ``sliding_window`` reaches them); the others are kept, unless
        ``layers`` is given.
        """  # noqa: D205
        data: dict[str, Any] = self.to_dict()
        if "layers" not in changes:
            default = self.default
            data["layers"] = () if self.uniform else tuple(None if x == default else x for x in self.layers)
        data |= changes
        return DecoderSpec.from_dict(data, self.sources)

    # -- the layers ---------------------------------------------------------------------------------------------------

    @property
    def architecture(self) -> Architecture:
        """The model type's architecture (``ropeexport.architectures``)."""
        return ARCHITECTURES[self.model_type]

    @property
    def position(self) -> Mapping[str, object]:
        """The model's encoding's fields (the default layer's): what scenarios, regimes and the context length read."""
        position = self.default.position
        assert position is not None  # checked on construction
        return position

    @property
    def uniform(self) -> bool:
        """True when every layer is the default one (``to_dict`` then has no ``layers`` key)."""
        return all(layer == self.default for layer in self.layers)

    def default_layer(self) -> LayerSpec:
        """The layer every layer is unless ``layers`` says otherwise."""
        return self.default

    def layer(self, i: int) -> LayerSpec:
        """Layer i's spec."""
        return self.layers[i]

    def position_spec(self) -> PositionSpec:
        """The model's encoding as a ``block`` spec, in the decoder's dtype and form: what scenarios, regimes, the
        context length and reports read (a layer's own: ``layer_position_spec``).
        """  # noqa: D205
        return self._block(self.position)

    def layer_position_spec(self, i: int) -> PositionSpec | None:
        """Layer i's encoding as a ``block`` spec (as ``position_spec``), or None: the layer has none."""
        position = self.layers[i].position
        if position is None:
            return None
        return self.position_spec() if position == self.position else self._block(position)

    def position_specs(self) -> list[PositionSpec]:
        """The distinct ``block`` specs of the layers' encodings, in layer order (the model's first when used)."""
        out: list[PositionSpec] = []
        for i in range(self.num_layers):
            position = self.layer_position_spec(i)
            if position is not None and position not in out:
                out.append(position)
        return out

    @property
    def positions(self) -> PositionInputs:
        """The model's position input: ``position_ids`` [3, batch, seq] where an encoding of its layers reads three
        axes (multimodal RoPE: Qwen-VL's time, height, width), else [batch, seq] (one axis).
        """  # noqa: D205
        axes = max((getattr(p, "position_axes", 1) for p in self.position_specs()), default=1)
        return ONE_AXIS if axes == 1 else PositionInputs(axes=axes)

    def weight_format(self) -> WeightFormat:
        """How the projections are stored (``storage``, in the dtype)."""
        return self.storage.weight_format(self.dtype)

    @property
    def cache(self) -> str:
        """What a latent layer caches (``LayerSpec.cache_shapes``' ``cache``): ``latent`` or ``expanded``."""
        return "latent" if self.latent_cache else "expanded"

    # -- validation ---------------------------------------------------------------------------------------------------

    def _block(self, fields: Mapping[str, Any]) -> Any:
        """The encoding's ``block`` spec of position ``fields`` in the decoder's dtype and form."""
        fields = dict(fields) | {"artifact": "block", "dtype": self.dtype, "graph": self.graph}
        return spec_from_dict(fields | {"name": f"{self.name}-block"}, where="position")

    def _check_storage(self) -> None:
        """``storage`` as ``linear.WeightFormat`` takes it (an int4 block size of 0 becomes its default, 32)."""
        s = self.storage
        if not isinstance(s, Storage):
            raise SpecError("storage", f"must be a decoder.spec.Storage, got {type(s).__name__}")
        if s.tied_head_int4 and not (s.format == "int4" and self.tie_embeddings):
            raise SpecError("tied_head_int4", "only an int4 decoder whose head is tied to its embedding stores that "
                            "head in int4 apart from the embedding")  # fmt: skip
        if s.tied_embedding_int4 and not s.tied_head_int4:
            raise SpecError("tied_embedding_int4", "the embedding is gathered from the int4 head's bytes only where "
                            "the head is stored in int4 (tied_head_int4)")  # fmt: skip
        if s.format == "":
            WeightFormat(self.dtype, "", s.block_size, s.accuracy_level, s.symmetric)  # no int4 settings
            return
        if s.format != "int4":
            raise SpecError("weight_format", f"must be int4, or empty for weights in the dtype ({self.dtype}); got "
                            f"{s.format!r}")  # fmt: skip
        ALL_FORMS[self.graph].check("int4", True, "weight_format")
        made = WeightFormat.int4(self.dtype, s.block_size or DEFAULT_BLOCK_SIZE, s.accuracy_level, s.symmetric)
        object.__setattr__(self, "storage", dataclasses.replace(s, block_size=made.block_size,
                                                                accuracy_level=made.accuracy_level))  # fmt: skip

    def _read_layers(self) -> tuple[LayerSpec, ...]:
        """``layers`` as given (class doc) -> one checked LayerSpec per layer; SpecError names ``layers[i].field``."""
        default, given = self.default, self.layers
        if given is None or (isinstance(given, (list, tuple)) and not given):
            return (default,) * self.num_layers
        if isinstance(given, (str, Mapping)) or not isinstance(given, Sequence):
            raise SpecError("layers", f"must be a list of layers, got {type(given).__name__}")
        if len(given) != self.num_layers:
            raise SpecError("layers", f"holds {len(given)} layers, num_layers is {self.num_layers}")
        out = []
        for i, item in enumerate(given):
            where = f"layers[{i}]"
            if item is None:
                item = {}
            if isinstance(item, Mapping):
                item = default.with_fields(item, where)
            elif not isinstance(item, LayerSpec):
                raise SpecError(where, f"must be a LayerSpec or a table of its fields, got {type(item).__name__}")
            if item != default:
                self._check_layer(where, item)
            out.append(item)
        return tuple(out)

    def _check_latent(self, layer: LayerSpec) -> None:
        """A latent layer's form: the ones ``components.latent`` builds (SpecError naming ``graph`` otherwise)."""
        from ropeexport.components.latent.spec import GRAPHS as LATENT_GRAPHS  # onnx-free

        a, form = layer.attention, ALL_FORMS[self.graph]
        if self.graph not in LATENT_GRAPHS:
            raise SpecError("graph", f"the {self.graph} form is not built for latent attention (its keys are nope + "
                            "rope wide, its values v_head_dim: TensorRT's form of one head size around a cache-less "
                            f"Attention is not written for it); use {', '.join(LATENT_GRAPHS)}")  # fmt: skip
        if self.latent_cache and ("latent" not in form.latent_caches or self.storage.format):
            builds = ", ".join(name for name, f in ALL_FORMS.items() if "latent" in f.latent_caches)
            raise SpecError("latent_cache", f"is built in the {builds} form with weights in the dtype (the absorbed "
                            f"kv_b_proj halves are plain MatMuls); got the {self.graph} form"
                            f"{' in ' + self.storage.format if self.storage.format else ''}")  # fmt: skip
        if a.index_topk and form.one_head_size:  # DeepSeek Sparse Attention: the selection narrows the mask
            raise SpecError("graph", f"the {self.graph} form is not built with the indexer (index_topk): "
                            "GroupQueryAttention takes no mask beyond causal and the sequence lengths; use "
                            "fused or decomposed")  # fmt: skip
        width = a.qk_nope_head_dim + a.head_dim
        if width % form.head_multiple:  # gqa: GroupQueryAttention's head size
            fits = [name for name, f in ALL_FORMS.items() if name in LATENT_GRAPHS and not width % f.head_multiple]
            raise SpecError("graph", f"the {self.graph} form needs qk_nope_head_dim + qk_rope_head_dim a multiple of "
                            f"{form.head_multiple} (GroupQueryAttention's head size), got {width}; use "
                            f"{' or '.join(fits)}")  # fmt: skip

    def _check_layer(self, where: str, layer: LayerSpec) -> None:
        """What a decoder can build of ``layer`` (SpecError naming ``where.field`` otherwise): its norms its residual
        form's, its encoding one a decoder takes with the layer's own geometry and the model's context length, a
        length-dependent schedule only as the model's own, and nothing ``layers.unbuilt`` lists.
        """  # noqa: D205
        said = unbuilt(layer)
        if said is not None:
            raise SpecError(f"{where}.{said[0]}" if where != "default" else said[0], said[1])
        prefix = "" if where == "default" else f"{where}."
        if layer.norms != RESIDUAL_NORMS[layer.residual]:
            raise SpecError(f"{prefix}norms", f"must be {list(RESIDUAL_NORMS[layer.residual])} in a {layer.residual} "
                            "residual (other norms per layer are not built yet)")  # fmt: skip
        a = layer.attention
        ALL_FORMS[self.graph].check("softcap", a.softcap, "graph")  # TensorRT's Attention has no softcap
        if a.kind == "latent":
            self._check_latent(layer)
        if self.architecture.fused_qkv == "per-head" and a.num_heads * a.head_dim != self.hidden_size:
            raise SpecError("hidden_size", f"must equal num_heads x head_dim ({a.num_heads * a.head_dim}) in "
                            f"{self.model_type}")  # fmt: skip
        if layer.position is None:
            if where == "default":
                raise SpecError("position", "must be the model's encoding's fields (the default layer has one)")
            return
        try:
            position = self._block(layer.position)
        except SpecError as exc:
            raise SpecError(f"{prefix}position.{exc.field.removeprefix('position.')}", exc.message) from None
        if position.encoding not in ("rope", "alibi"):
            raise SpecError(f"{prefix}position.encoding", f"a decoder takes rope or alibi, not {position.encoding!r}")
        ours = {"num_heads": position.num_heads, "head_dim": position.head_dim,
                "num_kv_heads": int(getattr(position, "num_kv_heads", 0) or position.num_heads)}  # fmt: skip
        theirs = dict(zip(GEOMETRY, layer.geometry, strict=True))
        if a.kind == "latent":  # one rotated key slice shared by every head: the piece rotates a key of one head
            theirs["num_kv_heads"] = 1
        for key in GEOMETRY:
            if ours[key] != theirs[key]:
                raise SpecError(f"{prefix}position.{key}", f"must be the layer's ({theirs[key]}), got {ours[key]}: "
                                "a layer's encoding has its attention's heads and head_dim")  # fmt: skip
        if where == "default":
            return
        model = self.position_spec()
        if position.max_positions != model.max_positions:
            raise SpecError(f"{prefix}position.max_positions", f"must be the model's ({model.max_positions}), got "
                            f"{position.max_positions}: a model has one context length")  # fmt: skip
        if position.encoding == "rope" and position != model:
            from ropeexport.families.rope.schedules import get_schedule  # torch-free

            if get_schedule(position.scaling).regime != "static":
                # The scenarios and the cache policy follow the regime of the model's own position only.
                raise SpecError(f"{prefix}position.scaling", f"{position.scaling!r} changes its tables with the "
                                "length; such a schedule can only be the model's own position")  # fmt: skip


# What an absent optional field of decoder.json means (the decoders written before it existed).
_ZERO: dict[str, object] = {"attn_scale": 0.0, "attn_softcap": 0.0, "final_softcap": 0.0, "logit_scale": 0.0,
                            "text_of": "",
                            "num_experts": 0, "experts_per_token": 0, "swiglu_alpha": 0.0, "swiglu_limit": 0.0,
                            "query_scale": None, **dict.fromkeys(LATENT_WIRE, 0), **INDEX_WIRE, "n_group": 0,
                            "topk_group": 0, "norm_topk_prob": False, "routed_scaling_factor": 0.0,
                            "n_shared_experts": 0}
_STORAGE_FIELD = dict(zip(STORAGE, ("format", "block_size", "accuracy_level", "symmetric", "tied_head_int4",
                                    "tied_embedding_int4"), strict=True))  # fmt: skip


def _boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError(name, f"must be true or false, got {value!r}")
    return value


def weight_label(fields: Mapping[str, Any]) -> str:
    """The weight format of a spec's fields (``to_dict``) in short, as a folder name carries it: "" for weights in the
    dtype, else ``int4-b32``, with ``-a4`` (the accuracy level, when set) and ``-asym`` (zero points).
    """  # noqa: D205
    if not fields.get("weight_format"):
        return ""
    level = f"-a{fields.get('accuracy_level')}" if fields.get("accuracy_level") else ""
    zero = "" if fields.get("symmetric", True) else "-asym"
    return f"{fields['weight_format']}-b{fields.get('block_size')}{level}{zero}"


__all__ = ["DecoderSpec", "LayerSpec", "Storage", "plain", "weight_label"]
