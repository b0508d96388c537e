"""The truth for a decoder: a no-cache full recompute in float64 with exact positions.

Every call recomputes the whole sequence so far from the stored weights (``linear.WeightFormat.read64``: the values
the graph holds), every operation in float64: the same composition of components as ``decoder.export`` over
``spec.layers``, each component's float64 twin (``norm64``, ``mlp64`` or ``moe64``, ``attention64``) in place of its
graph, each layer with its own window and its position piece's float64 twin (RoPE: the complex form, each row at its
own L_b = max(position_ids[b]) + 1 of the whole sequence, so cached keys are never reused under an old regime and a
row's truth never depends on its batch; a layer without positional encoding: nothing rotated). Nothing here reads a
graph or a runtime.

At any size (``decoders_float64``): the calls of a scenario go through the model together, layer by layer, so one
layer's float64 weights are resident at a time (read as the graph stores them, ``Stored64``), beside each call's
activations and that layer's keys and values; the embedding is read by the rows the calls use, the output head in
slices of the vocabulary, and logits are computed only for the slots a call asks for. Each call's arithmetic is the
one call's alone (the same operations on the same arrays as computing it by itself).

Calls that extend one another (``chained_float64``): a greedy generation's calls each hold the sequence so far (a
64-step decode recomputed call by call costs 37 times its last call). A call whose sequence is a prefix of a later
call's, under the same tables, takes its slots from the later call, computed once (causal attention: a slot reads only
the slots before it): its own recompute's values up to float64 sums over another length (within 1e-12 of the scale,
tested). "The same tables" is tested, not assumed: every layer's float64 rotation of the shorter call's positions, with
the longer call's L_b, must equal it with the shorter's, bit for bit (a LongRoPE switch or a dynamic NTK base crossed
between them fails it, and the call is recomputed whole), and every bias on the shorter call's slots likewise.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ropeexport.components.attention.float64 import Bias64, Rotate64, attention64
from ropeexport.components.gemma4_moe import Gemma4MoESpec, branch_mixing
from ropeexport.components.grouped_moe import SharedMoESpec, shared_mixing
from ropeexport.components.latent import LatentSpec
from ropeexport.components.latent.float64 import index_feeds, latent64
from ropeexport.components.linear import is_weight, linear64
from ropeexport.components.mixing import Mixing, mixed_together, part
from ropeexport.components.mlp import MLPSpec, mlp64
from ropeexport.components.moe import moe_mixing
from ropeexport.components.norm import norm64
from ropeexport.decoder.export import embed_scale
from ropeexport.decoder.parts import (
    Pieces,
    attention_spec,
    head_name,
    latent_spec,
    mlp_spec,
    norm_spec,
    twins,
    weight_format,
)
from ropeexport.decoder.per_layer import inputs64, layer64
from ropeexport.decoder.phases import MLP_NAMES, PhasedLayer
from ropeexport.decoder.routing import Routing
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.decoder.weights import layer_weights, vocab_part
from ropeexport.numerics import one_blas_thread, round_once
from ropeexport.recipes import PositionPiece

# The output head multiplied in slices of at most this many float64 bytes (in float64 Llama-3.2-1B's is 2 GiB, 8B's 4)
HEAD_SLICE_BYTES = 256 * 2**20


class Stored64(Mapping[str, np.ndarray]):
    """The weights as the graph stores them, in float64, each converted when asked for (module doc): projections as
    the weight format reads them back, an embedding gathered from its int4 head (``DecoderSpec.tied_embedding_int4``)
    as that gather reads it (``WeightFormat.rows64``), everything else rounded once to the dtype. ``vocab_part``
    reads a slice of the embedding or the head alone (a format's ``read64`` of a column slice: every format here
    stores a projection's output columns independently).
    """  # noqa: D205

    def __init__(self, spec: DecoderSpec, weights: Mapping[str, np.ndarray],
                 held: Mapping[str, np.ndarray] | None = None) -> None:  # fmt: skip
        self.spec, self.weights, self.reads = spec, weights, weight_format(spec)
        # A tied head stored in int4 (``parts.head_name``) is a weight of its own here: the embedding's transpose as
        # the weight format stores it.
        self.derived = spec.tie_embeddings and head_name(spec) == "lm_head" and "lm_head" not in weights
        # ``held``: projections read back from the written model (``decoder.held.held_weights``: int4 dequantized as
        # stored), the same values ``read64`` makes from the checkpoint without quantizing each weight again: what
        # makes a real-size int4 model's truth take minutes, not hours.
        self.held = held if held is not None else {}

    def _stored(self, name: str, value: np.ndarray) -> np.ndarray:
        if is_weight(name):
            return self.reads.read64(value)
        if name.endswith("router_correction"):  # the graph holds it in float32 (``grouped_moe.grouped_routing``)
            return round_once(value, "fp32").astype(np.float64)
        if name == "embed" and self.spec.storage.tied_embedding_int4:  # rows [vocab, hidden] from the int4 head
            return self.reads.rows64(value.T)
        return round_once(value, self.spec.dtype).astype(np.float64)

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self.held:
            return self.held[name]
        if name == "lm_head" and self.derived:
            return self._stored(name, self.weights["embed"].T)
        return self._stored(name, self.weights[name])

    def __contains__(self, name: object) -> bool:
        # Mapping's own converts the weight to float64
        return name in self.weights or (name == "lm_head" and self.derived)

    def __iter__(self) -> Iterator[str]:
        return iter([*self.weights, *(["lm_head"] if self.derived else [])])

    def __len__(self) -> int:
        return len(self.weights) + self.derived

    def expert(self, name: str, e: int) -> np.ndarray:
        """float64 expert e's part of the [E, ...] weight ``name`` as stored, read alone where the weights can
        (``CheckpointWeights.expert``: experts stored apart): the same values as ``self[name][e]``, each expert
        quantized alone either way (``WeightFormat.read64``).
        """  # noqa: D205
        if name in self.held:
            return self.held[name][e]
        one = getattr(self.weights, "expert", None)
        return self._stored(name, one(name, e) if one is not None else self.weights[name][e])

    def vocab_part(self, name: str, start: int, stop: int) -> np.ndarray:
        """float64 rows [start, stop) of ``embed`` or columns of ``lm_head``, as stored."""
        held = self.held
        if name in held and hasattr(held, "vocab_part"):
            return np.asarray(held.vocab_part(name, start, stop))
        if name == "lm_head" and self.derived:  # the embedding's rows, transposed: the head's columns
            return self._stored(name, vocab_part(self.weights, "embed", start, stop).T)
        return self._stored(name, vocab_part(self.weights, name, start, stop))


@dataclass(frozen=True)
class Stage:
    """A point of the residual stream ``decoders_float64`` traces: after the embedding (``layer`` -1), after a layer's
    attention or its MLP (``part``), or after a parallel layer's whole block (attention and MLP together).
    """  # noqa: D205

    layer: int
    part: str  # embedding, attention, mixer (a hybrid's token mixer that is not attention), mlp, block

    def words(self) -> str:
        """The stage in words: ``the embedding``, ``layer 3's attention``, ``layer 3's token mixer``, ``layer 3's
        MLP``, ``layer 3``.
        """  # noqa: D205
        if self.layer < 0:
            return "the embedding"
        part = {"attention": "'s attention", "mixer": "'s token mixer", "mlp": "'s MLP"}.get(self.part, "")
        return f"layer {self.layer}{part}"


@dataclass(frozen=True)
class Feed:
    """One call to recompute: the sequence so far (input_ids [b, s], position_ids [b, s] or M-RoPE's [3, b, s];
    attention_mask [b, p + s]), the slots whose logits are wanted ([first, s)), and ``past``: per layer the (key,
    value) [b, KV, p, d] cached before it, given rather than recomputed (None: none; the graft proof's latent cache:
    ``audits.truth.Cache``, a latent layer's pair its latent and rotated rope key [b, 1, p, *], its twin expands).
    """  # noqa: D205

    input_ids: np.ndarray
    position_ids: np.ndarray
    attention_mask: np.ndarray
    first: int = 0
    past: Sequence[tuple[np.ndarray, np.ndarray]] | None = None


def stored_float64(spec: DecoderSpec, weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The weights as the graph stores them, held in float64, all at once (``Stored64``: one at a time)."""
    return dict(Stored64(spec, weights).items())


def decoder_float64(
    spec: DecoderSpec,
    weights64: Mapping[str, np.ndarray],
    input_ids: np.ndarray,
    position_ids: np.ndarray,
    attention_mask: np.ndarray,
    rotate: Rotate64 | None = None,
    bias: Bias64 | None = None,
    past: Sequence[tuple[np.ndarray, np.ndarray]] | None = None,
    *,
    pieces: Pieces | None = None,
    routing: Routing | None = None,
) -> np.ndarray:
    """float64 logits [b, s, vocab] of the whole sequence (input_ids, position_ids [b, s]; attention_mask [b, s]).

    ``weights64``: ``stored_float64`` of the decoder's weights. ``pieces``: per layer its position piece
    (``parts.position_pieces``; its float64 twin is used), None for a layer without one. ``rotate`` / ``bias``
    instead: a uniform decoder's one float64 position function (``kinds.PositionPiece``), for every layer that has a
    positional encoding. ``past``: per layer the (key, value) [b, KV, p, d] some earlier calls cached (keys already
    rotated), given rather than recomputed (``audit.prove`` places a call after p arbitrary entries this way);
    attention_mask is then [b, p + s]. ``routing``: a mixture of experts' near ties collected and flips applied
    (``Routing``); None: each token routed by its float64 router logits.
    """
    if pieces is None:
        pieces = twins(spec, PositionPiece(rotate64=rotate, bias64=bias))
    feed = Feed(input_ids, position_ids, attention_mask, 0, past)
    return decoders_float64(spec, weights64, [feed], pieces, [routing])[0]


@one_blas_thread  # wherever the truth runs: its bits the same, and no two threads waiting on each other
def decoders_float64(
    spec: DecoderSpec,
    weights64: Mapping[str, np.ndarray],
    feeds: Sequence[Feed],
    pieces: Pieces,
    routings: Sequence[Routing | None] | None = None,
    on_layer: Callable[[int], None] | None = None,
    trace: Callable[[int, Stage, np.ndarray], None] | None = None,
) -> list[np.ndarray]:
    """Per feed, float64 logits [b, s - first, vocab] of its slots [first, s): ``decoder_float64`` of each, computed
    layer by layer for all of them (module doc). ``weights64``: ``Stored64`` (or ``stored_float64``) of the
    decoder's weights; ``pieces``: per layer its position piece (``parts.position_pieces``), None for a layer
    without one; ``routings``: per feed its ``Routing`` of a mixture of experts (None: the float64 routing);
    ``on_layer(i)``: told as layer i is reached (a real size takes minutes a pass); ``trace(feed, stage, h)``: each
    feed's residual stream h [b, s, hidden] after each stage (``Stage``), in order.
    """  # noqa: D205
    if len(pieces) != spec.num_layers:
        raise ValueError(f"pieces holds {len(pieces)} layers, the decoder has {spec.num_layers}")
    for feed in feeds:
        if feed.past is not None and len(feed.past) != spec.num_layers:
            raise ValueError(f"past holds {len(feed.past)} layers, the decoder has {spec.num_layers}")
    norm_of = norm_spec(spec)
    mlps = [mlp_spec(spec, i) for i in range(spec.num_layers)]
    routings = list(routings) if routings is not None else [None] * len(feeds)

    def planned(y: np.ndarray, w: Mapping[str, np.ndarray], layer: int, routing: Routing | None,
                h: np.ndarray | None = None) -> Mixing:  # fmt: skip
        """One feed's mixture routed (``mixing``), its near ties collected and flips applied by ``routing``."""
        mlp_of = mlps[layer]  # h: the residual stream, which Gemma 4's mixture reads beside y (``gemma4_moe``)
        assert not isinstance(mlp_of, MLPSpec)  # a dense MLP is computed a feed at a time (``_forward``)
        if isinstance(mlp_of, Gemma4MoESpec):
            assert h is not None  # a sandwich layer's (the only residual form Gemma 4 has)
            plan = lambda y, w, *a: branch_mixing(mlp_of, h, y, w, *a)  # noqa: E731
        else:
            plan = (lambda *a: shared_mixing(mlp_of.router, *a)) if isinstance(mlp_of, SharedMoESpec) else (  # noqa: E731
                lambda *a: moe_mixing(mlp_of, *a))  # fmt: skip
        if routing is None:
            return plan(y, w)
        t = y.shape[1]  # a token's flat index: row x t + slot
        found: tuple[float, list[tuple[int, float]]] = (routing.bound, [])
        out = plan(y, w, [r * t + j for r, j in routing.router_flips(layer)], found if routing.bound else None)
        routing.ties.extend((layer, token // t, token % t, margin) for token, margin in found[1])
        return out

    normed = lambda x, w, name: norm64(norm_of, x, w[f"{name}.weight"], w.get(f"{name}.bias"))  # noqa: E731
    top = {n: weights64[n] for n in weights64 if not n.startswith("layers.") and n not in ("embed", "lm_head")}
    hs = [_embedded(weights64, feed.input_ids) for feed in feeds]
    if spec.architecture.embed_scale:
        hs = [h * embed_scale(spec).astype(np.float64) for h in hs]
    if spec.architecture.has("embed_norm.weight"):
        hs = [normed(h, top, "embed_norm") for h in hs]
    # Gemma 4's per-layer input embeddings: per feed, every layer's input [b, s, L, P]
    plis = [inputs64(spec, norm_of, h, feed.input_ids, top) for h, feed in zip(hs, feeds, strict=True)] if (
        spec.per_layer_input) else []  # fmt: skip
    seen = trace if trace is not None else lambda j, stage, h: None
    for j, h in enumerate(hs):
        seen(j, Stage(-1, "embedding"), h)
    shared: dict[int, list[dict[str, np.ndarray]]] = {}  # per storing layer, per feed: its new keys and values
    selections: dict[int, Any] = {}  # per feed, the last full indexer layer's selection (``index_feeds``)
    for i, layer in enumerate(spec.layers):
        if on_layer is not None:
            on_layer(i)
        (key_heads, key_width), (value_heads, value_width), *_ = layer.cache_shapes()  # as computed: unpadded
        w = _layer64(weights64, i)  # this layer's weights in float64, read once for every feed (experts: _Experts)
        block = w.block()  # the attention's weights: gone once every feed has passed it (``phases``)
        latent = layer.attention.kind == "latent"  # its twin holds the cache unpadded (the decomposed form's)
        attend = latent_spec(spec, i, pieces[i], "decomposed") if latent else attention_spec(spec, i, pieces[i])
        given = latent_spec(spec, i, pieces[i], "decomposed", "latent") if latent else None  # over a latent past
        reads = layer.attention.kv_from  # another layer's keys and values (Gemma 4): its cache and new ones
        # A feed through the layer, paused at its feed-forward (``Pass``, ``_forward``); the layer's values bound as
        # defaults: each pass runs to its end within this iteration.
        def through(j: int, feed: Feed, i: int = i, layer: Any = layer, w: dict[str, np.ndarray] = w,
                    block: dict[str, np.ndarray] = block, attend: Any = attend, reads: int | None = reads,
                    shapes: tuple[int, ...] = (key_heads, key_width, value_heads, value_width),
                    given: LatentSpec | None = given) -> Pass:  # fmt: skip
            h = hs[j]
            x = normed(h, w, "norm1") if "norm1" in layer.norms else h  # the post residual has no norm before
            b = feed.input_ids.shape[0]
            key, value = ((np.zeros((b, shapes[0], 0, shapes[1])), np.zeros((b, shapes[2], 0, shapes[3])))
                          if feed.past is None else feed.past[i if reads is None else reads])  # fmt: skip
            expands = given is not None and getattr(feed.past, "cache", "") == "latent"  # the proof's: ``truth.Cache``
            attend = given if expands else attend  # its twin over the latent cache expands what it is given
            names = ("past_latent", "past_rope_key") if expands else ("past_key", "past_value")
            wired = {"hidden": x, "position_ids": feed.position_ids, "attention_mask": feed.attention_mask,
                     names[0]: key, names[1]: value}  # fmt: skip
            wired |= {} if reads is None else shared[reads][j]
            if isinstance(attend, LatentSpec):  # its indexer's selection read by the next shared ones (GLM-5)
                r = routings[j]
                found: tuple[float, list[Any]] | None = (r.bound, []) if r is not None and r.bound else None
                given = getattr(feed.past, "index_key", None)  # the proof's cached indexer keys (``truth.Cache``)
                keys = None if given is None or attend.indexer is None or attend.indexer.shared else given(
                    i, attend.indexer.head_dim)  # fmt: skip
                out = latent64(attend, index_feeds(attend, wired, selections.get(j), keys), block,
                               flips=r.index_flips(i) if r else (), ties=found)  # fmt: skip
                attended, selections[j] = out["output"], out.get("index_selected", selections.get(j))
                if r and found:  # its indexer's near ties, named as a router's are (``routing``)
                    r.ties.extend((i, t.row, t.query, t.entering, t.leaving, t.margin) for t in found[1])
            else:
                attended = (out := attention64(attend, wired, block))["output"]
            if attend.kv_sharing == "store":  # read by the later layers that reuse them, per feed (Mistral Large
                # 4's latent layers: the whole latent and rope key; else keys and values)
                shared.setdefault(i, []).append({n: v for n, v in out.items() if n.startswith("shared_")})
            del out  # every feed's pass is held at its pause at once: what it no longer reads goes
            del wired, key, value
            if layer.residual == "sandwich":
                h = h + normed(attended, w, "norm2")
                seen(j, Stage(i, "attention"), h)
                h = h + normed((yield normed(h, w, "norm3"), h), w, "norm4")
                seen(j, Stage(i, "mlp"), h)
            elif layer.residual == "post":
                h = h + normed(attended, w, "norm2")
                seen(j, Stage(i, "attention"), h)
                h = h + normed((yield h, h), w, "norm4")
                seen(j, Stage(i, "mlp"), h)
            elif layer.residual == "sequential":
                h = h + attended
                seen(j, Stage(i, "attention"), h)
                h = h + (yield normed(h, w, "norm2"), h)
                seen(j, Stage(i, "mlp"), h)
            else:  # parallel: the MLP reads its own norm of the layer input, or the attention's (no norm2: GPT-J)
                y = normed(h, w, "norm2") if "norm2" in layer.norms else x
                h = h + attended + (yield y, h)
                seen(j, Stage(i, "block"), h)
            if plis:  # Gemma 4: the per-layer input's term, before the layer's scalar
                h = layer64(norm_of, layer.ffn.act, h, plis[j][:, :, i], w)
            if layer.layer_scale:  # Gemma 4: the residual stream after the layer times its scalar
                h = h * w["layer_scalar"]
            hs[j] = h

        def plan(y: np.ndarray, h: np.ndarray, j: int, w: dict[str, np.ndarray] = w, i: int = i) -> Mixing:
            return planned(y, w, i, routings[j], h)

        _forward([through(j, feed) for j, feed in enumerate(feeds)], mlps[i], w, plan)
        del w, block
    finals = [normed(h[:, feed.first :], top, "final_norm") for h, feed in zip(hs, feeds, strict=True)]
    return [_softcapped(spec, _scaled(spec, logits)) for logits in _head(spec, weights64, finals,
                                                                         top.get("lm_head_bias"))]


def extends(spec: DecoderSpec, longer: Feed, shorter: Feed, pieces: Pieces) -> bool:
    """True when ``shorter``'s whole sequence is the start of ``longer``'s, every layer's float64 position twin gives
    its slots the same values in both (module doc: bit for bit), and both start from no cache.
    """  # noqa: D205
    b, s = shorter.input_ids.shape
    if longer.past is not None or shorter.past is not None or longer.input_ids.shape[0] != b:
        return False
    # the sequence is the last axis of every input: position_ids [b, s] or M-RoPE's [3, b, s] (``[:, :s]`` there
    # would cut the batch axis, and no M-RoPE call would ever chain)
    if longer.input_ids.shape[1] < s or not all(
        np.array_equal(getattr(longer, name)[..., :s], getattr(shorter, name))
        for name in ("input_ids", "position_ids", "attention_mask")
    ):
        return False
    rng = np.random.default_rng(0)
    seen: dict[int, PositionPiece] = {}
    for i, piece in enumerate(pieces):
        if piece is None or id(piece) in seen:
            continue
        seen[id(piece)] = piece
        if piece.rotate64 is not None:
            x = rng.standard_normal((b, 1, longer.input_ids.shape[1], spec.layers[i].attention.head_dim))
            if not np.array_equal(piece.rotate64(x, longer.position_ids)[:, :, :s],
                                  piece.rotate64(x[:, :, :s], shorter.position_ids)):  # fmt: skip
                return False
        if piece.bias64 is not None:
            slots = np.maximum(np.cumsum(longer.attention_mask != 0, axis=1) - 1, 0)
            if not np.array_equal(piece.bias64(longer.position_ids, slots)[:, :, :s, :s],
                                  piece.bias64(shorter.position_ids, slots[:, :s])):  # fmt: skip
                return False
    return True


def chained(spec: DecoderSpec, feeds: Sequence[Feed], pieces: Pieces) -> list[list[int]]:
    """The feeds in runs, each feed after the first of a run extending the one before it (``extends``)."""
    chains: list[list[int]] = []
    for j, feed in enumerate(feeds):
        if chains and extends(spec, feed, feeds[chains[-1][-1]], pieces):
            chains[-1].append(j)
        else:
            chains.append([j])
    return chains


def chained_float64(spec: DecoderSpec, weights64: Mapping[str, np.ndarray], feeds: Sequence[Feed], pieces: Pieces,
                    on_layer: Callable[[int], None] | None = None) -> list[np.ndarray]:  # fmt: skip
    """``decoders_float64`` of ``feeds`` (no past, no routing), each run of feeds that extend one another computed
    once, as its last feed with the first slot any of them asks for (module doc); per feed its logits
    [b, s - first, vocab].
    """  # noqa: D205
    chains = chained(spec, feeds, pieces)
    runs = []
    for chain in chains:
        last = feeds[chain[-1]]
        first = min(feeds[j].first for j in chain)
        runs.append(Feed(last.input_ids, last.position_ids, last.attention_mask, first))
    out: list[np.ndarray] = [np.empty(0)] * len(feeds)
    for chain, run, logits in zip(chains, runs, decoders_float64(spec, weights64, runs, pieces, on_layer=on_layer),
                                  strict=True):  # fmt: skip
        for j in chain:
            out[j] = logits[:, feeds[j].first - run.first : feeds[j].input_ids.shape[1] - run.first]
    return out


# A feed's pass through a layer: yields (the feed-forward's input y, residual stream h) [b, s, n], is sent its output
Pass = Generator[tuple[np.ndarray, np.ndarray], np.ndarray, None]


def _forward(runs: list[Pass], mlp_of: object, w: PhasedLayer,
             plan: Callable[[np.ndarray, np.ndarray, int], Mixing]) -> None:  # fmt: skip
    """Every feed's pass through a layer run to its end: every feed's attention, then its weights go (``phases``) and
    a dense MLP is applied a feed at a time; a mixture's feeds all routed (``plan(y, h, feed)``), each expert read once
    for all and applied to each feed's tokens alone (``mixing.mixed_together``: per feed its twin's, bit for bit).
    """  # noqa: D205
    if isinstance(mlp_of, MLPSpec):
        paused = [next(run)[0] for run in runs]  # [b, s, hidden] each: the feed's MLP input
        w.attention_done()
        for run, y in zip(runs, paused, strict=True):
            _send(run, mlp64(mlp_of, y, w))
        return
    mixings = [plan(y, h, j) for j, (y, h) in enumerate(next(run) for run in runs)]
    for run, out in zip(runs, mixed_together(mixings, lambda e: part(w, mixings[0].names, e)), strict=True):
        _send(run, out)


def _send(run: Pass, out: np.ndarray) -> None:
    """The feed-forward's output sent to a feed's pass, which then ends."""
    try:
        run.send(out)
    except StopIteration:
        return
    raise RuntimeError("a layer's pass asked for its feed-forward twice")


class _Experts:
    """A mixture's [E, ...] float64 weight read one expert at a time (``Stored64.expert``): ``[e]`` is all the
    twins (``moe64``, ``shared_moe64``) ask of it. A real size needs it: Qwen3-30B-A3B's 128 experts of one layer are
    4.5 GiB in float64, its whole int4 decoder of two layers 2.1 GiB on disk.
    """  # noqa: D205

    def __init__(self, weights64: Stored64, name: str) -> None:
        self.weights64, self.name = weights64, name

    def __getitem__(self, e: int) -> np.ndarray:
        return self.weights64.expert(self.name, int(e))


def _layer64(weights64: Mapping[str, np.ndarray], i: int) -> PhasedLayer:
    """Layer i's float64 weights under their names without the prefix (``phases``: read from ``Stored64``, a dense
    MLP's after the attention's go), a mixture's experts as ``_Experts`` there (read one at a time), else whole.
    """  # noqa: D205
    view, stored = layer_weights(weights64, i), weights64 if isinstance(weights64, Stored64) else None
    experts = {n: _Experts(stored, f"layers.{i}.{n}") for n in view if stored is not None and n.startswith("experts_")}
    return PhasedLayer(view, experts, MLP_NAMES if stored is not None else frozenset())


def _embedded(weights64: Mapping[str, np.ndarray], input_ids: np.ndarray) -> np.ndarray:
    """[b, s, hidden]: the embedding's rows of ``input_ids``; only those rows are read when the weights can."""
    if not hasattr(weights64, "vocab_part"):
        return weights64["embed"][input_ids]
    used, where = np.unique(input_ids, return_inverse=True)
    rows = np.concatenate([vocab_part(weights64, "embed", int(t), int(t) + 1) for t in used])
    return rows[where.reshape(input_ids.shape)]


def _head(
    spec: DecoderSpec, weights64: Mapping[str, np.ndarray], hs: list[np.ndarray], bias: np.ndarray | None
) -> list[np.ndarray]:
    """Each h [b, s, hidden] times the output head [hidden, vocab] (+ bias): whole when the weights are held,
    else in slices of at most ``HEAD_SLICE_BYTES`` (each column's dot product is the same either way).
    """  # noqa: D205
    name, vocab = head_name(spec), spec.vocab_size
    if not hasattr(weights64, "vocab_part"):
        head = weights64["embed"].T if name == "embed" else weights64["lm_head"]
        return [linear64(h, head, bias) for h in hs]
    step = max(1, HEAD_SLICE_BYTES // (8 * spec.hidden_size))
    out = [np.empty((*h.shape[:-1], vocab)) for h in hs]
    for start in range(0, vocab, step):
        stop = min(vocab, start + step)
        part = vocab_part(weights64, name, start, stop)
        head = part.T if name == "embed" else part  # [hidden, stop - start]
        for h, logits in zip(hs, out, strict=True):
            logits[..., start:stop] = linear64(h, head, None if bias is None else bias[start:stop])
        del part, head
    return out


def _scaled(spec: DecoderSpec, logits: np.ndarray) -> np.ndarray:
    """Cohere 2's logits * logit_scale (the scale as the graph holds it, rounded once to the dtype), when set."""
    if not spec.logit_scale:
        return logits
    return np.multiply(logits, float(round_once(np.array(spec.logit_scale), spec.dtype)), out=logits)  # in place


def _softcapped(spec: DecoderSpec, logits: np.ndarray) -> np.ndarray:
    """Gemma 2's final cap * tanh(logits / cap), when the spec has one."""
    if not spec.final_softcap:
        return logits
    cap = float(round_once(np.array(spec.final_softcap), spec.dtype))
    return np.multiply(np.tanh(np.divide(logits, cap, out=logits), out=logits), cap, out=logits)  # in place: no copy
