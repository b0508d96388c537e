"""One greedy-generation interface over every path timed: ``generate`` (prefill, then decode steps) and ``tail``.

- ``Ours``: ``ropeexport.decoder.serve.DecoderSession`` (a cache allocated once, IO binding);
- ``Genai``: onnxruntime-genai's ``Generator`` over a folder with a genai_config.json (the builder's model, or ours);
- ``Dynamo``: a ``torch.onnx.export(dynamo=True)`` model with its cache in ONNX Runtime, IO binding: the logits into
  a preallocated array, each present left where ORT allocated it and bound as the next call's past (no copy by
  Python; the graph itself concatenates past and new key/value into a fresh present every call);
- ``Eager``: transformers' model in PyTorch (fp32, default ``sdpa`` attention, ``DynamicCache``, inference mode,
  ``logits_to_keep=1`` as ``generate`` calls it).

``generate(prompt, steps)`` returns (prefill seconds, [seconds of each decode step]): the prefill call with its
argmax, then ``steps`` single-token calls at past = len(prompt) .. len(prompt) + steps - 1, each with its argmax.
``tail(ids, first, n)`` returns the float32 logits [n, vocab] of the last ``n`` prompt positions the way a server
computes them: a prefill of ids[: -n + 1] at positions first .. (its last row), then n - 1 single-token calls fed
the prompt's own tokens (teacher forcing), so the cache path is what is checked.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np


class Ours:
    """ropeexport's DecoderSession (``graph``: fused or gqa)."""

    def __init__(self, folder: str, threads: int, profile_prefix: str | None = None, spin: bool = True) -> None:
        from ropeexport.decoder.serve import DecoderSession

        self.session = DecoderSession(folder, threads=threads, spinning=spin, profile_prefix=profile_prefix)

    def generate(self, prompt: np.ndarray, steps: int) -> tuple[float, list[float]]:
        """Prefill and ``steps`` decode steps, timed by the session itself (binding included)."""
        g = self.session.generate(prompt.tolist(), steps + 1)
        assert [s.kind for s in g.steps] == ["prefill"] + ["decode"] * steps  # llama3 scaling: no regime switch
        return g.steps[0].seconds, [s.seconds for s in g.steps[1:]]

    def tail(self, ids: np.ndarray, first: int, n: int) -> np.ndarray:
        """Logits [n, vocab] of the prompt's last n positions (module doc), through the session's cache."""
        s = self.session
        head = len(ids) - n + 1
        s.reset(first)
        rows = [s.append(ids[:head])[-1].copy()]  # a view into the session's buffer, overwritten by the next call
        rows += [s.append(ids[k : k + 1])[-1].copy() for k in range(head, len(ids))]
        return np.stack(rows)


class Genai:
    """onnxruntime-genai over a folder, intra-op threads set through ``Config.overlay`` (the folder is untouched)."""

    def __init__(self, folder: str, threads: int, profile_prefix: str | None = None) -> None:
        import onnxruntime_genai as og

        self.og = og
        config = og.Config(folder)
        options: dict[str, Any] = {"intra_op_num_threads": threads, "inter_op_num_threads": 1}
        if profile_prefix:
            options["enable_profiling"] = profile_prefix
        config.overlay(json.dumps({"model": {"decoder": {"session_options": options}}}))
        self.model = og.Model(config)

    def _generator(self, length: int) -> Any:
        params = self.og.GeneratorParams(self.model)
        params.set_search_options(max_length=length, do_sample=False)  # the cache is allocated for max_length
        return self.og.Generator(self.model, params)

    def generate(self, prompt: np.ndarray, steps: int) -> tuple[float, list[float]]:
        """Prefill (``append_tokens`` and the first selection), then ``steps`` ``generate_next_token`` calls."""
        g = self._generator(len(prompt) + steps + 1)
        start = time.perf_counter()
        g.append_tokens(prompt.astype(np.int32)[None])
        g.generate_next_token()  # picks the first token from the prefill's logits; runs no model
        g.get_next_tokens()
        prefill = time.perf_counter() - start
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            g.generate_next_token()  # one model call on the last token, then its argmax
            g.get_next_tokens()
            times.append(time.perf_counter() - start)
        return prefill, times

    def tail(self, ids: np.ndarray, first: int, n: int) -> np.ndarray:
        """Logits [n, vocab] of the last n positions; ``first`` must be 0 (genai derives positions itself)."""
        if first:
            raise ValueError("onnxruntime-genai takes no position_ids: positions follow the sequence length")
        g = self._generator(len(ids) + 1)
        head = len(ids) - n + 1
        g.append_tokens(ids[:head].astype(np.int32)[None])
        rows = [np.asarray(g.get_logits(), np.float32).reshape(-1)[-self._vocab(g) :]]
        for k in range(head, len(ids)):
            g.append_tokens(ids[k : k + 1].astype(np.int32)[None])
            rows.append(np.asarray(g.get_logits(), np.float32).reshape(-1)[-self._vocab(g) :])
        return np.stack(rows)

    def _vocab(self, g: Any) -> int:
        return int(np.asarray(g.get_logits()).shape[-1])


