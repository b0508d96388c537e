"""The decoder's spec: a whole decoder-only model from a transformers config, validated on construction.

Torch-free. ``DecoderSpec`` holds the structure (``decoder.architectures``), ``position``, the model's positional
encoding (its own spec fields exactly as ``ropeexport.hf`` imports them for every artifact), and ``layers``: one
``LayerSpec`` per layer (attention kind and window, positional encoding or none, the norms it uses), each the
model's default layer (``position`` and ``sliding_window``) unless said otherwise. ``position_spec()`` is the model's
encoding as a ``block`` spec in the decoder's dtype and graph form (what scenarios, regimes and reports read);
``layer_position_spec(i)`` is layer i's (None: no positional encoding), ``position_specs()`` the distinct ones.
``from_config`` applies the size overrides that make a tiny test model of a real config (``--num-layers``,
``--hidden-size``, ``--vocab-size``) to the config itself, so the transformers reference is built from the same
numbers.

Serialized (``to_dict``: decoder.json and the model's metadata), a model whose layers are all the default one has
no ``layers`` key (every decoder built before layers existed reads and hashes as it did); otherwise ``layers`` lists
each layer as the fields where it differs from the default (``{}`` for a default layer, ``{"position": null}`` for
one without positional encoding), and ``DecoderSpec(**to_dict())`` is the same spec.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ropeexport.catalog import spec_from_dict
from ropeexport.components.linear import DEFAULT_BLOCK_SIZE, WeightFormat
from ropeexport.decoder.architectures import ARCHITECTURES, Architecture, read_layout
from ropeexport.errors import SpecError
from ropeexport.families.alibi.spec import AlibiSpec
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.hf import LAYER_TYPES, TEXT_CONFIGS, Layers, import_layers, text_config
from ropeexport.specs import NAME_PATTERN, require_choice, require_int

PositionSpec = RopeSpec | AlibiSpec  # a decoder's encoding (the two it takes), as its layers' block spec
FORMS = ("fused", "decomposed", "tensorrt", "gqa")  # the block forms whose I/O a decoder layer can take as is
DTYPES = ("fp32", "fp16")  # ONNX Runtime's CPU kernels run no bf16 Attention or MatMul
POLICIES = ("re-prefill", "keep")
DEFAULT_ALIBI_LENGTH = 2048
_HEADS = ("num_attention_heads", "n_head")
_HIDDEN = ("hidden_size", "n_embd", "n_embed")
_LAYERS = ("num_hidden_layers", "n_layer")
ATTENTION = ("full", "sliding")
# A layer's norm slots, by their canonical weight names: norm1 before attention (input_layernorm), norm2 before the
# MLP (post_attention_layernorm in Llama's names). GPT-J's shared residual has norm1 only.
NORMS = ("norm1", "norm2", "norm3", "norm4")
# Gemma's sandwich: norm1 before attention, norm2 on its output, norm3 before the MLP, norm4 on its output.
PAIR = NORMS[:2]
_GEOMETRY = ("num_heads", "num_kv_heads", "head_dim")


def _plain(value: Any, field_name: str) -> Any:
    """``value`` as plain JSON data (lists, not tuples): what decoder.json gives back, so a spec round-trips."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as error:
        raise SpecError(field_name, f"must be plain data (numbers, strings, lists, tables): {error}") from None


