"""The proof's truth: the float64 logits a foreign decoder is judged against (``audits.prove``), and which one is used.

One protocol (``Truth``), two truths, chosen by the checkpoint's model type (``prove.choose``):
- ``OracleTruth``: ropeexport's own float64 decoder (``decoder.oracle.decoders_float64`` over
  ``resolve(DecoderRequest(...))``), for every model type ropeexport builds as a decoder (``architectures.PACKAGES``
  and their multimodal wrappers). It reads the checkpoint layer by layer and can be given cached entries.
- ``TransformersTruth`` (``audits.hf_truth``): transformers' own model of the checkpoint in float64, eager attention,
  no cache, each rotary module's cos/sin from exact float64 angles per layer type, for a model type ropeexport does
  not build and the installed transformers knows (Qwen3.5, Granite 4, LFM2, Gemma 3n, ...).

How a call of n tokens reaching position p + n - 1 is placed (``Call.how``), by what the truth can give honestly:
- ``cache``: n tokens after p random cached entries per layer, the truth given the same entries (the oracle truth, for
  a model with a cache input: a cheap far call, whatever p);
- ``positions``: the n tokens alone, at positions p .. p + n - 1 by position_ids, no cached entry (a model with a
  cache input gets an empty one): the transformers truth, whose model runs without a cache, never sees random
  entries, so the ONNX model is never fed any; and the oracle truth for a model with position_ids and no cache;
- ``whole``: the whole sequence 0 .. p + n - 1 fed to both (the model with an empty cache), its last n tokens judged:
  the transformers truth for a model that takes no position_ids, up to ``WHOLE`` tokens.
A call neither can place is not run, and says why (the verdict is then partial, never proven).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ropeexport.audits.axes import AXES, call_positions
from ropeexport.errors import SpecError

TOKENS = 8  # the tokens of a call judged
WHOLE = 4096  # the longest sequence a ``whole`` call feeds (the truth's eager attention is quadratic in it)
HOWS = ("cache", "positions", "whole")
KINDS = ("oracle", "transformers")  # ``prove.choose``'s truths; "auto": the oracle where ropeexport builds the type


@dataclass(frozen=True)
class Call:
    """One far call as fed: ``index`` (its seed), ``past`` (p: its judged tokens sit at p .. p + n - 1), ``how``
    (module doc) and ``ids`` [1, n] (``whole``: [1, p + n]).
    """  # noqa: D205

    index: int
    past: int
    how: str
    ids: np.ndarray
    cache: str = "expanded"  # the form of its cached entries (``Cache``): the model's, read from its inputs


def call_ids(vocab: int, index: int, past: int, how: str) -> np.ndarray:
    """The ids [1, n] of call ``index`` (a ``whole`` call: [1, p + n], its own draw), the same for every model."""
    if how == "whole":
        return np.random.default_rng((index, 1)).integers(0, vocab, (1, past + TOKENS)).astype(np.int64)
    return np.random.default_rng(index).integers(0, vocab, (1, TOKENS)).astype(np.int64)


class Cache(Sequence[tuple[np.ndarray, np.ndarray]]):
    """Per layer the (key, value) [1, KV, past, d] cached before call ``index``: std 1, drawn when asked for from a
    generator seeded by the call and the layer (the model and the recompute get the same values), in ``dtype``.
    The recompute asks for one layer's at a time (float64); the model takes them all at once (float32).
    ``cache`` ``latent``: a latent layer's pair is its latent cache instead (``LayerSpec.cache_shapes``), the normed
    latent [1, 1, past, kv_lora_rank] and the rotated rope key [1, 1, past, rope], which the recompute expands
    through kv_b_proj as the model does (``components.latent.float64``). A layer reading another's keys and values
    (``kv_from``) is fed none: the model and the recompute (``oracle.decoders_float64``) read its source layer's,
    and Mistral Large 4's reusing layer its own ``index_key`` beside them.
    """  # noqa: D205

    def __init__(self, spec: Any, index: int, past: int, dtype: Any = np.float32, cache: str = "expanded") -> None:
        self.spec, self.call, self.past, self.dtype, self.cache = spec, index, past, dtype, cache

    def __getitem__(self, layer: Any) -> Any:
        if not isinstance(layer, int) or not 0 <= layer < len(self):
            raise IndexError(layer)
        # an indexer's keys, cached third, are drawn apart (``index_key``)
        (key_heads, key_width), (value_heads, value_width), *_ = self.spec.layers[layer].cache_shapes(
            self.spec.graph, self.cache)  # fmt: skip
        rng = np.random.default_rng((self.call, layer))
        # key then value from one generator: the draws a standard layer's [2, 1, KV, past, d] gave, in that order
        k = rng.standard_normal((1, key_heads, self.past, key_width), dtype=np.float32)
        v = rng.standard_normal((1, value_heads, self.past, value_width), dtype=np.float32)
        return k.astype(self.dtype, copy=False), v.astype(self.dtype, copy=False)

    def __len__(self) -> int:
        return int(self.spec.num_layers)

    @staticmethod
    def form(spec: Any, cached: Mapping[int, Mapping[str, Any]], model: Path) -> str:
        """The form of a model's cache inputs (``cached``: per layer its ``key`` and ``value`` input, each with a
        name and a declared shape [batch, heads, past, width]): ``latent`` where the latent layers' are their latent
        cache (the normed latent [batch, 1, past, kv_lora_rank] and the rotated rope key [batch, 1, past, rope]:
        ``LayerSpec.cache_shapes``), else ``expanded``. SpecError naming the first layer's inputs whose fixed heads
        or width are neither's (ONNX Runtime would refuse what a ``Cache`` of either form draws for them).
        """  # noqa: D205

        def shapes(layer: int, form: str) -> list[tuple[int, int]]:  # (heads, width) of its key's, of its value's
            return list(spec.layers[layer].cache_shapes(spec.graph, form))[:2]

        def fit(form: str) -> list[int]:  # the layers whose key and value inputs take the form's shapes
            return [layer for layer, kv in sorted(cached.items()) if all(_fits(kv[tail].shape, shape) for tail, shape
                                                                         in zip(("key", "value"), shapes(layer, form),
                                                                                strict=True))]  # fmt: skip

        expanded, latent = fit("expanded"), fit("latent")
        # the form more layers take (a standard layer takes both): a layer that takes it not is named
        form, fits = ("latent", latent) if len(latent) > len(expanded) else ("expanded", expanded)
        odd = next((layer for layer in sorted(cached) if layer not in fits), None)
        if odd is not None:
            key, value = cached[odd]["key"], cached[odd]["value"]
            raise SpecError("model", f"{str(model)!r} has cache inputs {key.name} {list(key.shape)} and "
                            f"{value.name} {list(value.shape)}: the decoder proof feeds layer {odd} (heads, width) "
                            f"{shapes(odd, 'expanded')} (its keys and values) or, a latent layer, "
                            f"{shapes(odd, 'latent')} (its latent and rotated rope key)")  # fmt: skip
        return form

    def index_key(self, layer: int, width: int) -> np.ndarray:
        """Layer ``layer``'s indexer keys [1, 1, past, width] cached before the call (DeepSeek Sparse Attention's
        ``past_key_values.{i}.index_key``: ``width`` its index_head_dim, the model's input's last axis): std 1, from a
        generator of their own (the call, the layer, 1), so the key and value draws stay those above.
        """  # noqa: D205
        rng = np.random.default_rng((self.call, layer, 1))
        return rng.standard_normal((1, 1, self.past, width), dtype=np.float32).astype(self.dtype, copy=False)


def _fits(declared: Any, shape: tuple[int, int]) -> bool:
    """Whether an input declared [batch, heads, past, width] takes (heads, width) (a named axis takes any)."""
    dims = list(declared)
    return len(dims) == 4 and all(not isinstance(d, int) or d == w for d, w in zip(dims[1::2], shape, strict=True))


class ProofWeights(Mapping[str, np.ndarray]):
    """The recompute's weights, float64, each read when asked for: ``held`` (the model's own int4 projections) where
    it has them, else the checkpoint's as the graph stores them (``oracle.Stored64``); ``vocab_part`` reads a slice
    of the embedding or the head alone.
    """  # noqa: D205

    def __init__(self, stored: Mapping[str, np.ndarray], held: Mapping[str, np.ndarray]) -> None:
        self.stored, self.held = stored, held

    def __getitem__(self, name: str) -> np.ndarray:
        return self.held[name] if name in self.held else self.stored[name]

    def __contains__(self, name: object) -> bool:
        return name in self.held or name in self.stored  # Mapping's own reads (and dequantizes) the weight

    def __iter__(self) -> Iterator[str]:
        return iter(self.stored)

    def __len__(self) -> int:
        return len(self.stored)

    def vocab_part(self, name: str, start: int, stop: int) -> np.ndarray:
        """float64 rows [start, stop) of ``embed`` or columns of ``lm_head``."""
        from ropeexport.decoder.weights import vocab_part

        return vocab_part(self.held if name in self.held else self.stored, name, start, stop)


class Truth(Protocol):
    """What the proof needs of a truth (module doc).

    ``kind``: ``oracle`` or ``transformers``; ``words``: the truth in a user's words; ``reference``: the report's
    sentence; ``spec``: the model's shape as the proof reads it (``vocab_size``, ``num_layers``, ``tie_embeddings``,
    ``layers[i].geometry`` (heads, KV heads, head_dim), ``layers[i].cache_shapes(graph)`` and ``graph`` (the cached
    key's and value's (heads, width)), ``position_spec()``: the encoding whose far calls are run);
    ``source``: where its weights come from; ``tolerance``: the bound of a call's error over the logit scale.
    """

    kind: str
    words: str
    traced: str  # what ``stages`` traces, in a user's words
    reference: str
    spec: Any
    source: str
    tolerance: float

    def placement(self, cached: bool, positions: bool, past: int) -> str:
        """How a call after ``past`` is placed for a model with a cache input (``cached``) and position_ids
        (``positions``): one of ``HOWS``, or why it cannot be.
        """  # noqa: D205
        ...

    def logits(self, calls: list[Call]) -> list[np.ndarray]:
        """float64 logits [n, vocab] of each call's judged tokens."""
        ...

    def bound(self, level: int | None) -> float:
        """The bound of a call's error with 4-bit weights run at ``level`` (None: weights in the dtype)."""
        ...

    def stages(self, call: Call) -> list[tuple[Any, np.ndarray]]:
        """The residual stream of ``call`` in float64, stage by stage, in order: (``oracle.Stage``, h [1, n, hidden])
        (``audits.locate``); ``traced`` names it in a user's words.
        """  # noqa: D205
        ...


