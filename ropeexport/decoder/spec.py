"""The decoder's spec: a whole decoder-only model from a transformers config, validated on construction.

Torch-free. ``DecoderSpec`` holds the structure (``decoder.architectures``) and ``position``, the positional
encoding's own spec fields exactly as ``ropeexport.hf`` imports them for every artifact; ``position_spec()`` is that
encoding's ``block`` spec in the decoder's dtype and graph form, the piece each layer calls. ``from_config`` applies
the size overrides that make a tiny test model of a real config (``--num-layers``, ``--hidden-size``,
``--vocab-size``) to the config itself, so the transformers reference is built from the same numbers.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ropeexport.catalog import spec_from_dict
from ropeexport.decoder.architectures import ARCHITECTURES, Architecture, read_layout
from ropeexport.errors import SpecError
from ropeexport.hf import import_config
from ropeexport.specs import NAME_PATTERN, require_choice, require_int

FORMS = ("fused", "decomposed", "tensorrt", "gqa")  # the block forms whose I/O a decoder layer can take as is
DTYPES = ("fp32", "fp16")  # ONNX Runtime's CPU kernels run no bf16 Attention or MatMul
POLICIES = ("re-prefill", "keep")
DEFAULT_ALIBI_LENGTH = 2048
_HEADS = ("num_attention_heads", "n_head")
_HIDDEN = ("hidden_size", "n_embd", "n_embed")
_LAYERS = ("num_hidden_layers", "n_layer")


@dataclass(frozen=True)
class DecoderSpec:
    """A decoder-only model: ``num_layers`` layers of norm, attention block (the encoding's piece inside) and MLP.

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
    position: Mapping[str, Any]
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    tie_embeddings: bool = False
    sliding_window: int = 0
    dtype: str = "fp32"
    graph: str = "fused"
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_PATTERN.match(self.name):
            raise SpecError("name", f"must match {NAME_PATTERN.pattern}, got {self.name!r}")
        require_choice("model_type", self.model_type, tuple(ARCHITECTURES))
        require_choice("dtype", self.dtype, DTYPES)
        require_choice("graph", self.graph, FORMS)
        for name, low, top in (("num_layers", 1, 1024), ("hidden_size", 1, 2**17), ("vocab_size", 1, 2**22),
                               ("intermediate_size", 1, 2**20), ("sliding_window", 0, None)):  # fmt: skip
            object.__setattr__(self, name, require_int(name, getattr(self, name), low, top))  # 32.0 -> 32
        if isinstance(self.norm_eps, bool) or not isinstance(self.norm_eps, (int, float)) or not 0 < self.norm_eps < 1:
            raise SpecError("norm_eps", f"must be a number in (0, 1), got {self.norm_eps!r}")
        position = self.position_spec()  # validates the encoding's fields
        if position.encoding not in ("rope", "alibi"):
            raise SpecError("position.encoding", f"a decoder takes rope or alibi, not {position.encoding!r}")
        width = position.num_heads * position.head_dim
        if self.architecture.fused_qkv == "per-head" and width != self.hidden_size:
            raise SpecError("hidden_size", f"must equal num_heads x head_dim ({width}) in {self.model_type}")

    @property
    def architecture(self) -> Architecture:
        """The model type's row of ``decoder.architectures``."""
        return ARCHITECTURES[self.model_type]

    def position_spec(self) -> Any:
        """The encoding's ``block`` spec: what one layer's attention computes, in the decoder's dtype and form."""
        fields = dict(self.position) | {"artifact": "block", "dtype": self.dtype, "graph": self.graph}
        return spec_from_dict(fields | {"name": f"{self.name}-block"}, where="position")

    def to_dict(self) -> dict[str, Any]:
        """Every field but ``sources``, as plain data (what decoder.json and the model's metadata store)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "sources"}
        out["position"] = dict(self.position)
        return out

    def replace(self, **changes: Any) -> DecoderSpec:
        """A copy with ``changes``, validated again."""
        return dataclasses.replace(self, **changes)

    def digest_text(self) -> str:
        """The spec as canonical JSON (what the model's metadata stores)."""
        return json.dumps(self.to_dict(), sort_keys=True)


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
    config = copy.deepcopy(dict(config))
    if num_layers is not None:
        config[_first(config, _LAYERS) or "num_hidden_layers"] = require_int("num_layers", num_layers, 1, 1024)
    if vocab_size is not None:
        config["vocab_size"] = require_int("vocab_size", vocab_size, 1, 2**22)
        # Special ids past the new vocabulary mean nothing (and an absent one takes the class default: Phi-3's pad
        # is 32000), so they are cleared unless they fit.
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if not (isinstance(config.get(key), int) and config[key] < vocab_size):
                config[key] = None
    if hidden_size is None:
        return config
    new = require_int("hidden_size", hidden_size, 1, 2**17)
    hidden_key, heads_key = _first(config, _HIDDEN), _first(config, _HEADS)
    if hidden_key is None or heads_key is None:
        raise SpecError("hidden_size", "the config names no hidden size or head count to shrink")
    old, heads = int(config[hidden_key]), int(config[heads_key])
    head_dim = int(config.get("head_dim") or old // heads)
    if new % head_dim:
        raise SpecError(
            "hidden_size", f"must be a multiple of head_dim ({head_dim}) to keep the rotary width, got {new}"
        )
    new_heads = new // head_dim
    if config.get("num_key_value_heads"):
        kv = max(1, new_heads // max(1, heads // int(config["num_key_value_heads"])))
        while new_heads % kv:  # the largest count at most the kept ratio that divides the heads
            kv -= 1
        config["num_key_value_heads"] = kv
    config[hidden_key], config[heads_key] = new, new_heads
    for key in ("intermediate_size", "n_inner"):
        if config.get(key):
            config[key] = max(1, round(int(config[key]) * new / old))
    return config


def from_config(
    config: Mapping[str, Any],
    name: str,
    where: str = "config.json",
    dtype: str = "fp32",
    graph: str = "fused",
    max_positions: int | None = None,
) -> DecoderSpec:
    """The decoder of a transformers config (after ``shrink``, if any); SpecError names the key at fault."""
    layout, sources = read_layout(config, where)
    imported = import_config(config, where)
    position = dict(imported.fields)
    if max_positions is not None:
        position["max_positions"] = require_int("max_positions", max_positions, 1)
    if "max_positions" not in position:  # BLOOM's config names no length (ALiBi extrapolates): its training length
        position["max_positions"] = DEFAULT_ALIBI_LENGTH
        imported.sources["max_positions"] = (
            f"default ({DEFAULT_ALIBI_LENGTH}, BLOOM's training length; --max-positions)"
        )
    sources |= {f"position.{k}": v for k, v in imported.sources.items()}
    return DecoderSpec(name=name, dtype=dtype, graph=graph, position=position, sources=sources, **layout)
