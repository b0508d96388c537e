"""A foreign decoder's logits against the float64 recompute of the whole model, at far positions and across switches.

The audit checks a model's tables; this checks what its users get. The checkpoint the model was exported from is
read by ``decoder.checkpoint.CheckpointWeights`` (checked against the config from its headers, each tensor read when
used) and recomputed by ``decoder.oracle.decoders_float64``: every operation in float64, exact positions, the RoPE
regime of L = max(position_ids) + 1, every call of a model in one pass, layer by layer (one layer's float64 weights
and one layer's cache of each call resident). The ONNX model runs in ORT on the same call, one model's session at a
time. A call is n tokens after p cached entries, so that its tokens sit at positions p .. p + n - 1:
- a model with a cache input gets p random entries per layer (keys as if already rotated; the recompute is given the
  same ones, drawn per call and layer: ``Cache``), an attention_mask of ones over p + n slots, and position_ids
  p .. p + n - 1 where it takes them; such a call whose cache, given and given back, would pass ``cache_gib``
  (``CACHE_GIB`` by default; Llama-3.2-1B's last position takes 16 GiB in float32) is not run, and says why (the
  verdict is then ``partial``, never ``proven``: proven up to the last position of the calls run);
- a model without a cache input takes position_ids p .. p + n - 1 and an attention_mask over its n tokens;
- a model with neither only ever sees positions 0 .. n - 1: its far calls are reported as not run, with the reason
  (its verdict ``partial`` too).
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

When two models miss the float64 decoder by the same amount (``_outside``), the difference lies outside the
positional encoding; ``locate`` then says where a model's hidden states first depart from the recompute's
(``audits.locate``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.audits.proof_verdict import judge_call, outside, source_words, verdict
from ropeexport.decoder.held import BlockTable, HeldWeights, NBits, block_tables, held_weights, nbits_weights
from ropeexport.errors import SpecError
from ropeexport.families.rope.regimes import original_length, regime

__all__ = ["BlockTable", "Cache", "DecoderProof", "Feeder", "HeldWeights", "NBits", "ProofWeights", "block_tables",
           "far_calls", "held_weights", "nbits_weights"]

TOKENS = 8
DTYPES = {"tensor(float)": "fp32", "tensor(float16)": "fp16"}
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
        self.session, self.spec = session, spec
        inputs = {i.name: i for i in session.get_inputs()}
        self.cached: dict[int, dict[str, Any]] = {}
        other = []
        for name, value in inputs.items():
            tail = name.rsplit(".", 1)[-1].lower()
            layer = re.findall(r"\d+", name)
            if len(value.shape) == 4 and ("past" in name or "cache" in name) and layer and tail in ("key", "value"):
                self.cached.setdefault(int(layer[0]), {})[tail] = value
            elif name not in ("input_ids", "attention_mask", "position_ids"):
                other.append(name)
        if "input_ids" not in inputs or other:
            what = f"inputs it cannot feed ({', '.join(other)})" if other else "no input_ids input"
            raise SpecError("model", f"{str(path)!r} has {what}: the decoder proof feeds input_ids, attention_mask, "
                            "position_ids and past_key_values.<layer>.key / .value")  # fmt: skip
        if self.cached and (sorted(self.cached) != list(range(spec.num_layers))
                            or any(len(kv) != 2 for kv in self.cached.values())):  # fmt: skip
            raise SpecError("model", f"{str(path)!r} has cache inputs for layers {sorted(self.cached)}, the config "
                            f"has {spec.num_layers} layers (each needs a .key and a .value)")  # fmt: skip
        self.kept: dict[int, int] = {}  # layer -> the entries it keeps of its cache (``keeps``)
        self.mask = "attention_mask" in inputs
        self.positions = "position_ids" in inputs
        self.dtype = DTYPES.get(session.get_outputs()[0].type)
        self.logits = next((o.name for o in session.get_outputs() if o.name == "logits"),
                           session.get_outputs()[0].name)  # fmt: skip

    def keeps(self, session: Any) -> None:
        """The layers that keep only a window of their cache (a sliding layer of transformers' dynamo export gives
        back its last window - 1 entries, and refuses a call given more): read from one call of ``TOKENS`` tokens on an
        empty cache, whose ``present`` of such a layer is shorter than the call. The far calls then give each such
        layer the last entries of its cache only, as the model's own cache would hold them; the float64 recompute
        masks the rest by the same window.
        """  # noqa: D205
        outputs = {o.name: i for i, o in enumerate(self.session.get_outputs())}
        back = {layer: next((i for n, i in outputs.items() if "present" in n and _layer_key(n) == (layer, "key")),
                            None) for layer in self.cached}  # fmt: skip
        if not self.cached or any(i is None for i in back.values()):
            return
        from ropeexport.decoder.weights import geometry

        empty = [(np.zeros((1, geometry(self.spec, i)[1], 0, geometry(self.spec, i)[2]), np.float32),) * 2
                 for i in sorted(self.cached)]  # fmt: skip
        ids = np.ones((1, TOKENS), np.int64)
        got = session.run(None, self.feeds(ids, 0, empty))
        for layer, index in back.items():
            length = np.asarray(got[index]).shape[2]
            if length < TOKENS:
                self.kept[layer] = length

    def placeable(self, past: int) -> str | None:
        """Why a call after ``past`` entries cannot be fed, or None."""
        if past and not self.cached and not self.positions:
            return "the model takes neither a cache nor position_ids: its tokens always sit at 0 .. n - 1"
        return None

    def cache_bytes(self, past: int, n: int = TOKENS) -> int:
        """Bytes of the cache a call of ``n`` tokens after ``past`` entries gives the model and gets back (its past
        inputs and present outputs, in their dtype): what placing a far call costs beside the session.
        """  # noqa: D205
        from ropeexport.decoder.weights import geometry

        total = 0
        for layer, kv in self.cached.items():
            _, KV, d = geometry(self.spec, layer)
            size = 2 if "float16" in kv["key"].type else 4
            total += 2 * KV * d * size * (2 * past + n)
        return total

    def feeds(self, ids: np.ndarray, past: int, cache: Sequence[tuple[np.ndarray, np.ndarray]],
              ) -> dict[str, np.ndarray]:  # fmt: skip
        """The session's feeds for ``ids`` [1, n] after ``past`` entries (``cache``: float32 per layer)."""
        n = ids.shape[1]
        feeds = {"input_ids": ids}
        slots = past + n if self.cached else n
        if self.mask:
            feeds["attention_mask"] = np.ones((1, slots), np.int64)
        if self.positions:
            feeds["position_ids"] = np.arange(past, past + n, dtype=np.int64).reshape(1, n)
        numpy = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
        for layer, kv in self.cached.items():
            for tail, values in zip(("key", "value"), cache[layer], strict=True):
                if layer in self.kept:  # a sliding layer given what it keeps itself: its window's last entries
                    values = values[:, :, max(0, values.shape[2] - self.kept[layer]) :]
                feeds[kv[tail].name] = values.astype(numpy.get(kv[tail].type, np.float32), copy=False)
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


