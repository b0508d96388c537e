"""Serving a built decoder as a server runs it: one ONNX Runtime session, IO binding, a cache allocated once.

``DecoderSession(folder)`` opens a decoder folder (``build --artifact decoder``; its files checked against the
sha256 its manifest lists) and ``generate`` runs greedy generation for one sequence (batch 1):

- the cache is allocated once for the whole generation (prompt + new tokens; grown, keeping its contents, if a
  caller appends past it). ``gqa`` form: one [1, KV, capacity, d] buffer per layer and tensor, bound as both
  ``past_key_values.{i}.*`` and ``present.{i}.*``: GroupQueryAttention writes the new keys in place (what
  onnxruntime-genai calls past_present_share_buffer). Other forms, whose present is a concatenation: two sets of
  flat buffers; a call reads past [1, KV, p, d] from the front of one and ONNX Runtime writes present
  [1, KV, p + s, d] into the front of the other, then they swap (a contiguous prefix of a flat buffer is exactly
  such an array). IO binding hands ONNX Runtime the addresses: nothing is allocated or copied by Python;
- the prompt sits at positions ``position_offset`` .. offset + n - 1 (``position_ids``; the cache holds the prompt
  only), so a long context is exercised without computing it (RoPE only: an ALiBi decoder counts key positions
  from the attention mask, as BLOOM does, and takes no offset); every token, the last new one included, must lie
  below the decoder's max_positions (onnxruntime-genai's context_length counts the same way): nothing is wrapped;
- the RoPE regime of each call is that of L = its last position + 1 (``scenarios.regime``). Under the ``re-prefill``
  policy (the default, what the build verified against the float64 recompute) a step whose regime differs from the
  one the cache was built in (LongRoPE past original_max_position_embeddings, dynamic NTK) recomputes the whole
  sequence; under ``keep`` the cache is kept, as onnxruntime-genai does.

Timings are wall-clock per call (``time.perf_counter``), binding included: what a caller of this loop waits for.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ropeexport.architectures.sharing import cached_layers
from ropeexport.decoder.export import layer_caches
from ropeexport.decoder.kind import check_folder
from ropeexport.decoder.scenarios import regime
from ropeexport.decoder.spec import POLICIES, DecoderSpec
from ropeexport.dtypes import DTYPES
from ropeexport.errors import RuntimeUnavailable, SpecError
from ropeexport.forms import FORMS
from ropeexport.positions import AXES_NAMES
from ropeexport.runtimes.iobinding import PROVIDERS, session_options
from ropeexport.runtimes.ort import open_session

if TYPE_CHECKING:  # tokenizers loads when a prompt is first given as text
    from tokenizers import Tokenizer

TOKENIZER = "tokenizer.json"


def text_positions(spec: DecoderSpec) -> str:
    """How ``generate`` feeds a multi-axis position input (M-RoPE), in words; "" for one axis."""
    inputs = spec.positions
    if inputs.one_axis:
        return ""
    axes = ", ".join(AXES_NAMES[inputs.axes])
    return (f"text only: each token's position on all {inputs.axes} axes ({axes}) of {inputs.name} "
            f"[{inputs.axes}, batch, seq]; image positions are not fed (no vision tower here)")


@dataclass(frozen=True)
class Step:
    """One call of the model: ``tokens`` computed at positions ``first`` .. ``last``, in ``regime``, in ``seconds``."""

    kind: str  # prefill | decode | re-prefill
    first: int
    last: int
    tokens: int
    regime: str
    seconds: float
    token: int  # the token it picked (argmax of the logits at ``last``)


@dataclass
class Generation:
    """What ``generate`` returns: the prompt, the new tokens, and every call with its timing and regime."""

    prompt: list[int]
    tokens: list[int]
    steps: list[Step]
    position_offset: int
    policy: str
    threads: int | None
    max_positions: int
    text: str | None = None
    model: str = ""
    stopped_at_eos: bool = False
    positions: str = ""  # M-RoPE: how the [3, batch, seq] input was fed (text only); "" for one axis

    @property
    def prefill_tokens_per_second(self) -> float:
        """Prompt tokens over the first call's time."""
        first = self.steps[0]
        return first.tokens / first.seconds

    @property
    def decode_ms_per_token(self) -> float | None:
        """Mean time of the single-token decode calls in ms (re-prefills excluded); None without one."""
        times = [s.seconds for s in self.steps if s.kind == "decode"]
        return 1000 * sum(times) / len(times) if times else None

    def to_dict(self) -> dict[str, object]:
        """Plain data (what ``ropeexport generate --json`` prints)."""
        out = asdict(self)
        if not self.positions:  # one axis: nothing to say (the JSON of every other decoder unchanged)
            out.pop("positions")
        out["prefill_tokens_per_second"] = self.prefill_tokens_per_second
        out["decode_ms_per_token"] = self.decode_ms_per_token
        out["regimes"] = sorted({s.regime for s in self.steps})
        return out


