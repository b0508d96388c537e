"""A foreign decoder's logits against a float64 truth of the whole model, at far positions and across switches.

The audit checks a model's tables; this checks what its users get. The truth (``audits.truth``) is ropeexport's own
float64 decoder for a model type it builds as a decoder: the checkpoint the model was exported from read by
``decoder.checkpoint.CheckpointWeights`` (checked against the config from its headers, each tensor read when used)
and recomputed by ``decoder.oracle.decoders_float64``: every operation in float64, exact positions, the RoPE regime
of L = max(position_ids) + 1, every call of a model in one pass, layer by layer (one layer's float64 weights and one
layer's cache of each call resident). For any other model type transformers knows (Qwen3.5, Granite 4, LFM2,
Gemma 3n, ...) it is transformers' own model of the checkpoint in float64, eager, no cache, with exact float64
angles per layer type (``audits.hf_truth``). Each verdict names its truth (``truth`` in the record). The ONNX model
runs in ORT on the same call, one model's session at a time. A call's n tokens sit at positions p .. p + n - 1:
- against the oracle, a model with a cache input gets p random entries per layer (keys as if already rotated; the
  recompute is given the same ones, drawn per call and layer: ``Cache``), an attention_mask of ones over p + n
  slots, and position_ids p .. p + n - 1 where it takes them (DeepSeek Sparse Attention's indexer keys,
  ``past_key_values.{i}.index_key`` [b, 1, p, D], their own p random keys: ``Cache.index_key``, D read from the
  input's shape, the recompute given the same; a latent-cache model's latent layers their latent and rotated rope key,
  ``Cache.form``, which the recompute expands through kv_b_proj; a layer reading another's keys and values,
  ``kv_from``, none of its own: it and its twin read its source's entries, Mistral Large 4's reusing layer its own
  indexer keys beside them, ``Feeder.reads``); such a call whose cache, given and given back, would
  pass ``cache_gib`` (``CACHE_GIB`` by default; Llama-3.2-1B's last position takes 16 GiB in float32) is not run,
  and says why (the verdict is then ``partial``, never ``proven``: proven up to the last position of the calls run);
- against transformers, which runs without a cache and so never sees random entries, no model is fed any: the n
  tokens are placed by position_ids p .. p + n - 1 after no entry (a cache input gets an empty one), or, for a model
  without position_ids, the whole sequence 0 .. p + n - 1 is fed to both and its last n tokens judged
  (``truth.WHOLE`` tokens at most);
- a model without a cache input takes position_ids p .. p + n - 1 and an attention_mask over its n tokens;
- a hybrid's convolution or recurrent state inputs (``audits.states``) are fed zeros on every call: a first call's
  state, what transformers' model starts from without a cache;
- a model with neither only ever sees positions 0 .. n - 1 against the oracle: its far calls are reported as not run,
  with the reason (its verdict ``partial`` too).
Each call's record says how it was placed (``placed``: cache, positions or whole).
The cached values are drawn with std 1, so the attention output is led by them and an angle error in the query shows
in the logits (a tiny random checkpoint's own activations are small). Calls: 8 tokens at 0, the last token at
max_positions - 1, and where the schedule has an original_max_position_embeddings, L = original and L = original + 1
(the two sides of a LongRoPE switch). Judged as ``decoder verify`` judges a call: max |logits - float64| over the
call within ``TOLERANCE[dtype]`` of max |float64 logit|, and the last token's greedy pick the same unless the float64
margin between its top two is within the error (a near tie).

Where the model holds its projections as 4-bit ``MatMulNBits`` (onnxruntime-genai's ``-p int4``, ropeexport's
``weight_format="int4"``), the recompute takes those from the model itself (``held_weights``: dequantized exactly, by
the layer and projection their names give, each read from the model's data file when its layer is recomputed), the
rest from the checkpoint: the model is judged on its own terms, not by its int4 rounding against the checkpoint (its
embedding too where it gathers it from a 4-bit ``GatherBlockQuantized`` table: the builder's tied embeddings, whose
head is then that table's transpose); the bound is then the one ``decoder verify`` gives its accuracy level
(``decoder.verify.tolerance``: the dtype's at levels 0 and 1, wider where the activations may be int8).

When two models miss the truth by the same amount (``_outside``), the difference lies outside the positional
encoding; ``locate`` then says where a model's hidden states first depart from the truth's (``audits.locate``:
the oracle's recompute traced, or transformers' model read by hooks, ``Truth.stages``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.audits.axes import call_positions, takes_axes
from ropeexport.audits.proof_verdict import judge_call, outside, verdict
from ropeexport.audits.states import RULE, state_shape
from ropeexport.audits.truth import HOWS, KINDS, TOKENS, Cache, Call, OracleTruth, ProofWeights, Truth, call_ids
from ropeexport.decoder.held import BlockTable, HeldWeights, NBits, block_tables, held_weights, nbits_weights
from ropeexport.errors import SpecError
from ropeexport.families.rope.regimes import original_length, regime

__all__ = ["BlockTable", "Cache", "DecoderProof", "Feeder", "HeldWeights", "NBits", "ProofWeights", "block_tables",
           "far_calls", "held_weights", "nbits_weights"]

DTYPES = {"tensor(float)": "fp32", "tensor(float16)": "fp16"}
INDEXED = ("index_key",)  # the last part of an indexer's key cache input (DeepSeek Sparse Attention)


def far_calls(position: Any) -> list[tuple[str, int]]:
    """(name, p) of each call (module doc): n = TOKENS tokens after p cached entries."""
    top = position.max_positions
    calls = [("start", 0)]
    if top > TOKENS:
        calls.append(("last position", top - TOKENS))
    limit = original_length(position)
    if limit is not None and TOKENS <= limit < top:
        calls += [("L = original", limit - TOKENS), ("L = original + 1", limit - TOKENS + 1)]
    return calls


class Feeder:
    """Which of a session's inputs is what: ids, mask, positions, and per layer the cache's key and value."""

    def __init__(self, session: Any, spec: Any, path: Path) -> None:
        self.session, self.spec, self.path = session, spec, path
        inputs = {i.name: i for i in session.get_inputs()}
        self.cached: dict[int, dict[str, Any]] = {}
        self.indexed: dict[int, Any] = {}  # layer -> its indexer's key cache input (``index_width``)
        self.states: dict[str, tuple[tuple[int, ...], Any]] = {}  # a hybrid's state input -> (its zeros' shape, type)
        other = []
        for name, value in inputs.items():
            tail = name.rsplit(".", 1)[-1].lower()
            layer = re.findall(r"\d+", name)
            state = state_shape(name, value.shape)
            if len(value.shape) == 4 and ("past" in name or "cache" in name) and layer and tail in INDEXED:
                self.indexed[int(layer[0])] = value  # DeepSeek Sparse Attention's indexer keys [b, 1, past, D]
            elif len(value.shape) == 4 and ("past" in name or "cache" in name) and layer and tail in ("key", "value"):
                self.cached.setdefault(int(layer[0]), {})[tail] = value
            elif state is not None:
                self.states[name] = (state, value.type)
            elif name not in ("input_ids", "attention_mask", "position_ids"):
                other.append(name)
        # a layer reading another's keys and values (``kv_from``: Gemma 4's shared layers, Mistral Large 4's reusing
        # layer) has no .key / .value: it is fed its source's; Large 4's keeps its indexer keys alone (``index_key``)
        self.reads = {i: j for i, layer in enumerate(getattr(spec, "layers", ()))
                      if (j := getattr(getattr(layer, "attention", None), "kv_from", None)) is not None}  # fmt: skip
        odd = [n for layer, v in self.indexed.items() for n in [v.name] if self.index_width(layer) is None
               or layer not in self.cached and layer not in self.reads]  # fmt: skip
        if "input_ids" not in inputs or other or odd:
            what = (f"inputs it cannot feed ({', '.join(other)})" if other else "no input_ids input" if not odd else
                    f"indexer key caches it cannot feed ({', '.join(odd)}: [batch, 1, past, D] with D fixed, beside "
                    "the layer's .key / .value or on a layer reading another's)")  # fmt: skip
            raise SpecError("model", f"{str(path)!r} has {what}: the decoder proof feeds input_ids, attention_mask, "
                            f"position_ids, past_key_values.<layer>.key / .value (and .index_key, an indexer's keys), "
                            f"and zeros to state inputs ({RULE})")  # fmt: skip
        # a hybrid's layers without attention hold a state (or nothing) instead: its cached layers are some of them
        layers = set(range(spec.num_layers)) - set(self.reads) if self.states else None
        owning = [i for i in range(spec.num_layers) if i not in self.reads]  # the layers computing keys and values
        if self.cached and ((sorted(self.cached) != owning if layers is None else not set(self.cached) <= layers)
                            or any(len(kv) != 2 for kv in self.cached.values())):  # fmt: skip
            but = f" but layers {sorted(self.reads)}, which read another's" if self.reads else ""
            raise SpecError("model", f"{str(path)!r} has cache inputs for layers {sorted(self.cached)}, the config "
                            f"has {spec.num_layers} layers (each needs a .key and a .value{but})")  # fmt: skip
        self.cache = Cache.form(spec, self.cached, path)  # its cache inputs' form: ``expanded`` or ``latent``
        self.kept: dict[int, int] = {}  # layer -> the entries it keeps of its cache (``keeps``)
        self.mask = "attention_mask" in inputs
        self.positions = "position_ids" in inputs
        self.axes = "position_ids" in inputs and takes_axes(inputs["position_ids"].shape)  # M-RoPE's [3, b, s]
        self.dtype = DTYPES.get(session.get_outputs()[0].type)
        self.logits = next((o.name for o in session.get_outputs() if o.name == "logits"),
                           session.get_outputs()[0].name)  # fmt: skip

    def keeps(self, session: Any) -> None:
        """The layers that keep only a window of their cache (a sliding layer of transformers' dynamo export gives
        back its last window - 1 entries, and refuses a call given more): read from one call of ``TOKENS`` tokens on an
        empty cache, whose ``present`` of such a layer is shorter than the call. The far calls then give each such
        layer the last entries of its cache only, as the model's own cache would hold them; the float64 recompute
        masks the rest by the same window. A call ONNX Runtime refuses is a SpecError naming the model and the call
        (as ``DecoderProof.judge`` says its own calls).
        """  # noqa: D205
        from ropeexport.audits.model import ort_reason

        outputs = {o.name: i for i, o in enumerate(self.session.get_outputs())}
        back = {layer: next((i for n, i in outputs.items() if "present" in n and _layer_key(n) == (layer, "key")),
                            None) for layer in self.cached}  # fmt: skip
        if not self.cached or any(i is None for i in back.values()):
            return
        ids = np.ones((1, TOKENS), np.int64)
        try:
            got = session.run(None, self.feeds(ids, 0, Cache(self.spec, 0, 0, cache=self.cache)))
        except Exception as exc:  # noqa: BLE001 - ORT's reason, in one line
            raise SpecError("model", f"{str(self.path)!r} refuses the call that reads which layers keep a window of "
                            f"their cache ({TOKENS} tokens at positions 0-{TOKENS - 1} on an empty cache, every output "
                            f"asked for; ONNX Runtime: {ort_reason(exc)}): the decoder proof cannot judge "
                            "it") from None  # fmt: skip
        for layer, index in back.items():
            length = np.asarray(got[index]).shape[2]
            if length < TOKENS:
                self.kept[layer] = length

    def index_width(self, layer: int) -> int | None:
        """The width D of layer ``layer``'s indexer keys, read from its input's shape [batch, 1, past, D] (None: not
        that shape, or no such input).
        """  # noqa: D205
        value = self.indexed.get(layer)
        shape = None if value is None else list(value.shape)
        if shape is None or shape[1] != 1 or not isinstance(shape[3], int) or shape[3] < 1:
            return None
        return int(shape[3])

    def placeable(self, past: int) -> str | None:
        """Why a call after ``past`` entries cannot be fed, or None."""
        if past and not self.cached and not self.positions:
            return "the model takes neither a cache nor position_ids: its tokens always sit at 0 .. n - 1"
        return None

    def cache_bytes(self, past: int, n: int = TOKENS) -> int:
        """Bytes of the cache a call of ``n`` tokens after ``past`` entries gives the model and gets back (its past
        inputs and present outputs, in their dtype): what placing a far call costs beside the session.
        """  # noqa: D205
        total = 0
        for layer, kv in self.cached.items():
            size = 2 if "float16" in kv["key"].type else 4
            shapes = self.spec.layers[layer].cache_shapes(self.spec.graph, self.cache)  # key's, value's (, indexer's)
            width = sum(heads * w for heads, w in shapes)  # an indexer's keys among them (``cache_shapes``)
            total += width * size * (2 * past + n)
        for layer, value in self.indexed.items():  # a layer reading another's latent: its indexer's keys alone
            if layer not in self.cached:
                total += (self.index_width(layer) or 0) * (2 if "float16" in value.type else 4) * (2 * past + n)
        return total

    def feeds(self, ids: np.ndarray, past: int, cache: Sequence[tuple[np.ndarray, np.ndarray]],
              start: int | None = None) -> dict[str, np.ndarray]:  # fmt: skip
        """The session's feeds for ``ids`` [1, n] after ``past`` entries (``cache``: float32 per layer), at positions
        from ``start`` (default ``past``: a call placed after no entry may sit anywhere, ``truth`` module doc).
        """  # noqa: D205
        n = ids.shape[1]
        feeds = {"input_ids": ids}
        slots = past + n if self.cached else n
        first = past if start is None else start
        if self.mask:
            feeds["attention_mask"] = np.ones((1, slots), np.int64)
        if self.positions:
            feeds["position_ids"] = (call_positions(first, n) if self.axes  # the call's image grid (``axes``)
                                     else np.arange(first, first + n, dtype=np.int64).reshape(1, n))
        numpy = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
        for layer, kv in self.cached.items():
            for tail, values in zip(("key", "value"), cache[layer], strict=True):
                if layer in self.kept:  # a sliding layer given what it keeps itself: its window's last entries
                    values = values[:, :, max(0, values.shape[2] - self.kept[layer]) :]
                feeds[kv[tail].name] = values.astype(numpy.get(kv[tail].type, np.float32), copy=False)
        for layer, value in self.indexed.items():  # the indexer's keys, drawn as the recompute is given them
            width, entries = self.index_width(layer) or 0, cache[self.reads.get(layer, layer)][0].shape[2]
            drawn = getattr(cache, "index_key", None)
            keys = drawn(layer, width) if drawn is not None else np.zeros((1, 1, entries, width), np.float32)
            feeds[value.name] = keys.astype(numpy.get(value.type, np.float32), copy=False)
        for name, (shape, kind) in self.states.items():  # a first call's state: what the truth starts from
            feeds[name] = np.zeros(shape, numpy.get(kind, np.float32))
        for name, value in list(feeds.items()):  # integer inputs in the model's own width
            declared = next(i for i in self.session.get_inputs() if i.name == name).type
            if declared == "tensor(int32)":
                feeds[name] = value.astype(np.int32)
        return feeds


def _layer_key(name: str) -> tuple[int, str] | None:
    """(layer, ``key`` / ``value``) a cache input or output names."""
    numbers = re.findall(r"\d+", name)
    tail = name.rsplit(".", 1)[-1].lower()
    return (int(numbers[0]), tail) if numbers and tail in ("key", "value") else None


class Signature:
    """A model's inputs and outputs as an ONNX Runtime session lists them (``get_inputs``, ``get_outputs``: name, shape,
    type), read from its graph without its weights: a model is checked and fed before any session of it exists.
    """  # noqa: D205

    def __init__(self, path: Path) -> None:
        from types import SimpleNamespace

        import onnx

        graph = _graph_of(path).graph
        weights = {t.name for t in graph.initializer}

        def value(info: Any) -> Any:
            kind = info.type.tensor_type
            shape = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in kind.shape.dim]
            name = onnx.TensorProto.DataType.Name(kind.elem_type).lower()  # ORT's words: tensor(float), tensor(int64)
            return SimpleNamespace(name=info.name, shape=shape, type=f"tensor({name})")

        self._inputs = [value(i) for i in graph.input if i.name not in weights]
        self._outputs = [value(o) for o in graph.output]

    def get_inputs(self) -> list[Any]:
        """The inputs a call feeds (an initializer's overridable input left out, as ORT lists them)."""
        return self._inputs

    def get_outputs(self) -> list[Any]:
        """The graph's outputs."""
        return self._outputs


CACHE_GIB = 4.0  # the most cache a far call may give a model and get back (``Feeder.cache_bytes``), by default


class DecoderProof:
    """The checkpoint's headers and the model's inputs checked once (bad input raises SpecError before anything is
    written); ``run`` judges models on the calls of ``far_calls`` against the truth (``audits.truth``: ropeexport's
    float64 decoder for a model type it builds, transformers' model in float64 otherwise; ``truth`` forces one).
    Nothing holds the model's or the checkpoint's weights whole but the transformers truth, and that one only while
    its calls run: the oracle truth reads them layer by layer (``ProofWeights``, ``oracle.decoders_float64``), every
    call's truth in one pass; a model's session is dropped once the model is judged. A call whose cache would pass
    ``cache_gib`` (``Feeder.cache_bytes``) is not run, and says so; the verdict is then partial
    (``proof_verdict.verdict``).
    """  # noqa: D205

    def __init__(self, hf_config: Path, checkpoint: Path, model: Path, cache_gib: float = CACHE_GIB,
                 truth: str = "auto", truth_gib: float | None = None) -> None:  # fmt: skip
        if not Path(checkpoint).is_dir():
            raise SpecError("checkpoint", f"{str(checkpoint)!r} is not a folder (the checkpoint the model was exported "
                            "from: config.json and *.safetensors)")  # fmt: skip
        if not cache_gib > 0:
            raise SpecError("proof_cache_gib", f"must be a positive number of GiB, got {cache_gib}")
        self.cache_gib, self.cache_bytes = cache_gib, int(cache_gib * 2**30)
        declared = Signature(model)  # the model's inputs and outputs, read from its graph: no session yet
        logits = declared.get_outputs()[0]
        dtype = DTYPES.get(logits.type)
        if dtype is None:
            raise SpecError("model", f"{str(model)!r} gives {logits.type} logits; the decoder proof judges float and "
                            "float16 ones")  # fmt: skip
        self.truth: Truth = choose(truth, Path(hf_config), Path(checkpoint), Path(model), dtype, _graph_of(model),
                                   truth_gib)  # fmt: skip
        self.spec = self.truth.spec
        width = (logits.shape or [None])[-1]
        if isinstance(width, int) and width != self.spec.vocab_size:
            raise SpecError("checkpoint", f"{str(checkpoint)!r} has a vocabulary of {self.spec.vocab_size} tokens but "
                            f"{str(model)!r} gives {width} logits per token: not the checkpoint the model was "
                            "exported from")  # fmt: skip
        # the inputs are checked now, not after the graft is written; its cache's form the one every call is given
        self.cache = Feeder(declared, self.spec, model).cache
        self.tolerance = self.truth.tolerance
        self.source = self.truth.source
        self.checkpoint = str(checkpoint)
        self._truths: dict[tuple[int, str], np.ndarray] = {}
        self._judged: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def _session(self, path: Path) -> Any:
        import onnxruntime as ort

        from ropeexport.audits.model import ort_reason, quiet

        try:
            return ort.InferenceSession(str(path), quiet()[0], providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - ORT's reason, in one line
            raise SpecError("model", f"ONNX Runtime refuses {str(path)!r}: {ort_reason(exc)}") from None

    def _call(self, index: int, past: int, how: str) -> Call:
        """Call ``index`` as ``how`` places it (``truth.Call``)."""
        return Call(index, past, how, call_ids(self.spec.vocab_size, index, past, how), self.cache)

    def _truth(self, wanted: list[Call]) -> None:
        """float64 logits [n, vocab] of each call not yet computed, all in one go (the oracle: one pass over the
        weights; transformers: one load of the model).
        """  # noqa: D205
        missing = [c for c in wanted if (c.index, c.how) not in self._truths]
        if missing:
            for call, logits in zip(missing, self.truth.logits(missing), strict=True):
                self._truths[call.index, call.how] = logits

    def _feeds(self, feeder: Feeder, call: Call) -> dict[str, np.ndarray]:
        """The model's feeds for ``call``: after its random cached entries, placed by position_ids after none (an
        empty cache where the model has one), or the whole sequence after none.
        """  # noqa: D205
        if call.how == "cache":
            return feeder.feeds(call.ids, call.past, Cache(self.spec, call.index, call.past, cache=call.cache))
        empty = Cache(self.spec, call.index, 0, cache=call.cache)
        return feeder.feeds(call.ids, 0, empty, start=call.past if call.how == "positions" else 0)

    def judge(self, path: Path) -> list[dict[str, Any]]:
        """``path`` on every call of ``far_calls``: per call its record (error against the truth, verdict) or why it
        was not run. A call ONNX Runtime refuses, or logits of another shape than the truth's, is a SpecError: the
        proof cannot judge the model (``graft`` asks this of the original before it writes anything).
        """  # noqa: D205
        from ropeexport.audits.model import ort_reason, quiet

        key = (str(path), str(Path(path).stat().st_mtime_ns))
        if key in self._judged:
            return self._judged[key]
        feeder = Feeder(Signature(path), self.spec, path)
        calls = list(enumerate(far_calls(self.spec.position_spec())))
        why: dict[int, str] = {}
        needed: dict[int, float] = {}  # GiB of cache a call not run for its size would take
        placed: dict[int, Call] = {}
        for index, (_, past) in calls:
            how = self.truth.placement(bool(feeder.cached), feeder.positions, past)
            if how not in HOWS:
                why[index] = how
                continue
            # the cache given and given back: p entries and the call's (cache), the whole sequence's (whole), its own
            fed = {"cache": (past, TOKENS), "whole": (0, past + TOKENS)}.get(how, (0, TOKENS))
            size = feeder.cache_bytes(*fed)
            if size > self.cache_bytes:
                why[index] = (f"its cache ({past} entries of {len(feeder.cached)} layers) would take "
                              f"{size / 2**30:.3g} GiB as the model's inputs and outputs, more than the proof's "
                              f"{self.cache_gib:g} GiB (--proof-cache-gib)")  # fmt: skip
                needed[index] = size / 2**30
                continue
            placed[index] = self._call(index, past, how)
        self._truth(list(placed.values()))
        session = self._session(path)  # made once the truths are: the two are never resident together
        if any(c.how == "cache" for c in placed.values()):
            feeder.keeps(session)
        out: list[dict[str, Any]] = []
        for index, (name, past) in calls:
            if index in why:
                out.append({"not_run": why[index], **({"cache_gib": needed[index]} if index in needed else {})})
                continue
            call = placed[index]
            truth = self._truths[index, call.how]
            try:
                got = session.run([feeder.logits], self._feeds(feeder, call), quiet()[1])[0]
            except Exception as exc:  # noqa: BLE001 - ORT's reason, in one line
                raise SpecError("model", f"{str(path)!r} refuses the call {name!r} ({PLACED[call.how](past)}; "
                                f"ONNX Runtime: {ort_reason(exc)}): the decoder proof cannot judge "
                                "it") from None  # fmt: skip
            got = np.asarray(got, np.float64)
            if call.how == "whole" and got.ndim == 3:  # [1, p + n, vocab]: its last n tokens are judged
                got = got[:, -TOKENS:]
            if got.size != truth.size:
                raise SpecError("checkpoint", f"{str(path)!r} gives logits of shape {list(got.shape)} where the "
                                f"truth has {list(truth.shape)}: {self.checkpoint!r} is not the checkpoint the model "
                                "was exported from")  # fmt: skip
            out.append({**judge_call(got.reshape(truth.shape), truth, self.tolerance), "placed": call.how})
        self._judged[key] = out
        return out  # the session (the whole model in memory) goes with this call

    def locate(self, path: Path, who: str) -> dict[str, Any] | None:
        """Where ``path`` (judged already, and failed) first departs from the truth's residual stream
        (``audits.locate``; ``Truth.stages``: the float64 decoder's, or transformers' model's read by hooks), on the
        call it failed with the fewest cached entries; said of ``who``. None when that cannot be told.
        """  # noqa: D205
        from ropeexport.audits.locate import first_difference, model_values

        judged = self._judged.get((str(path), str(Path(path).stat().st_mtime_ns)), [])
        calls = far_calls(self.spec.position_spec())
        failed = [(calls[i][1], i, r["placed"]) for i, r in enumerate(judged)
                  if r.get("passed") is False and "cannot_prove" not in r]  # fmt: skip
        if not failed:
            return None
        past, index, how = min(failed)
        call = self._call(index, past, how)

        def feeds(session: Any) -> dict[str, np.ndarray]:
            return self._feeds(Feeder(session, self.spec, path), call)

        values = model_values(Path(path), feeds)
        if isinstance(values, str):
            return None
        stages = self.truth.stages(call)
        if not stages:
            return None
        # Judged at the dtype's bound, not a quantized model's wider one: where the model first stops computing what
        # the recompute computes (a quantized model's own rounding shows too, at its size).
        found = first_difference(values, stages, self.truth.bound(None), who, self.truth.traced)
        return None if found is None else {"call": calls[index][0], "truth": self.truth.kind, **found}

    def run(self, models: dict[str, Path]) -> dict[str, Any]:
        """Every model on every call (module doc): per call and model the error against the truth and the verdict;
        per model ``passed`` (every call run and passed) and ``verdict`` (``proof_verdict.verdict``: proven, partial
        or not proven, in words, naming the truth); ``truth`` says which truth judged and how calls were placed.
        """  # noqa: D205
        position = self.spec.position_spec()
        judged = {label: self.judge(path) for label, path in models.items()}
        calls: list[dict[str, Any]] = []
        for index, (name, past) in enumerate(far_calls(position)):
            calls.append({"call": name, "positions": [past, past + TOKENS - 1], "L": past + TOKENS,
                          "regime": regime(position, past + TOKENS),
                          "models": {label: judged[label][index] for label in models}})  # fmt: skip
        verdicts = {label: verdict(calls, label, self.cache_gib) | {"truth": self.truth.kind} for label in models}
        run = {label: sum("passed" in c["models"][label] for c in calls) for label in models}
        apart = outside(calls) if {"original", "grafted"} <= set(models) else None
        hows = sorted({r["placed"] for c in calls for r in c["models"].values() if "placed" in r})
        return {
            "checkpoint": self.checkpoint,
            "truth": {"kind": self.truth.kind, "words": self.truth.words, "placed": hows,
                      "how": "; ".join(f"{h}: {PLACED[h]('p')}" for h in hows)},  # fmt: skip
            "reference": self.truth.reference,
            "tolerance": {"rel": self.tolerance, "of": "max |truth logit| of the call"},
            "tokens": TOKENS,
            "calls": calls,
            "passed": {label: v["verdict"] == "proven" for label, v in verdicts.items()},
            "verdict": verdicts,
            "calls_run": run,
            **({"outside_encoding": apart} if apart else {}),
        }


# How a call is placed (``truth`` module doc), in words, for p its first judged position.
PLACED = {
    "cache": lambda p: f"{TOKENS} tokens after {p} random cached entries, the truth given the same",
    "positions": lambda p: f"{TOKENS} tokens at positions {p} .. {p} + {TOKENS - 1} by position_ids, no cached entry",
    "whole": lambda p: f"the whole sequence 0 .. {p} + {TOKENS - 1} fed to both, the last {TOKENS} judged",
}


def choose(kind: str, hf_config: Path, checkpoint: Path, model: Path, dtype: str, graph: Any,
           truth_gib: float | None = None) -> Truth:  # fmt: skip
    """The truth of ``kind`` (``auto``: the oracle where ropeexport builds the checkpoint's model type as a decoder,
    else transformers' model where transformers knows it, within ``truth_gib`` GiB: ``hf_truth.check_size``; module
    doc); SpecError naming the field otherwise.
    """  # noqa: D205
    from ropeexport.architectures import ARCHITECTURES, TEXT_CONFIGS
    from ropeexport.hf import read_config

    if kind not in ("auto", *KINDS):
        raise SpecError("truth", f"must be one of auto, {', '.join(KINDS)}, got {kind!r}")
    model_type = read_config(hf_config).get("model_type")
    built = model_type in ARCHITECTURES or model_type in TEXT_CONFIGS
    if kind == "oracle" or (kind == "auto" and built):
        return OracleTruth(hf_config, checkpoint, model, dtype, graph)
    from ropeexport.audits.hf_truth import TransformersTruth

    return TransformersTruth(hf_config, checkpoint, dtype, truth_gib)


def _graph_of(path: Path) -> Any:
    """The model at ``path`` without its external data (``held_weights`` reads the MatMulNBits weights it needs)."""
    import onnx

    return onnx.load(str(path), load_external_data=False)