@dataclass(frozen=True)
class LayerSpec:
    """One decoder layer: attention ``full`` or ``sliding`` (key slot j seen by query slot i only if i - j <
    ``window``), its positional encoding or none, and the norms it uses.

    ``position``: the encoding's spec fields as ``DecoderSpec.position`` holds them (the model's heads, head_dim and
    max_positions), or None: no positional encoding (nothing rotated, no bias; NoPE layers). ``norms``: the norm
    slots the layer reads (``NORMS``), as the model's residual form has them.
    """  # noqa: D205

    position: Mapping[str, object] | None
    attention: str = "full"
    window: int = 0
    norms: tuple[str, ...] = PAIR

    def __post_init__(self) -> None:
        require_choice("attention", self.attention, ATTENTION)
        window = require_int("window", self.window, 0)
        if self.attention == "sliding" and not window:
            raise SpecError("window", "a sliding layer needs a window of at least 1 (the key slots it sees)")
        if self.attention == "full" and window:
            raise SpecError("window", f"a full layer has no window (0), got {window}; say attention='sliding'")
        object.__setattr__(self, "window", window)
        if self.position is not None:
            if not isinstance(self.position, Mapping):
                raise SpecError("position", f"must be a table of the encoding's fields, or None for no positional "
                                f"encoding; got {self.position!r}")  # fmt: skip
            object.__setattr__(self, "position", _plain(dict(self.position), "position"))
        norms = self.norms
        if isinstance(norms, str) or not isinstance(norms, (list, tuple)):
            raise SpecError("norms", f"must be a list of norm slots ({', '.join(NORMS)}), got {norms!r}")
        for name in norms:
            require_choice("norms", name, NORMS)
        if len(set(norms)) != len(norms):
            raise SpecError("norms", f"names a slot twice: {list(norms)}")
        object.__setattr__(self, "norms", tuple(norms))

    def to_dict(self) -> dict[str, object]:
        """The fields as plain data."""
        position = None if self.position is None else dict(self.position)
        return {"position": position, "attention": self.attention, "window": self.window, "norms": list(self.norms)}


def _geometry(position: Any) -> dict[str, int]:
    """A block spec's heads, key/value heads and head_dim (no num_kv_heads: one per query head)."""
    heads = int(position.num_heads)
    return {"num_heads": heads, "num_kv_heads": int(getattr(position, "num_kv_heads", 0) or heads),
            "head_dim": int(position.head_dim)}  # fmt: skip