class OracleTruth:
    """ropeexport's float64 decoder (module doc): the checkpoint read by ``CheckpointWeights``, where the model holds
    4-bit projections those taken from the model (``audits.prove`` module doc), recomputed layer by layer.
    """  # noqa: D205

    kind = "oracle"
    words = "float64 recompute by ropeexport's decoder"
    traced = "the float64 recompute"

    def __init__(self, hf_config: Path, checkpoint: Path, model: Path | None, dtype: str, graph: Any = None) -> None:
        from ropeexport.audits.proof_verdict import source_words
        from ropeexport.decoder.build import DecoderRequest, resolve
        from ropeexport.decoder.checkpoint import CheckpointWeights
        from ropeexport.decoder.held import HeldWeights, held_weights
        from ropeexport.decoder.oracle import Stored64
        from ropeexport.decoder.parts import position_pieces

        self.spec, _ = resolve(DecoderRequest(hf_config=hf_config, checkpoint=checkpoint, dtype=dtype))
        self.pieces = position_pieces(self.spec)  # per layer its encoding's float64 twin (None: a layer without)
        if graph is None or model is None:  # no ONNX model to take 4-bit weights from: the checkpoint's alone
            held, level = HeldWeights({}, {}), 0
        else:
            held, level = held_weights(graph, self.spec, Path(model).resolve().parent)
        self.weights64 = ProofWeights(Stored64(self.spec, CheckpointWeights(self.spec, checkpoint)), held)
        self.tolerance = self.bound(level if held else None)
        self.source = source_words(held, self.spec.tie_embeddings)
        self.reference = (f"{self.words}: the whole decoder from {self.source} (ropeexport.decoder.oracle), exact "
                          "positions, the regime of L = max(position_ids) + 1")  # fmt: skip

    def bound(self, level: int | None) -> float:
        """``decoder verify``'s bound for the spec, with int4 weights run at ``level`` (None: weights in the dtype)."""
        from ropeexport.decoder.verify import tolerance

        spec = self.spec if level is None else self.spec.replace(weight_format="int4", accuracy_level=level)
        return tolerance(spec)

    def placement(self, cached: bool, positions: bool, past: int) -> str:
        """``cache`` for a model with a cache input, ``positions`` for one placed by position_ids (or at 0)."""
        if cached:
            return "cache"
        if positions or not past:
            return "positions"
        return "the model takes neither a cache nor position_ids: its tokens always sit at 0 .. n - 1"

    def feed(self, call: Call) -> Any:
        """``call`` as the recompute takes it (``oracle.Feed``): with its cache, placed by positions, or whole."""
        from ropeexport.decoder.oracle import Feed

        n = call.ids.shape[1]
        start = 0 if call.how == "whole" else call.past
        pos = np.arange(start, start + n, dtype=np.int64).reshape(1, n)
        if self.spec.positions.axes == AXES:  # M-RoPE: the call's image grid, as the model is fed (``axes``)
            pos = call_positions(start, n)
        cache = Cache(self.spec, call.index, call.past, np.float64, call.cache) if call.how == "cache" else None
        mask = np.ones((1, n + (call.past if cache is not None else 0)), np.int64)
        return Feed(call.ids, pos, mask, n - TOKENS, cache)

    def logits(self, calls: list[Call]) -> list[np.ndarray]:
        """Every call in one pass over the weights (``oracle.decoders_float64``: one layer at a time)."""
        from ropeexport.decoder.oracle import decoders_float64

        found = decoders_float64(self.spec, self.weights64, [self.feed(c) for c in calls], self.pieces)
        return [logits[0] for logits in found]

    def stages(self, call: Call) -> list[tuple[Any, np.ndarray]]:
        """The recompute's residual stream of ``call`` (``decoders_float64``'s trace): after the embedding, after each
        layer's attention and its MLP (a parallel layer's whole block), each h [1, n, hidden].
        """  # noqa: D205
        from ropeexport.decoder.oracle import decoders_float64

        found: list[tuple[Any, np.ndarray]] = []
        decoders_float64(self.spec, self.weights64, [self.feed(call)], self.pieces,
                         trace=lambda _, stage, h: found.append((stage, h)))  # fmt: skip
        return found
