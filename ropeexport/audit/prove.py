"""A foreign decoder's logits against the float64 recompute of the whole model, at far positions and across switches.

The audit checks a model's tables; this checks what its users get. The checkpoint the model was exported from is
read by ``decoder.checkpoint.load_checkpoint`` (checked against the config) and recomputed by
``decoder.oracle.decoder_float64``: every operation in float64, exact positions, the RoPE regime of
L = max(position_ids) + 1. The ONNX model runs in ORT on the same call. A call is n tokens after p cached entries,
so that its tokens sit at positions p .. p + n - 1:
- a model with a cache input gets p random entries per layer (keys as if already rotated; the recompute is given the
  same ones), an attention_mask of ones over p + n slots, and position_ids p .. p + n - 1 where it takes them;
- a model without a cache input takes position_ids p .. p + n - 1 and an attention_mask over its n tokens;
- a model with neither only ever sees positions 0 .. n - 1: its far calls are reported as not run, with the reason.
The cached values are drawn with std 1, so the attention output is led by them and an angle error in the query shows
in the logits (a tiny random checkpoint's own activations are small). Calls: 8 tokens at 0, the last token at
max_positions - 1, and where the schedule has an original_max_position_embeddings, L = original and L = original + 1
(the two sides of a LongRoPE switch). Judged as ``decoder verify`` judges a call: max |logits - float64| over the
call within ``TOLERANCE[dtype]`` of max |float64 logit|, and the last token's greedy pick the same unless the float64
margin between its top two is within the error (a near tie).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.errors import SpecError
from ropeexport.families.rope.regimes import original_length, regime

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


class _Feeder:
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
        self.mask = "attention_mask" in inputs
        self.positions = "position_ids" in inputs
        self.dtype = DTYPES.get(session.get_outputs()[0].type)
        self.logits = next((o.name for o in session.get_outputs() if o.name == "logits"),
                           session.get_outputs()[0].name)  # fmt: skip

    def placeable(self, past: int) -> str | None:
        """Why a call after ``past`` entries cannot be fed, or None."""
        if past and not self.cached and not self.positions:
            return "the model takes neither a cache nor position_ids: its tokens always sit at 0 .. n - 1"
        return None

    def feeds(self, ids: np.ndarray, past: int, cache: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
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
            for j, tail in enumerate(("key", "value")):
                feeds[kv[tail].name] = cache[layer][j].astype(numpy.get(kv[tail].type, np.float32))
        for name, value in list(feeds.items()):  # integer inputs in the model's own width
            declared = next(i for i in self.session.get_inputs() if i.name == name).type
            if declared == "tensor(int32)":
                feeds[name] = value.astype(np.int32)
        return feeds


class DecoderProof:
    """The checkpoint read and checked once (bad input raises SpecError before anything is written); ``run`` judges
    models on the calls of ``far_calls``.
    """  # noqa: D205

    def __init__(self, hf_config: Path, checkpoint: Path, model: Path) -> None:
        import onnxruntime as ort

        from ropeexport.catalog import kind_for
        from ropeexport.decoder.build import DecoderRequest, resolve
        from ropeexport.decoder.checkpoint import load_checkpoint
        from ropeexport.decoder.oracle import stored_float64

        if not Path(checkpoint).is_dir():
            raise SpecError("checkpoint", f"{str(checkpoint)!r} is not a folder (the checkpoint the model was exported "
                            "from: config.json and *.safetensors)")  # fmt: skip
        session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        self._sessions = {str(model): session}  # run() judges this model too: one session, not two
        dtype = DTYPES.get(session.get_outputs()[0].type)
        if dtype is None:
            raise SpecError("model", f"{str(model)!r} gives {session.get_outputs()[0].type} logits; the decoder proof "
                            "judges float and float16 ones")  # fmt: skip
        self.spec, _ = resolve(DecoderRequest(hf_config=hf_config, checkpoint=checkpoint, dtype=dtype))
        _Feeder(session, self.spec, model)  # the inputs are checked now, not after the graft is written
        self.weights64 = stored_float64(self.spec, load_checkpoint(self.spec, checkpoint))
        position = self.spec.position_spec()
        self.piece = kind_for(position).piece(position)
        self.checkpoint = str(checkpoint)

    def run(self, models: dict[str, Path]) -> dict[str, Any]:
        """Every model on every call (module doc): per call and model the error against float64 and the verdict."""
        import onnxruntime as ort

        from ropeexport.decoder.checkpoint import geometry
        from ropeexport.decoder.oracle import decoder_float64
        from ropeexport.decoder.verify import TOLERANCE

        spec, position = self.spec, self.spec.position_spec()
        tolerance = TOLERANCE[spec.dtype]
        for path in models.values():
            if str(path) not in self._sessions:
                self._sessions[str(path)] = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feeders = {label: _Feeder(self._sessions[str(path)], spec, path) for label, path in models.items()}
        _, KV, d = geometry(spec)
        calls = []
        for index, (name, past) in enumerate(far_calls(position)):
            rng = np.random.default_rng(index)
            ids = rng.integers(0, spec.vocab_size, (1, TOKENS)).astype(np.int64)
            draws = rng.standard_normal((spec.num_layers, 2, 1, KV, past, d)).astype(np.float32)
            cache = [(k, v) for k, v in draws]
            record: dict[str, Any] = {"call": name, "positions": [past, past + TOKENS - 1], "L": past + TOKENS,
                                      "regime": regime(position, past + TOKENS), "models": {}}  # fmt: skip
            truths: dict[bool, np.ndarray] = {}
            for label, feeder in feeders.items():
                why = feeder.placeable(past)
                if why is not None:
                    record["models"][label] = {"not_run": why}
                    continue
                cached = bool(feeder.cached)  # a model placed by position_ids alone sees no cache
                if cached not in truths:
                    given = [(k.astype(np.float64), v.astype(np.float64)) for k, v in cache] if cached else None
                    mask = np.ones((1, past + TOKENS if cached else TOKENS), np.int64)
                    pos = np.arange(past, past + TOKENS, dtype=np.int64).reshape(1, TOKENS)
                    truths[cached] = decoder_float64(spec, self.weights64, ids, pos, mask, self.piece.rotate64,
                                                     self.piece.bias64, given)[0]  # fmt: skip
                truth = truths[cached]
                got = np.asarray(feeder.session.run([feeder.logits], feeder.feeds(ids, past, cache))[0], np.float64)
                got = got.reshape(truth.shape)
                record["models"][label] = _judge(got, truth, tolerance)
            calls.append(record)
        verdicts = {label: all(c["models"][label].get("passed", True) for c in calls) for label in models}
        run = {label: sum("passed" in c["models"][label] for c in calls) for label in models}
        return {
            "checkpoint": self.checkpoint,
            "reference": "float64 recompute of the whole decoder from the checkpoint (ropeexport.decoder.oracle), "
            "exact positions, the regime of L = max(position_ids) + 1",
            "tolerance": {"rel": tolerance, "of": "max |float64 logit| of the call"},
            "tokens": TOKENS,
            "calls": calls,
            "passed": verdicts,
            "calls_run": run,
        }


def _judge(got: np.ndarray, truth: np.ndarray, tolerance: float) -> dict[str, Any]:
    """One model's logits [n, vocab] on one call against float64 (module doc)."""
    worst = float(np.max(np.abs(got - truth)))
    scale = float(np.max(np.abs(truth)))
    rel = worst / scale if scale else worst
    ordered = np.sort(truth[-1])
    margin = float(ordered[-1] - ordered[-2])
    same = int(got[-1].argmax()) == int(truth[-1].argmax())
    tie = not same and margin <= float(np.max(np.abs(got[-1] - truth[-1])))
    return {"max_abs": worst, "rel": rel, "scale": scale, "last_token_same": same, "near_tie": tie,
            "passed": bool(rel <= tolerance and (same or tie))}  # fmt: skip