@dataclass(frozen=True)
class DecoderSpec:
    """A decoder-only model: ``num_layers`` layers of norm, attention (the layer's position piece inside) and MLP.

    ``layers``: one ``LayerSpec`` per layer once constructed; given as () (every layer the default one, from
    ``position`` and ``sliding_window``) or as a list whose items are LayerSpecs, tables of the fields where the
    layer differs from the default (what ``to_dict`` writes), or None / ``{}`` for the default layer.

    Shapes: input_ids [batch, seq] -> logits [batch, seq, vocab_size]; each layer's cache [batch, num_kv_heads,
    past, head_dim] (the position spec's heads and head_dim).
    """

    name: str
    model_type: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    intermediate_size: int
    norm_eps: float
    act: str
    residual: str
    position: Mapping[str, object]
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    tie_embeddings: bool = False
    sliding_window: int = 0
    dtype: str = "fp32"
    graph: str = "fused"
    layers: tuple[LayerSpec, ...] = ()
    attn_scale: float = 0.0  # the logit scale; 0: 1/sqrt(head_dim) (Gemma: query_pre_attn_scalar ** -0.5)
    attn_softcap: float = 0.0  # cap * tanh(logits / cap) on attention logits (Gemma 2); 0: none
    final_softcap: float = 0.0  # the same on the output logits (Gemma 2); 0: none
    # "" or the multimodal wrapper whose text model this is (``hf.TEXT_CONFIGS``: "gemma3"): its checkpoint holds the
    # text model's weights under the wrapper's prefix beside other towers' tensors
    text_of: str = ""
    # a mixture of experts (``moe`` rows, gpt-oss; 0 elsewhere): E experts, k per token, the clamped SwiGLU's gain and
    # clamp; intermediate_size is then each expert's inner width
    num_experts: int = 0
    experts_per_token: int = 0
    swiglu_alpha: float = 0.0
    swiglu_limit: float = 0.0
    # How the projections are stored (``components.linear.WeightFormat``): "" rounded once to ``dtype`` (the
    # decoders built before int4); "int4" MatMulNBits blocks of ``block_size`` in features (0: 32), ``symmetric`` or
    # with a zero point per block, run at ``accuracy_level``. The embedding (unless ``tied_embedding_int4``), norms and
    # biases stay in ``dtype``.
    weight_format: str = ""
    block_size: int = 0
    accuracy_level: int = 0
    symmetric: bool = True
    # Tied embeddings in an int4 decoder: the head stored as the weight format stores a projection (MatMulNBits of the
    # embedding's transpose, as onnxruntime-genai's builder quantizes a tied head), the embedding gathered in
    # ``dtype`` unless ``tied_embedding_int4``. False: the head is the embedding read transposed, in ``dtype`` (int4
    # decoders built before; a float MatMul over the whole vocabulary: 27 of the 88 ms of a Llama-3.2-1B int4 decode
    # step at accuracy level 0).
    tied_head_int4: bool = False
    # With ``tied_head_int4``: the embedding gathered from the head's own int4 bytes (com.microsoft
    # GatherBlockQuantized of lm_head_Q4 reshaped to [vocab, bytes], the head's scales and zero points: ORT 1.31 reads
    # MatMulNBits' layout bit for bit, symmetric or not), as onnxruntime-genai's builder does; no embedding in
    # ``dtype`` is stored (Llama-3.2-1B fp32: its folder 1.73 -> 0.75 GiB, the builder's size). False: the embedding
    # gathered in ``dtype`` (tied int4 decoders built before).
    tied_embedding_int4: bool = False
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_PATTERN.match(self.name):
            raise SpecError("name", f"must match {NAME_PATTERN.pattern}, got {self.name!r}")
        require_choice("model_type", self.model_type, tuple(ARCHITECTURES))
        require_choice("dtype", self.dtype, DTYPES)
        require_choice("graph", self.graph, FORMS)
        if self.text_of:
            require_choice("text_of", self.text_of, tuple(TEXT_CONFIGS))
        for name, low, top in (("num_layers", 1, 1024), ("hidden_size", 1, 2**17), ("vocab_size", 1, 2**22),
                               ("intermediate_size", 1, 2**20), ("sliding_window", 0, None)):  # fmt: skip
            object.__setattr__(self, name, require_int(name, getattr(self, name), low, top))  # 32.0 -> 32
        if isinstance(self.norm_eps, bool) or not isinstance(self.norm_eps, (int, float)) or not 0 < self.norm_eps < 1:
            raise SpecError("norm_eps", f"must be a number in (0, 1), got {self.norm_eps!r}")
        self._check_experts()
        for name in ("attn_scale", "attn_softcap", "final_softcap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                raise SpecError(name, f"must be a finite number >= 0 (0: none), got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.attn_softcap and self.graph == "tensorrt":  # TensorRT's Attention has no softcap attribute
            raise SpecError("graph", "tensorrt cannot cap attention logits (attn_softcap, Gemma 2); use decomposed, "
                            "the form TensorRT parses with the cap written out")  # fmt: skip
        self._check_weight_format()
        position = self.position_spec()  # validates the encoding's fields
        if position.encoding not in ("rope", "alibi"):
            raise SpecError("position.encoding", f"a decoder takes rope or alibi, not {position.encoding!r}")
        width = position.num_heads * position.head_dim
        if self.architecture.fused_qkv == "per-head" and width != self.hidden_size:
            raise SpecError("hidden_size", f"must equal num_heads x head_dim ({width}) in {self.model_type}")
        object.__setattr__(self, "layers", self._read_layers(position))

    def _check_experts(self) -> None:
        """A ``moe`` row's mixture fields set and in range; every other row's zero."""
        names = ("num_experts", "experts_per_token", "swiglu_alpha", "swiglu_limit")
        if self.architecture.mlp != "moe":
            field_name = next((n for n in names if getattr(self, n)), None)
            if field_name is not None:
                raise SpecError(field_name, f"must be 0: {self.model_type} has no mixture of experts")
            return
        experts = require_int("num_experts", self.num_experts, 1, 2**12)
        top_k = require_int("experts_per_token", self.experts_per_token, 1, experts)
        object.__setattr__(self, "num_experts", experts)
        object.__setattr__(self, "experts_per_token", top_k)
        for name in names[2:]:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise SpecError(name, f"must be a finite number > 0 in a mixture of experts, got {value!r}")
            object.__setattr__(self, name, float(value))

    def _check_weight_format(self) -> None:
        """``weight_format`` and its int4 settings as ``linear.WeightFormat`` takes them (an int4 block size of 0
        becomes its default, 32); SpecError naming the field otherwise.
        """  # noqa: D205
        if self.tied_head_int4 and not (self.weight_format == "int4" and self.tie_embeddings):
            raise SpecError("tied_head_int4", "only an int4 decoder whose head is tied to its embedding stores that "
                            "head in int4 apart from the embedding")  # fmt: skip
        if self.tied_embedding_int4 and not self.tied_head_int4:
            raise SpecError("tied_embedding_int4", "the embedding is gathered from the int4 head's bytes only where "
                            "the head is stored in int4 (tied_head_int4)")  # fmt: skip
        if self.weight_format == "":
            WeightFormat(self.dtype, "", self.block_size, self.accuracy_level, self.symmetric)  # no int4 settings
            return
        if self.weight_format != "int4":
            raise SpecError("weight_format", f"must be int4, or empty for weights in the dtype ({self.dtype}); got "
                            f"{self.weight_format!r}")  # fmt: skip
        if self.graph == "tensorrt":
            raise SpecError("weight_format", "int4 (MatMulNBits, an ONNX Runtime contrib op) is not parsed by "
                            "TensorRT; use the fused, decomposed or gqa form")  # fmt: skip
        if self.num_experts:  # [E, n, m] expert weights: MatMulNBits holds 2-D weights; ORT's QMoE is not built
            raise SpecError("weight_format", f"int4 is not built for {self.model_type}'s experts (a mixture of "
                            "experts would need ONNX Runtime's QMoE kernel); build it with weights in fp32 or "
                            "fp16")  # fmt: skip
        made = WeightFormat.int4(self.dtype, self.block_size or DEFAULT_BLOCK_SIZE, self.accuracy_level,
                                 self.symmetric)  # fmt: skip
        object.__setattr__(self, "block_size", made.block_size)
        object.__setattr__(self, "accuracy_level", made.accuracy_level)

    def default_layer(self) -> LayerSpec:
        """The layer every layer is unless ``layers`` says otherwise: ``position``, ``sliding_window``, the norms of
        the residual form.
        """  # noqa: D205
        held = self.__dict__.get("_default")  # made once per spec (frozen: the fields it reads never change)
        if held is None:
            window = self.sliding_window
            held = LayerSpec(self.position, "sliding" if window else "full", window, self._norms())
            object.__setattr__(self, "_default", held)
        return held

    def _norms(self) -> tuple[str, ...]:
        return {"shared": ("norm1",), "sandwich": NORMS}.get(self.residual, PAIR)

    def _read_layers(self, model: Any) -> tuple[LayerSpec, ...]:
        """``layers`` as given (class doc) -> one checked LayerSpec per layer; SpecError names ``layers[i].field``."""
        default = self.default_layer()
        given = self.layers
        if given is None or (isinstance(given, (list, tuple)) and not given):
            return (default,) * self.num_layers
        if isinstance(given, (str, Mapping)) or not isinstance(given, (list, tuple)):
            raise SpecError("layers", f"must be a list of layers, got {type(given).__name__}")
        if len(given) != self.num_layers:
            raise SpecError("layers", f"holds {len(given)} layers, num_layers is {self.num_layers}")
        out = []
        for i, item in enumerate(given):
            where = f"layers[{i}]"
            if item is None:
                item = {}
            if isinstance(item, Mapping):
                fields = default.to_dict()
                unknown = next((k for k in item if k not in fields), None)
                if unknown is not None:
                    raise SpecError(f"{where}.{unknown}", f"is not a layer field; a layer has {', '.join(fields)}")
                try:
                    item = LayerSpec(**(fields | dict(item)))
                except SpecError as exc:
                    raise SpecError(f"{where}.{exc.field}", exc.message) from None
            elif not isinstance(item, LayerSpec):
                raise SpecError(where, f"must be a LayerSpec or a table of its fields, got {type(item).__name__}")
            if item != default:
                self._check_layer(where, item, model)
            out.append(item)
        return tuple(out)

    def _check_layer(self, where: str, layer: LayerSpec, model: Any) -> None:
        """What a layer may differ in from the model's default layer (SpecError naming the field otherwise)."""
        if layer.norms != self._norms():
            raise SpecError(f"{where}.norms", f"must be {list(self._norms())} in a {self.residual} residual (other "
                            "norms per layer are not built yet)")  # fmt: skip
        if layer.position is None:
            return
        try:
            position = self._block(layer.position)
        except SpecError as exc:
            raise SpecError(f"{where}.position.{exc.field.removeprefix('position.')}", exc.message) from None
        if position.encoding not in ("rope", "alibi"):
            raise SpecError(f"{where}.position.encoding", f"a decoder takes rope or alibi, not {position.encoding!r}")
        ours, theirs = _geometry(position), _geometry(model)
        for key in _GEOMETRY:
            if ours[key] != theirs[key]:
                raise SpecError(f"{where}.position.{key}", f"must be the model's ({theirs[key]}), got {ours[key]}: "
                                "every layer has the model's heads and head_dim")  # fmt: skip
        if position.max_positions != model.max_positions:
            raise SpecError(f"{where}.position.max_positions", f"must be the model's ({model.max_positions}), got "
                            f"{position.max_positions}: a model has one context length")  # fmt: skip
        if position.encoding == "rope" and position != model:
            from ropeexport.families.rope.schedules import get_schedule  # torch-free

            if get_schedule(position.scaling).regime != "static":
                # The scenarios and the cache policy follow the regime of the model's own position only.
                raise SpecError(f"{where}.position.scaling", f"{position.scaling!r} changes its tables with the length;"
                                " such a schedule can only be the model's own position")  # fmt: skip

    def _block(self, fields: Mapping[str, Any]) -> Any:
        """The encoding's ``block`` spec of position ``fields`` in the decoder's dtype and form."""
        fields = dict(fields) | {"artifact": "block", "dtype": self.dtype, "graph": self.graph}
        return spec_from_dict(fields | {"name": f"{self.name}-block"}, where="position")

    def layer(self, i: int) -> LayerSpec:
        """Layer i's spec."""
        return self.layers[i]

    def layer_position_spec(self, i: int) -> PositionSpec | None:
        """Layer i's encoding as a ``block`` spec (as ``position_spec``), or None: the layer has none."""
        position = self.layers[i].position
        if position is None:
            return None
        return self.position_spec() if position == self.default_layer().position else self._block(position)

    def position_specs(self) -> list[PositionSpec]:
        """The distinct ``block`` specs of the layers' encodings, in layer order (the model's first when used)."""
        out: list[PositionSpec] = []
        for i in range(self.num_layers):
            position = self.layer_position_spec(i)
            if position is not None and position not in out:
                out.append(position)
        return out

    @property
    def uniform(self) -> bool:
        """True when every layer is the default one (``to_dict`` then has no ``layers`` key)."""
        default = self.default_layer()
        return all(layer == default for layer in self.layers)

    @property
    def architecture(self) -> Architecture:
        """The model type's row of ``decoder.architectures``."""
        return ARCHITECTURES[self.model_type]

    def position_spec(self) -> PositionSpec:
        """The model's encoding as a ``block`` spec, in the decoder's dtype and form: what scenarios, regimes, the
        context length and reports read (a layer's own: ``layer_position_spec``).
        """  # noqa: D205
        return self._block(self.position)

    def to_dict(self) -> dict[str, object]:
        """Every field but ``sources``, as plain data (what decoder.json and the model's metadata store); ``layers``
        only when some layer differs from the default, each layer as the fields where it does (module doc).
        """  # noqa: D205
        skip = ("sources", "layers")
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in skip}
        for name in ("attn_scale", "attn_softcap", "final_softcap", "text_of", "num_experts", "experts_per_token",
                     "swiglu_alpha", "swiglu_limit"):  # written where set (earlier specs  # fmt: skip
            if not out[name]:  # serialize and hash as before)
                del out[name]
        if not self.weight_format:  # weights in the dtype: no int4 settings (earlier specs serialize as before)
            for name in ("weight_format", "block_size", "accuracy_level", "symmetric"):
                del out[name]
        for name in ("tied_head_int4", "tied_embedding_int4"):
            if not out[name]:  # as before the field existed
                del out[name]
        out["position"] = dict(self.position)
        if not self.uniform:
            default = self.default_layer().to_dict()
            out["layers"] = [{k: v for k, v in layer.to_dict().items() if v != default[k]} for layer in self.layers]
        return out

    def replace(self, **changes: object) -> DecoderSpec:
        """A copy with ``changes``, validated again. Layers that were the default one stay the default one (a new
        ``position`` or ``sliding_window`` reaches them); the others are kept, unless ``layers`` is given.
        """  # noqa: D205
        fields: dict[str, Any] = changes  # any values: ``__post_init__`` validates them, naming the field at fault
        if "layers" not in fields:
            default = self.default_layer()
            fields["layers"] = () if self.uniform else tuple(None if x == default else x for x in self.layers)
        return dataclasses.replace(self, **fields)

    def digest_text(self) -> str:
        """The spec as canonical JSON (what the model's metadata stores)."""
        return json.dumps(self.to_dict(), sort_keys=True)