class Dynamo:
    """A torch.onnx (dynamo) export with past/present inputs, run by ONNX Runtime with IO binding (module doc)."""

    def __init__(self, path: str, threads: int, layers: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1  # threads spin: ORT's default
        self.ort = ort
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.layers = layers
        past = {i.name: i.shape for i in self.session.get_inputs() if i.name.startswith("past_key_values")}
        shape = next(iter(past.values()))
        self.kv, self.d = int(shape[1]), int(shape[3])
        self.vocab = int(self.session.get_outputs()[0].shape[-1])
        self.pasts = [f"past_key_values.{i}.{k}" for i in range(layers) for k in ("key", "value")]
        self.presents = [f"present.{i}.{k}" for i in range(layers) for k in ("key", "value")]

    def _call(self, ids: np.ndarray, first: int, cache: list[Any] | None, past: int) -> tuple[np.ndarray, list[Any]]:
        s = len(ids)
        binding = self.session.io_binding()
        binding.bind_cpu_input("input_ids", np.ascontiguousarray(ids, np.int64).reshape(1, s))
        binding.bind_cpu_input("attention_mask", np.ones((1, past + s), np.int64))
        binding.bind_cpu_input("position_ids", np.arange(first, first + s, dtype=np.int64).reshape(1, s))
        if cache is None:
            empty = np.zeros((1, self.kv, 0, self.d), np.float32)
            cache = [self.ort.OrtValue.ortvalue_from_numpy(empty) for _ in self.pasts]
        for name, value in zip(self.pasts, cache, strict=True):
            binding.bind_ortvalue_input(name, value)
        logits = np.empty((1, s, self.vocab), np.float32)
        binding.bind_output("logits", "cpu", 0, np.float32, list(logits.shape), logits.ctypes.data)
        for name in self.presents:
            binding.bind_output(name, "cpu")  # ORT allocates the present; it becomes the next call's past
        self.session.run_with_iobinding(binding)
        return logits[0, -1], binding.get_outputs()[1:]

    def generate(self, prompt: np.ndarray, steps: int) -> tuple[float, list[float]]:
        """Prefill and greedy decode steps."""
        start = time.perf_counter()
        logits, cache = self._call(prompt, 0, None, 0)
        token = int(logits.argmax())
        prefill, times = time.perf_counter() - start, []
        for k in range(steps):
            start = time.perf_counter()
            logits, cache = self._call(np.array([token]), len(prompt) + k, cache, len(prompt) + k)
            token = int(logits.argmax())
            times.append(time.perf_counter() - start)
        return prefill, times

    def tail(self, ids: np.ndarray, first: int, n: int) -> np.ndarray:
        """Logits [n, vocab] of the last n positions through the cache."""
        head = len(ids) - n + 1
        logits, cache = self._call(ids[:head], first, None, 0)
        rows = [logits.copy()]
        for k in range(head, len(ids)):
            logits, cache = self._call(ids[k : k + 1], first + k, cache, k)
            rows.append(logits.copy())
        return np.stack(rows)


class Eager:
    """transformers' model in PyTorch with its DynamicCache (module doc)."""

    def __init__(self, checkpoint: str, threads: int) -> None:
        import torch
        import transformers

        torch.set_num_threads(threads)
        self.torch = torch
        self.model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()

    def _call(self, ids: np.ndarray, first: int, cache: Any) -> tuple[np.ndarray, Any]:
        torch = self.torch
        s = len(ids)
        position_ids = torch.arange(first, first + s).reshape(1, s)
        out = self.model(input_ids=torch.from_numpy(np.asarray(ids, np.int64)).reshape(1, s),
                         position_ids=position_ids, past_key_values=cache, use_cache=True,
                         logits_to_keep=1)  # fmt: skip
        return out.logits[0, -1].numpy(), out.past_key_values

    def generate(self, prompt: np.ndarray, steps: int) -> tuple[float, list[float]]:
        """Prefill and greedy decode steps under inference mode."""
        from transformers import DynamicCache

        with self.torch.inference_mode():
            start = time.perf_counter()
            logits, cache = self._call(prompt, 0, DynamicCache(config=self.model.config))
            token = int(logits.argmax())
            prefill, times = time.perf_counter() - start, []
            for k in range(steps):
                start = time.perf_counter()
                logits, cache = self._call(np.array([token]), len(prompt) + k, cache)
                token = int(logits.argmax())
                times.append(time.perf_counter() - start)
        return prefill, times

    def tail(self, ids: np.ndarray, first: int, n: int) -> np.ndarray:
        """Logits [n, vocab] of the last n positions through the DynamicCache."""
        from transformers import DynamicCache

        head = len(ids) - n + 1
        with self.torch.inference_mode():
            logits, cache = self._call(ids[:head], first, DynamicCache(config=self.model.config))
            rows = [logits.copy()]
            for k in range(head, len(ids)):
                logits, cache = self._call(ids[k : k + 1], first + k, cache)
                rows.append(logits.copy())
        return np.stack(rows)


def open_engine(entry: dict[str, Any], threads: int, profile_prefix: str | None = None) -> Any:
    """The engine an entry names (``entry["engine"]``: ours, genai, dynamo, eager)."""
    kind, where = entry["engine"], entry["path"]
    if kind == "ours":
        return Ours(where, threads, profile_prefix, spin=entry.get("spin", True))
    if kind == "genai":
        return Genai(where, threads, profile_prefix)
    if kind == "dynamo":
        return Dynamo(where, threads, entry["layers"])
    if kind == "eager":
        return Eager(where, threads)
    raise ValueError(f"unknown engine {kind!r}: ours, genai, dynamo, eager")


def model_bytes(folder: Path) -> int:
    """Bytes of a folder's model files (model.onnx and its external data)."""
    return sum(p.stat().st_size for p in folder.glob("*.onnx*"))