def _int(name: str, value: Any, low: int, top: int | None = None) -> int:
    """An int in [low, top] (a bool is no int); else SpecError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise SpecError(name, f"must be an integer, got {value!r}")
    if value < low or (top is not None and value > top):
        allowed = f">= {low}" if top is None else f"in [{low}, {top}]"
        raise SpecError(name, f"must be {allowed}, got {value}")
    return int(value)


class DecoderSession:
    """A decoder folder opened for generation (module doc).

    ``threads``: ONNX Runtime's intra-op threads (None: its default, one per physical core). ``spinning``: idle ORT
    threads busy-wait for the next call (ORT's and onnxruntime-genai's default: about 1 ms less per decode step on 2
    cores, ``tools/bench_serving.py``); False leaves the cores to other work between calls. ``profile_prefix`` turns
    on ORT's profiler (``session_options``). ``runtime`` False opens no ONNX Runtime session: the folder checked, its
    prompt checks and tokenizer only (what ``genai_serve`` takes before onnxruntime-genai opens the model itself).

    The low-level loop: ``reset(position_offset)``, then ``append(ids)`` as often as wanted (each returns the logits
    [s, vocab] of the tokens appended); ``generate`` is built on it.
    """

    def __init__(
        self,
        folder: str | Path,
        threads: int | None = None,
        spinning: bool = True,
        profile_prefix: str | None = None,
        runtime: bool = True,
    ) -> None:
        folder = Path(folder)
        if threads is not None:
            _int("threads", threads, 1, 1024)
        record, spec = check_folder(folder)
        self.folder, self.spec, self.threads = folder, spec, threads
        self.config: dict[str, Any] = record["config"]
        self.position = spec.position_spec()
        self.max_positions = int(self.position.max_positions)
        self._tokenizer: Tokenizer | None = None
        if not runtime:
            return
        options = session_options(threads, profile_prefix=profile_prefix, spinning=spinning)
        self.session = open_session(folder / "model.onnx", options, PROVIDERS)  # the options as built, unchanged
        self.binding = self.session.io_binding()
        self._bound: dict[str, tuple[int, tuple[int, ...]]] = {}  # what the binding holds: name -> (address, shape)
        # A decode step's token and position live in these two arrays, bound once: a step rebinds only the mask.
        self._token, self._step_position = np.zeros((1, 1), np.int64), np.zeros((1, 1), np.int64)
        self._np_dtype = DTYPES[spec.dtype].np_dtype
        # (heads, width) of each cached tensor, layer by layer, key then value (``LayerSpec.cache_shapes``)
        # (a layer that reads another's keys and values has none: ``architectures.sharing``)
        self._cached = cached_layers(spec.layers)
        # each cached tensor's (past name, present name) and (heads, width): key, value and an indexer's keys
        self._names = [(past, present) for i in self._cached for past, present, _, _ in layer_caches(spec, i)]
        self._shapes = [(h, w) for i in self._cached for _, _, h, w in layer_caches(spec, i)]
        # GroupQueryAttention writes the new keys into the buffer it reads when past and present are one buffer: no
        # per-step copy of the cache. The other forms' present is a concatenation, written into a second buffer.
        self.shared = FORMS[spec.graph].shared_buffer
        self._capacity, self.length, self.offset, self._source = 0, 0, 0, 0
        self._buffers: list[list[np.ndarray]] = []
        self._mask = np.ones((1, 0), np.int64)
        self._logits: np.ndarray = np.empty(0, self._np_dtype)

    # -- the cache ------------------------------------------------------------------------------------------------
    def reserve(self, capacity: int) -> None:
        """Cache buffers for ``capacity`` tokens, the tokens cached so far kept (nothing happens when large enough).

        Shared (gqa): one [1, heads, capacity, width] array per layer and tensor (``LayerSpec.cache_shapes``: a
        latent layer's key and value differ in width). Otherwise two flat sets of heads * capacity * width values per
        layer and tensor: a call reads past from the front of one and writes present into the front of the other.
        """
        if capacity <= self._capacity:
            return
        n, shapes = self.length, self._shapes
        current = self._buffers[self._source] if self._buffers else []
        if self.shared:
            fresh: list[list[np.ndarray]] = [[np.zeros((1, h, capacity, w), self._np_dtype) for h, w in shapes]]
            for new, old in zip(fresh[0], current, strict=False):
                new[:, :, :n] = old[:, :, :n]
        else:
            fresh = [[np.zeros(h * capacity * w, self._np_dtype) for h, w in shapes] for _ in range(2)]
            for new, old, (h, w) in zip(fresh[self._source], current, shapes, strict=False):
                new[: h * n * w] = old[: h * n * w]
        self._buffers = fresh
        self._mask = np.ones((1, capacity), np.int64)
        self._capacity = capacity
        if self.shared:  # bound once per allocation, not per call: a decode step binds only its four small arrays
            for k, (past_name, present_name) in enumerate(self._names):
                self._bind_array(past_name, self._buffers[0][k])
                self._bind_array(present_name, self._buffers[0][k], output=True)

    def reset(self, position_offset: int = 0) -> None:
        """Empty the cache; the next ``append`` starts at ``position_offset`` (buffers kept)."""
        self.offset = _int("position_offset", position_offset, 0, self.max_positions - 1)
        self.length, self._source = 0, 0

    def _bind_array(self, name: str, array: np.ndarray, output: bool = False) -> None:
        """Bind ``array`` (its address: it must stay alive until the run) unless the same address and shape are."""
        key = (array.ctypes.data, array.shape)
        if self._bound.get(name) == key:
            return
        bind = self.binding.bind_output if output else self.binding.bind_input
        bind(name, "cpu", 0, array.dtype, list(array.shape), array.ctypes.data)
        self._bound[name] = key

    def append(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Run ``ids`` (s tokens) after the cached ones, at positions offset + length ..; logits [s, vocab].

        The logits are a view into a buffer the next call overwrites (copy to keep). Ids outside the vocabulary or
        positions past max_positions raise SpecError before anything runs; the cache grows when it must.
        """
        tokens = np.ascontiguousarray(ids, np.int64).reshape(-1)
        s = len(tokens)
        vocab = self.spec.vocab_size
        if s == 0:
            raise SpecError("ids", "no tokens to append")
        if tokens.min() < 0 or tokens.max() >= vocab:
            bad = int(tokens[(tokens < 0) | (tokens >= vocab)][0])
            raise SpecError("ids", f"id {bad} is outside the vocabulary [0, {vocab})")
        first, past = self.offset + self.length, self.length
        if first + s > self.max_positions:
            raise SpecError("ids", f"{s} token(s) at position {first} pass the decoder's last position "
                            f"{self.max_positions - 1} (max_positions {self.max_positions})")  # fmt: skip
        total = past + s
        if total > self._capacity:
            self.reserve(max(total, 2 * self._capacity))
        if self._logits.size < s * vocab:
            self._logits = np.empty(s * vocab, self._np_dtype)
        logits = self._logits[: s * vocab].reshape(1, s, vocab)
        # The binding holds raw addresses: every array bound must stay alive until the run (locals, not temporaries).
        if s == 1:
            self._token[0, 0], self._step_position[0, 0] = tokens[0], first
            input_ids, position_ids = self._token, self._step_position
        else:
            input_ids = tokens.reshape(1, s)
            position_ids = np.arange(first, first + s, dtype=np.int64).reshape(1, s)
        self._bind_array("input_ids", input_ids)
        # M-RoPE (Qwen-VL): text only, the same row on all three axes (kept alive, as the binding needs)
        position_ids = self.spec.positions.text(position_ids)
        self._bind_array(self.spec.positions.name, position_ids)
        self._bind_array("attention_mask", self._mask[:, :total])
        self._bind_array("logits", logits, output=True)
        for k, (past_name, present_name) in enumerate([] if self.shared else self._names):  # shared: bound by reserve
            read, write = self._buffers[self._source][k], self._buffers[1 - self._source][k]
            h, w = self._shapes[k]
            self._bind_array(past_name, read[: h * past * w].reshape(1, h, past, w))
            self._bind_array(present_name, write[: h * total * w].reshape(1, h, total, w), output=True)
        self.session.run_with_iobinding(self.binding)
        if not self.shared:
            self._source = 1 - self._source
        self.length = total
        return logits[0]

    # -- generation -----------------------------------------------------------------------------------------------
    def tokenizer(self) -> Tokenizer:
        """The folder's tokenizer.json read with ``tokenizers``; SpecError when the folder has none."""
        if self._tokenizer is None:
            path = self.folder / TOKENIZER
            if not path.is_file():
                raise SpecError("prompt", f"{str(self.folder)!r} has no {TOKENIZER} (the checkpoint had none): give "
                                "`prompt_ids`")  # fmt: skip
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise RuntimeUnavailable("tokenizers is not installed (pip install tokenizers)") from None
            try:
                self._tokenizer = Tokenizer.from_file(str(path))
            except Exception as exc:  # tokenizers raises its own exception type for a malformed file
                first = (str(exc).splitlines() or [""])[0]
                raise SpecError(TOKENIZER, f"cannot be read by tokenizers: {first}") from None
        return self._tokenizer

    def check(self, prompt: Sequence[int], max_new_tokens: int, position_offset: int) -> list[int]:
        """The prompt as a list, after checking ids, counts and positions (SpecError naming the field)."""
        vocab, limit = self.spec.vocab_size, self.max_positions
        max_new_tokens = _int("max_new_tokens", max_new_tokens, 1)
        position_offset = _int("position_offset", position_offset, 0)
        ids = [_int("prompt_ids", t, -(2**63)) for t in prompt]
        if not ids:
            raise SpecError("prompt_ids", "the prompt is empty: give at least one token")
        bad = next((k for k, t in enumerate(ids) if not 0 <= t < vocab), None)
        if bad is not None:
            raise SpecError("prompt_ids", f"id {ids[bad]} (index {bad}) is outside the vocabulary [0, {vocab})")
        self.fits(len(ids), "prompt_ids")  # the context's fault, not --position-offset's (which may not be given)
        if position_offset and self.position.encoding != "rope":
            raise SpecError("position_offset", f"must be 0 for a {self.position.encoding} decoder: its key positions "
                            "are counted from the attention mask (as BLOOM counts them), so a prompt cannot be placed "
                            "further on")  # fmt: skip
        if position_offset + len(ids) > limit:
            raise SpecError("position_offset", f"the prompt ({len(ids)} tokens) at offset {position_offset} ends at "
                            f"position {position_offset + len(ids) - 1}, past the decoder's last position "
                            f"{limit - 1} (max_positions {limit})")  # fmt: skip
        end = position_offset + len(ids) + max_new_tokens - 1
        if end >= limit:
            raise SpecError("max_new_tokens", f"{max_new_tokens} new tokens after a {len(ids)}-token prompt at offset "
                            f"{position_offset} reach position {end}, past the decoder's last position {limit - 1} "
                            f"(max_positions {limit}); at most {limit - position_offset - len(ids)}")  # fmt: skip
        return ids

    def generate(
        self,
        prompt: Sequence[int],
        max_new_tokens: int,
        position_offset: int = 0,
        policy: str = "re-prefill",
        stop_at_eos: bool = False,
    ) -> Generation:
        """Greedy generation of ``max_new_tokens`` after ``prompt`` (token ids), the prompt at ``position_offset``."""
        if policy not in POLICIES:
            raise SpecError("policy", f"must be one of {', '.join(POLICIES)}, got {policy!r}")
        ids = self.check(prompt, max_new_tokens, position_offset)
        tokenizer = self.tokenizer() if (self.folder / TOKENIZER).is_file() else None  # a bad one fails now, not after
        eos = _eos(self.config, self.spec) if stop_at_eos else set()
        self.reserve(len(ids) + max_new_tokens)
        self.reset(position_offset)
        sequence = list(ids)
        steps: list[Step] = []
        start = time.perf_counter()
        token = int(self.append(ids)[-1].argmax())
        cached_in = regime(self.position, position_offset + len(ids))
        steps.append(Step("prefill", position_offset, position_offset + len(ids) - 1, len(ids), cached_in,
                          time.perf_counter() - start, token))  # fmt: skip
        new = [token]
        while len(new) < max_new_tokens and new[-1] not in eos:
            sequence.append(new[-1])
            last = position_offset + len(sequence) - 1
            now = regime(self.position, last + 1)
            start = time.perf_counter()
            if policy == "re-prefill" and now != cached_in:
                self.reset(position_offset)
                kind, first, cached_in, fed = "re-prefill", position_offset, now, sequence
            else:
                kind, first, fed = "decode", last, sequence[-1:]
            token = int(self.append(fed)[-1].argmax())
            steps.append(Step(kind, first, last, last - first + 1, now, time.perf_counter() - start, token))
            new.append(token)
        text = None if tokenizer is None else tokenizer.decode(new)
        return Generation(ids, new, steps, position_offset, policy, self.threads, self.max_positions, text,
                          self.spec.name, bool(eos) and new[-1] in eos, text_positions(self.spec))  # fmt: skip

    def prompt_of(self, prompt_ids: Sequence[int] | None = None, prompt: str | None = None) -> list[int]:
        """The prompt as token ids: ``prompt_ids`` as given, or ``prompt`` text encoded; exactly one of them."""
        if (prompt_ids is None) == (prompt is None):
            raise SpecError("prompt_ids", "give the prompt as token ids (`prompt_ids`) or as text (`prompt`), one of "
                            "them")  # fmt: skip
        if prompt is None:
            return list(prompt_ids or [])
        ids = self.encode(prompt)
        self.fits(len(ids), "prompt")
        return ids

    def fits(self, count: int, field: str) -> None:
        """A prompt of ``count`` tokens leaves room in the context for one new token; else SpecError on ``field``."""
        limit = self.max_positions
        if count >= limit:
            raise SpecError(field, f"is {count} tokens: longer than the decoder's context (max_positions {limit}), "
                            f"which holds a prompt of at most {limit - 1} tokens and one new token; give a shorter "
                            "prompt")  # fmt: skip

    def encode(self, text: str) -> list[int]:
        """``text`` as token ids by the folder's tokenizer."""
        if not isinstance(text, str) or not text:
            raise SpecError("prompt", "must be a non-empty string")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            # Bytes that are not UTF-8 on a command line reach Python as lone surrogates (U+DC80..U+DCFF, PEP 383);
            # the tokenizer takes UTF-8 text only.
            char = ord(text[exc.start])
            what = f"byte 0x{char - 0xDC00:02x}" if 0xDC80 <= char <= 0xDCFF else f"lone surrogate U+{char:04X}"
            raise SpecError("prompt", f"is not UTF-8 text: {what} at character {exc.start}; give the prompt in "
                            "UTF-8") from None  # fmt: skip
        return list(self.tokenizer().encode(text).ids)


def _eos(config: dict[str, Any], spec: DecoderSpec) -> set[int]:
    """The checkpoint config's end-of-sequence ids inside the vocabulary."""
    value = config.get("eos_token_id")
    values = value if isinstance(value, list) else [value]
    return {v for v in values if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < spec.vocab_size}