def weight_label(fields: Mapping[str, Any]) -> str:
    """The weight format of a spec's fields (``to_dict``) in short, as a folder name carries it: "" for weights in the
    dtype, else ``int4-b32``, with ``-a4`` (the accuracy level, when set) and ``-asym`` (zero points).
    """  # noqa: D205
    if not fields.get("weight_format"):
        return ""
    level = f"-a{fields.get('accuracy_level')}" if fields.get("accuracy_level") else ""
    zero = "" if fields.get("symmetric", True) else "-asym"
    return f"{fields['weight_format']}-b{fields.get('block_size')}{level}{zero}"


def _first(config: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((k for k in keys if config.get(k) is not None), None)


def shrink(
    config: Mapping[str, Any],
    num_layers: int | None = None,
    hidden_size: int | None = None,
    vocab_size: int | None = None,
) -> dict[str, Any]:
    """A copy of ``config`` with fewer layers, a narrower width or a smaller vocabulary (a tiny model of a real
    config): head_dim kept, heads = hidden_size / head_dim, the query-per-KV-head ratio kept (at least one KV head),
    the MLP scaled by the same factor. The positional encoding's schedule is untouched.
    """  # noqa: D205
    out: dict[str, Any] = copy.deepcopy(dict(config))
    wrapper = out.get("model_type")
    if isinstance(out.get("text_config"), Mapping) and isinstance(wrapper, str) and wrapper in TEXT_CONFIGS:
        out["text_config"] = shrink(out["text_config"], num_layers, hidden_size, vocab_size)
        return out
    if num_layers is not None:
        key = _first(out, _LAYERS) or "num_hidden_layers"
        old_count, out[key] = out.get(key), require_int("num_layers", num_layers, 1, 1024)
        for per_layer in ("layer_types", "no_rope_layers"):  # the first layers of the model, as they are
            value = out.get(per_layer)
            if isinstance(value, list) and len(value) == old_count and num_layers <= len(value):
                out[per_layer] = value[:num_layers]
    if vocab_size is not None:
        out["vocab_size"] = require_int("vocab_size", vocab_size, 1, 2**22)
        # Special ids past the new vocabulary mean nothing (and an absent one takes the class default: Phi-3's pad
        # is 32000), so they are cleared unless they fit.
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if not (isinstance(out.get(key), int) and out[key] < vocab_size):
                out[key] = None
    if hidden_size is None:
        return out
    new = require_int("hidden_size", hidden_size, 1, 2**17)
    hidden_key, heads_key = _first(out, _HIDDEN), _first(out, _HEADS)
    if hidden_key is None or heads_key is None:
        raise SpecError("hidden_size", "the config names no hidden size or head count to shrink")
    old, heads = int(out[hidden_key]), int(out[heads_key])
    head_dim = int(out.get("head_dim") or old // heads)
    if new % head_dim:
        raise SpecError(
            "hidden_size", f"must be a multiple of head_dim ({head_dim}) to keep the rotary width, got {new}"
        )
    new_heads = new // head_dim
    if out.get("num_key_value_heads"):
        kv = max(1, new_heads // max(1, heads // int(out["num_key_value_heads"])))
        while new_heads % kv:  # the largest count at most the kept ratio that divides the heads
            kv -= 1
        out["num_key_value_heads"] = kv
    out[hidden_key], out[heads_key] = new, new_heads
    for key in ("intermediate_size", "n_inner"):
        if out.get(key):
            out[key] = max(1, round(int(out[key]) * new / old))
    return out


def from_config(
    config: Mapping[str, Any],
    name: str,
    where: str = "config.json",
    dtype: str = "fp32",
    graph: str = "fused",
    max_positions: int | None = None,
    weights: Mapping[str, Any] | None = None,
) -> DecoderSpec:
    """The decoder of a transformers config (after ``shrink``, if any); SpecError names the key at fault.

    ``weights``: how the projections are stored (``weight_format`` and its int4 settings; default: in the dtype).
    Per layer (``hf.import_layers``): its type's encoding, or none on a no-RoPE layer, and its type's attention (a
    sliding layer sees ``sliding_window`` key slots). The model's own ``position`` is its full-attention layers'
    encoding (the first layer's when every layer slides): what scenarios, regimes and the context length follow.
    """
    found = config.get("model_type")
    wrapper = found if isinstance(found, str) and found in TEXT_CONFIGS else ""  # a list is not even hashable
    config, where = text_config(config, where)
    layout, sources = read_layout(config, where)
    if wrapper:
        layout["text_of"], sources["text_of"] = wrapper, "model_type (the text model of a multimodal checkpoint)"
    layers = import_layers(config, where)
    default = next((layers.encodings[t] for t in layers.types if t == "full_attention"), None)
    default = default or layers.encodings[layers.types[0]]
    length = require_int("max_positions", max_positions, 1) if max_positions is not None else None

    def fields_of(imported_fields: Mapping[str, Any]) -> dict[str, Any]:
        position = dict(imported_fields)
        if length is not None:
            position["max_positions"] = length
        if "max_positions" not in position:  # BLOOM's config names no length (ALiBi extrapolates): its training one
            position["max_positions"] = DEFAULT_ALIBI_LENGTH
        return position

    position = fields_of(default.fields)
    imported_sources = dict(default.sources)
    if "max_positions" not in default.fields and length is None:
        imported_sources["max_positions"] = (
            f"default ({DEFAULT_ALIBI_LENGTH}, BLOOM's training length; --max-positions)"
        )
    sources |= {f"position.{k}": v for k, v in imported_sources.items()}
    per_layer = _layers_of(layers, layout, position, fields_of)
    if per_layer:
        sources["layers"] = "; ".join(f"{k} <- {v}" for k, v in layers.sources.items())
    return DecoderSpec(name=name, dtype=dtype, graph=graph, position=position, sources=sources,
                       layers=per_layer, **layout, **dict(weights or {}))  # type: ignore[arg-type]  # tables of fields: __post_init__ reads them


def _layers_of(layers: Layers, layout: Mapping[str, Any], position: Mapping[str, Any],
               fields_of: Any) -> tuple[Mapping[str, object] | None, ...]:  # fmt: skip
    """Per layer the fields where it differs from the model's default layer (``DecoderSpec.layers``), or () when
    every layer is the default one (a config of one encoding and one attention: the decoders built before layers).
    """  # noqa: D205
    if set(layers.types) == {"full_attention"} and all(layers.rotated):
        return ()
    out: list[Mapping[str, object] | None] = []
    for i, kind in enumerate(layers.types):
        layer: dict[str, object] = {}
        imported = layers.encoding(i)
        if imported is None:
            layer["position"] = None
        elif fields_of(imported.fields) != position:
            layer["position"] = fields_of(imported.fields)
        sliding = LAYER_TYPES[kind] == "sliding" and layers.window
        if sliding:
            layer |= {"attention": "sliding", "window": layers.window}
        elif layout.get("sliding_window"):
            layer |= {"attention": "full", "window": 0}
        out.append(layer)
    if all(not layer for layer in out):
        return ()
    return tuple(out)