class Cache(Sequence[tuple[np.ndarray, np.ndarray]]):
    """Per layer the (key, value) [1, KV, past, d] cached before call ``index``: std 1, drawn when asked for from a
    generator seeded by the call and the layer (the model and the recompute get the same values), in ``dtype``.
    The recompute asks for one layer's at a time (float64); the model takes them all at once (float32).
    """  # noqa: D205

    def __init__(self, spec: Any, index: int, past: int, dtype: Any = np.float32) -> None:
        self.spec, self.call, self.past, self.dtype = spec, index, past, dtype

    def __getitem__(self, layer: Any) -> Any:
        from ropeexport.decoder.weights import geometry

        if not isinstance(layer, int) or not 0 <= layer < len(self):
            raise IndexError(layer)
        _, KV, d = geometry(self.spec, layer)
        rng = np.random.default_rng((self.call, layer))
        k, v = rng.standard_normal((2, 1, KV, self.past, d), dtype=np.float32)
        return k.astype(self.dtype, copy=False), v.astype(self.dtype, copy=False)

    def __len__(self) -> int:
        return int(self.spec.num_layers)


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


class DecoderProof:
    """The checkpoint's headers and the model's inputs checked once (bad input raises SpecError before anything is
    written); ``run`` judges models on the calls of ``far_calls``. Nothing holds the model's or the checkpoint's
    weights whole: the recompute reads them layer by layer (``ProofWeights``, ``oracle.decoders_float64``), every
    call's truth in one pass; a model's session is dropped once the model is judged. A call whose cache would pass
    ``cache_gib`` (``Feeder.cache_bytes``) is not run, and says so; the verdict is then partial
    (``proof_verdict.verdict``).
    """  # noqa: D205

    def __init__(self, hf_config: Path, checkpoint: Path, model: Path, cache_gib: float = CACHE_GIB) -> None:
        from ropeexport.decoder.build import DecoderRequest, resolve
        from ropeexport.decoder.checkpoint import CheckpointWeights
        from ropeexport.decoder.oracle import Stored64
        from ropeexport.decoder.parts import position_pieces

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
        self.spec, _ = resolve(DecoderRequest(hf_config=hf_config, checkpoint=checkpoint, dtype=dtype))
        width = (logits.shape or [None])[-1]
        if isinstance(width, int) and width != self.spec.vocab_size:
            raise SpecError("checkpoint", f"{str(checkpoint)!r} has a vocabulary of {self.spec.vocab_size} tokens but "
                            f"{str(model)!r} gives {width} logits per token: not the checkpoint the model was "
                            "exported from")  # fmt: skip
        Feeder(declared, self.spec, model)  # the inputs are checked now, not after the graft is written
        self.pieces = position_pieces(self.spec)  # per layer its encoding's float64 twin (None: a layer without)
        held, level = held_weights(_graph_of(model), self.spec, Path(model).resolve().parent)  # module doc
        self.weights64 = ProofWeights(Stored64(self.spec, CheckpointWeights(self.spec, checkpoint)), held)
        self.tolerance = self._tolerance(level if held else None)
        self.source = source_words(held, self.spec.tie_embeddings)
        self.checkpoint = str(checkpoint)
        self._truths: dict[tuple[int, bool], np.ndarray] = {}
        self._judged: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def _tolerance(self, level: int | None) -> float:
        """``decoder verify``'s bound for the spec, with int4 weights run at ``level`` (None: weights in the dtype)."""
        from ropeexport.decoder.verify import tolerance

        spec = self.spec if level is None else self.spec.replace(weight_format="int4", accuracy_level=level)
        return tolerance(spec)

    def _session(self, path: Path) -> Any:
        import onnxruntime as ort

        from ropeexport.audits.model import ort_reason, quiet

        try:
            return ort.InferenceSession(str(path), quiet()[0], providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - ORT's reason, in one line
            raise SpecError("model", f"ONNX Runtime refuses {str(path)!r}: {ort_reason(exc)}") from None

    def _call(self, index: int, past: int, dtype: Any = np.float32) -> tuple[np.ndarray, Cache]:
        """The ids [1, n] and the cache (``Cache``: per layer key and value [1, KV, past, d]) of call ``index``."""
        rng = np.random.default_rng(index)
        ids = rng.integers(0, self.spec.vocab_size, (1, TOKENS)).astype(np.int64)
        return ids, Cache(self.spec, index, past, dtype)

    def _feed(self, index: int, past: int, cached: bool) -> Any:
        """Call ``index`` as the recompute takes it (``oracle.Feed``), with its cache (``cached``) or placed by
        positions alone.
        """  # noqa: D205
        from ropeexport.decoder.oracle import Feed

        ids, cache = self._call(index, past, np.float64)
        mask = np.ones((1, past + TOKENS if cached else TOKENS), np.int64)
        pos = np.arange(past, past + TOKENS, dtype=np.int64).reshape(1, TOKENS)
        return Feed(ids, pos, mask, 0, cache if cached else None)

    def _truth(self, wanted: list[tuple[int, int, bool]]) -> None:
        """float64 logits [n, vocab] of each call (index, past, cached) not yet recomputed, all in one pass over the
        weights (``oracle.decoders_float64``: one layer's weights and one layer's cache of each call at a time).
        """  # noqa: D205
        from ropeexport.decoder.oracle import decoders_float64

        missing = [(i, p, c) for i, p, c in wanted if (i, c) not in self._truths]
        if not missing:
            return
        feeds = [self._feed(i, p, c) for i, p, c in missing]
        for (i, _, c), logits in zip(missing, decoders_float64(self.spec, self.weights64, feeds, self.pieces),
                                     strict=True):  # fmt: skip
            self._truths[i, c] = logits[0]

    def judge(self, path: Path) -> list[dict[str, Any]]:
        """``path`` on every call of ``far_calls``: per call its record (error against float64, verdict) or why it was
        not run. A call ONNX Runtime refuses, or logits of another shape than the recompute's, is a SpecError: the
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
        for index, (_, past) in calls:
            reason = feeder.placeable(past)
            size = feeder.cache_bytes(past)
            if reason is None and size > self.cache_bytes:
                reason = (f"its cache ({past} entries of {len(feeder.cached)} layers) would take "
                          f"{size / 2**30:.3g} GiB as the model's inputs and outputs, more than the proof's "
                          f"{self.cache_gib:g} GiB (--proof-cache-gib)")  # fmt: skip
                needed[index] = size / 2**30
            if reason is not None:
                why[index] = reason
        cached = bool(feeder.cached)  # a model placed by position_ids sees no cache
        self._truth([(index, past, cached) for index, (_, past) in calls if index not in why])
        session = self._session(path)  # made once the truths are: the two are never resident together
        feeder.keeps(session)
        out: list[dict[str, Any]] = []
        for index, (name, past) in calls:
            if index in why:
                out.append({"not_run": why[index], **({"cache_gib": needed[index]} if index in needed else {})})
                continue
            ids, cache = self._call(index, past)
            truth = self._truths[index, cached]
            try:
                got = session.run([feeder.logits], feeder.feeds(ids, past, cache), quiet()[1])[0]
            except Exception as exc:  # noqa: BLE001 - ORT's reason, in one line
                raise SpecError("model", f"{str(path)!r} refuses the call {name!r} ({TOKENS} tokens after {past} "
                                f"cached entries; ONNX Runtime: {ort_reason(exc)}): the decoder proof cannot judge "
                                "it") from None  # fmt: skip
            got = np.asarray(got, np.float64)
            if got.size != truth.size:
                raise SpecError("checkpoint", f"{str(path)!r} gives logits of shape {list(got.shape)} where the "
                                f"checkpoint's float64 recompute has {list(truth.shape)}: {self.checkpoint!r} is not "
                                "the checkpoint the model was exported from")  # fmt: skip
            out.append(judge_call(got.reshape(truth.shape), truth, self.tolerance))
        self._judged[key] = out
        return out  # the session (the whole model in memory) goes with this call

    def locate(self, path: Path, who: str) -> dict[str, Any] | None:
        """Where ``path`` (judged already, and failed) first departs from the float64 decoder (``audits.locate``), on
        the call it failed with the fewest cached entries; said of ``who``. None when that cannot be told.
        """  # noqa: D205
        from ropeexport.audits.locate import first_difference, model_values
        from ropeexport.decoder.oracle import decoders_float64

        judged = self._judged.get((str(path), str(Path(path).stat().st_mtime_ns)), [])
        calls = far_calls(self.spec.position_spec())
        failed = [(calls[i][1], i) for i, record in enumerate(judged)
                  if record.get("passed") is False and "cannot_prove" not in record]
        if not failed:
            return None
        past, index = min(failed)
        ids, cache = self._call(index, past)
        cached: list[bool] = []

        def feeds(session: Any) -> dict[str, np.ndarray]:
            feeder = Feeder(session, self.spec, path)
            cached.append(bool(feeder.cached))
            return feeder.feeds(ids, past, cache)

        values = model_values(Path(path), feeds)
        if isinstance(values, str):
            return None
        stages: list[tuple[Any, np.ndarray]] = []
        feed = self._feed(index, past, cached[0])
        decoders_float64(self.spec, self.weights64, [feed], self.pieces,
                         trace=lambda _, stage, h: stages.append((stage, h)))  # fmt: skip
        # Judged at the dtype's bound, not a quantized model's wider one: where the model first stops computing what
        # the recompute computes (a quantized model's own rounding shows too, at its size).
        found = first_difference(values, stages, self._tolerance(None), who)
        return None if found is None else {"call": calls[index][0], **found}

    def run(self, models: dict[str, Path]) -> dict[str, Any]:
        """Every model on every call (module doc): per call and model the error against float64 and the verdict;
        per model ``passed`` (every call run and passed) and ``verdict`` (``proof_verdict.verdict``: proven, partial
        or not proven, in words).
        """  # noqa: D205
        position = self.spec.position_spec()
        judged = {label: self.judge(path) for label, path in models.items()}
        calls: list[dict[str, Any]] = []
        for index, (name, past) in enumerate(far_calls(position)):
            calls.append({"call": name, "positions": [past, past + TOKENS - 1], "L": past + TOKENS,
                          "regime": regime(position, past + TOKENS),
                          "models": {label: judged[label][index] for label in models}})  # fmt: skip
        verdicts = {label: verdict(calls, label, self.cache_gib) for label in models}
        run = {label: sum("passed" in c["models"][label] for c in calls) for label in models}
        apart = outside(calls) if {"original", "grafted"} <= set(models) else None
        return {
            "checkpoint": self.checkpoint,
            "reference": f"float64 recompute of the whole decoder from {self.source} (ropeexport.decoder.oracle), "
            "exact positions, the regime of L = max(position_ids) + 1",
            "tolerance": {"rel": self.tolerance, "of": "max |float64 logit| of the call"},
            "tokens": TOKENS,
            "calls": calls,
            "passed": {label: v["verdict"] == "proven" for label, v in verdicts.items()},
            "verdict": verdicts,
            "calls_run": run,
            **({"outside_encoding": apart} if apart else {}),
        }


def _graph_of(path: Path) -> Any:
    """The model at ``path`` without its external data (``held_weights`` reads the MatMulNBits weights it needs)."""
    import onnx

    return onnx.load(str(path), load_external_data=False)
