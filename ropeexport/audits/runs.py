"""A decoder run as its users run it: its own cache, filled by its own prefill, to the far end of its context.

The plan (``plan``): a prompt of seeded random ids filling the context the config declares (E positions) up to its
last n = 8 tokens, fed in chunks, each call given as cache what the model gave back from the call before (its
``present`` outputs: the keys it rotated itself, a sliding layer's window as it keeps it); then ``DRAWS`` draws of n
random tokens at positions E - n .. E - 1, each from that same cache; ``PROMPTS`` such prompts where the context is
at most ``LONGEST`` tokens (a long context's prefill is the cost: one prompt there). Scored (``Place``): the 8-token
windows ending at each power of two, at each switch of the schedule (L = original and original + 1), at each
attention window's edge, at the positions the findings are worst, at more spread evenly over the prompt (every window
of it where their logits take at most ``SCORED_BYTES``; ``SPREAD`` at least), and at the far end (each draw): the
logits there, per window. The windows at a switch end a call of the prompt, so that the call's length there is its
own (a model switching on the call's length, as LongRoPE does, is on the short side of its switch at L = original
and on the long side one past it, as a user's prompt of that length puts it).

Random cached entries are what this replaces: keys "as if already rotated" by nobody make a translation of q and k
alike look like a wrong model (it cancels in q.k), and, drawn with std 1, they lead the attention where the model's
own keys would not, so that what a fault does where users meet it was not what was measured.

A hybrid's convolution and recurrent states (``audits.states``) start as zeros and are carried from each call's
``present`` output to the next call, as users carry them. A model that takes no cache, or gives none back, is run as
such a model is: on the whole sequence, each draw one
call, up to ``LONGEST`` tokens. A context whose cache (given and given back) would pass ``CACHE_GIB``, or whose
prefill would take more than ``FLOPS`` floating-point operations (2 per weight per token, and the attention's: by
that count Llama-3.2-1B's 16384 tokens would take 6e13, its budget is about 2000 tokens; not run here), is run as far
as it fits; a plan that stops short of the
far end says why (``Plan.short``), and what it measured is a lower bound. Chunks are sized so that one chunk's
attention scores (chunk x context x heads, float32) stay under ``SCORES_BYTES`` (ONNX Runtime's memory arena then
holds a few times that: 3.3 GiB at the end of a 131072-token prefill of a tiny Qwen3 in 256-token calls, 240 s on
2 CPUs; with the arena off the same prefill takes four times as long).

One session at a time: ``run`` runs one model and keeps the scored windows' logits only ([n, vocab] each).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.audits import axes
from ropeexport.audits.axes import grid_delta, layout, takes_axes
from ropeexport.audits.prove import CACHE_GIB, Signature
from ropeexport.audits.states import RULE, layer_tail, state_shape

TOKENS = 8
DRAWS = 4  # continuations at the far end, each from the one prefilled cache
PROMPTS = 3  # prompts run where the context is at most LONGEST tokens (one past it)
SPREAD = 32  # windows scored evenly over the prompt at least, beside the powers of two and the named places
SCORED_BYTES = 2**27  # more, up to every window of the prompt, while their logits take no more than this per model
LONGEST = 4096  # the longest whole sequence a model without a cache of its own is run on
SCORES_BYTES = 2**29  # one prefill chunk's attention scores, at most
FLOPS = 5e12  # a prefill's floating-point operations, at most (a tiny model's 131072 tokens: 4.4e12, 240 s on 2 CPUs)
NUMPY = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
         "tensor(int32)": np.int32, "tensor(bool)": np.bool_}  # fmt: skip


@dataclass(frozen=True)
class Place:
    """An 8-token window scored: its words and its last position (the draws: ``draw`` 0, 1, ..)."""

    name: str
    last: int
    draw: int | None = None
    stop: bool = False  # a call of the prefill ends here: L is the window's own (a switch's side)

    @property
    def first(self) -> int:
        """Its first position."""
        return max(0, self.last - TOKENS + 1)


@dataclass
class Plan:
    """How a model is run (module doc): ``mode`` ``cache`` (its own cache, fed back) or ``whole`` (whole sequences);
    ``reach``: positions 0 .. reach - 1 run (E, or fewer: ``short`` says why); ``chunk``: tokens per prefill call.
    """  # noqa: D205

    mode: str
    reach: int
    chunk: int
    places: list[Place] = field(default_factory=list)
    short: str | None = None
    prompts: int = 1  # prompts run, each to the far end with its own draws
    vocab: int = 2
    caches: dict[str, str] = field(default_factory=dict)  # cache input -> the output giving it back
    inputs: dict[str, Any] = field(default_factory=dict)  # name -> (shape, type) as declared
    positions: np.ndarray | None = None  # M-RoPE: each token's [3] positions, [3, reach] (``axes.layout``)

    def how(self) -> str:
        """The plan in words."""
        each = f"{self.prompts} prompts" if self.prompts > 1 else "one prompt"
        if self.mode == "cache":
            words = (f"as users run it: its own cache from a prefill of {self.reach - TOKENS} tokens (calls of up to "
                     f"{min(self.chunk, self.reach - TOKENS)}), {DRAWS} draws of {TOKENS} tokens at "
                     f"{'tokens' if self.positions is not None else 'positions'} {self.reach - TOKENS}.."
                     f"{self.reach - 1}; {each}")  # fmt: skip
        else:
            words = (f"as users run it: whole sequences of {self.reach} tokens ({DRAWS} draws of the last {TOKENS}); "
                     f"{each}")  # fmt: skip
        if self.positions is not None:
            words += (f"; position_ids [3, batch, seq]: text, an image grid of 1 x 4 x 6 at tokens 4..27, text after "
                      f"it to position {int(self.positions.max())} (windows named by token index, {grid_delta()} past "
                      "their text position after the grid)")  # fmt: skip
        return words + (f"; {self.short}" if self.short else "")


def _layer_tail(name: str) -> tuple[int, str] | None:
    numbers = re.findall(r"\d+", name)
    tail = name.rsplit(".", 1)[-1].lower()
    if not numbers or tail not in ("key", "value"):
        return None
    return int(numbers[0]), tail


def plan(path: Path, spec: Any, worst: list[int], windows: list[int] = ()) -> Plan | str:  # type: ignore[assignment]
    """The plan for ``path`` under ``spec`` (module doc), the findings' ``worst`` positions and the layers'
    attention ``windows`` scored too; or why the model cannot be run so.
    """  # noqa: D205
    from ropeexport.families.rope.regimes import original_length

    signature = Signature(path)
    inputs = {i.name: (i.shape, i.type) for i in signature.get_inputs()}
    outputs = {o.name: o for o in signature.get_outputs()}
    states = [n for n, (shape, _) in inputs.items() if state_shape(n, shape) is not None]  # before caches: a
    # recurrent state is [b, heads, k, v], four axes as a cache's, all fixed but the batch
    cached = [n for n, (shape, _) in inputs.items()
              if len(shape) == 4 and ("past" in n or "cache" in n) and n not in states]  # fmt: skip
    other = [n for n in inputs if n not in ("input_ids", "attention_mask", "position_ids", *cached, *states)]
    if "input_ids" not in inputs or other:
        return (f"the model reads input {(other or ['input_ids'])[0]!r}, which a run as users run it cannot feed "
                f"({RULE})")  # fmt: skip
    logits = next((o for o in outputs.values() if o.name == "logits"), next(iter(outputs.values())))
    # ids below the vocabulary the logits declare (an encoding's spec has none: 2 tokens then, still a prompt)
    vocab = logits.shape[-1] if logits.shape and isinstance(logits.shape[-1], int) else 2
    given_back = {}
    for name in cached:
        wanted = _layer_tail(name)
        match = next((o for o in outputs if "present" in o and _layer_tail(o) == wanted), None)
        if wanted is not None and match is not None:
            given_back[name] = match
    for name in states:  # a state given back as present.<layer>.<the same tail>: carried as users carry it
        match = next((o for o in outputs if "present" in o and layer_tail(o) == layer_tail(name)), None)
        if match is not None:
            given_back[name] = match
    end = int(spec.max_positions)
    carried = [*cached, *states]
    mode = "cache" if cached and len(given_back) == len(carried) else "whole"
    reach, short = end, None
    heads = int(getattr(spec, "num_heads", 1) or 1)
    if mode == "whole" and end > LONGEST:
        reach = LONGEST
        what = "no cache back" if cached else "no cache"
        short = (f"the model takes {what}: run on whole sequences of at most {LONGEST} tokens, positions {LONGEST} .. "
                 f"{end - 1} not run")  # fmt: skip
    if mode == "cache":
        per_entry = sum(2 * _entry_bytes(inputs[n], spec) for n in cached)  # given, and given back
        fits = int(CACHE_GIB * 2**30 // max(per_entry, 1))
        if fits + TOKENS < end:
            reach = max(TOKENS, fits)
            short = (f"a cache of {end - TOKENS} entries would take {per_entry * (end - TOKENS) / 2**30:.3g} GiB "
                     f"given and given back (at most {CACHE_GIB:g}): run to position {reach - 1}, positions {reach} .. "
                     f"{end - 1} not run")  # fmt: skip
    work = _work(path, spec, max(1, len(cached) // 2))
    if work(reach) > FLOPS:  # the prefill's cost: as far as the budget takes it
        fits = next(t for t in range(reach, TOKENS - 1, -max(1, reach // 256)) if work(t) <= FLOPS or t <= TOKENS)
        fits = max(TOKENS * 2, fits)
        short = (f"a prefill to position {end - 1} would take about {work(end):.2g} floating-point operations (at most "
                 f"{FLOPS:.0e}): run to position {fits - 1}, positions {fits} .. {end - 1} not run")  # fmt: skip
        reach = min(reach, fits)
    chunk = TOKENS
    while chunk < 1024 and 2 * chunk * reach * heads * 4 <= SCORES_BYTES:
        chunk *= 2
    marks = {p - 1 for p in (1 << k for k in range(3, 40)) if p - 1 < reach - TOKENS}
    spread = max(SPREAD, min(SCORED_BYTES // (TOKENS * int(vocab) * 4), (reach - TOKENS) // TOKENS))
    marks |= {int(p) for p in np.linspace(TOKENS - 1, reach - TOKENS - 1, spread)}
    places = [Place(f"position {p}", p) for p in sorted(marks)]
    limit = original_length(spec)
    if limit is not None and TOKENS <= limit < reach - TOKENS:
        places += [Place(f"L = original ({limit})", limit - 1, stop=True),
                   Place(f"L = original + 1 ({limit + 1})", limit, stop=True)]
    for window in sorted(set(windows)):
        if 0 < window < reach - TOKENS - 1:
            places += [Place(f"window edge ({window})", window), Place(f"window edge + 1 ({window + 1})", window + 1)]
    for position in sorted(set(worst)):
        if TOKENS - 1 <= position < reach - TOKENS:
            places.append(Place(f"position {position} (where the table is worst)", position))
    far = "the far end" if short is None else "the end of what was run"
    places += [Place(f"{far} (draw {k})", reach - 1, k) for k in range(DRAWS)]
    prompts = PROMPTS if reach <= LONGEST else 1  # a long context's prefill is the cost: one prompt there
    positions = None
    if "position_ids" in inputs and takes_axes(inputs["position_ids"][0]):  # M-RoPE: an image grid in the prompt,
        # its tokens past the positions it advances added, so the draws still end at position reach - 1
        positions = layout(reach + grid_delta(), reach - 1)
        if positions.shape[1] == reach + grid_delta():
            reach += grid_delta()
            places = [p if p.draw is None else Place(p.name, reach - 1, p.draw) for p in places]
        else:
            positions = None
        while chunk > TOKENS and chunk >= end:  # the image grid's tokens outnumber its positions: a call of more
            # tokens than the tables have rows is refused by ONNX Runtime's MRotaryEmbedding (onnxruntime-genai's
            # builder), though every position is in range; a prefill in calls shorter than the context runs
            chunk //= 2
    return Plan(mode, reach, chunk, places, short, prompts, int(vocab), given_back, inputs, positions)


def _work(path: Path, spec: Any, layers: int) -> Any:
    """Floating-point operations of a prefill of t tokens, as a function of t: 2 per weight per token, and each
    layer's attention, 4 per head channel per pair of positions (q.k and the weighted values, over t^2 / 2 pairs).
    """  # noqa: D205
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    weights = sum(int(np.prod(t.dims)) for t in graph.initializer if len(t.dims) >= 2)
    width = int(getattr(spec, "num_heads", 1) or 1) * int(getattr(spec, "head_dim", 1) or 1)
    return lambda t: 2.0 * weights * t + 2.0 * layers * width * float(t) * float(t)


def _entry_bytes(declared: tuple[Any, str], spec: Any) -> int:
    """Bytes of one cached entry of a cache input [b, heads, past, d] (symbolic axes from ``spec``)."""
    shape, kind = declared
    heads = shape[1] if isinstance(shape[1], int) else int(getattr(spec, "num_kv_heads", 1) or 1)
    width = shape[3] if isinstance(shape[3], int) else int(getattr(spec, "head_dim", 1) or 1)
    return int(heads) * int(width) * np.dtype(NUMPY.get(kind, np.float32)).itemsize


def _ids(plan: Plan, index: int = 0) -> tuple[np.ndarray, list[np.ndarray]]:
    """Prompt ``index``'s ids [reach - n] and its draws [n] each: seeded, the same for every model."""
    rng = np.random.default_rng(index)
    prompt = rng.integers(0, max(plan.vocab, 2), plan.reach - TOKENS)
    return prompt, [rng.integers(0, max(plan.vocab, 2), TOKENS) for _ in range(DRAWS)]


def run(path: Path, plan: Plan, spec: Any, threads: int | None = None) -> list[dict[Place, np.ndarray]]:
    """``path`` run by ``plan``, once per prompt: each place's logits [n, vocab] (float32)."""
    import onnxruntime as ort

    from ropeexport.audits.model import quiet

    options, run_options = quiet(threads)
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    logits_name = "logits" if "logits" in names else names[0]
    inside = [p for p in plan.places if p.draw is None]
    draw_places = {p.draw: p for p in plan.places if p.draw is not None}

    def call(ids: np.ndarray, start: int, past: dict[str, np.ndarray]) -> np.ndarray:
        n = len(ids)
        feeds: dict[str, np.ndarray] = {"input_ids": ids.reshape(1, n)}
        if "attention_mask" in plan.inputs:
            feeds["attention_mask"] = np.ones((1, start + n))
        if "position_ids" in plan.inputs:
            row = np.arange(start, start + n).reshape(1, n)
            given = plan.positions
            feeds["position_ids"] = given[:, None, start : start + n] if given is not None else axes.rows(
                row, plan.inputs["position_ids"][0])  # M-RoPE: the prompt's own [3, 1, n]
        feeds |= past
        for name, value in list(feeds.items()):
            feeds[name] = value.astype(NUMPY.get(plan.inputs[name][1], value.dtype), copy=False)
        out = dict(zip(names, session.run(None, feeds, run_options), strict=True))
        past.clear()
        past.update({n: out[back] for n, back in plan.caches.items()})  # what it gave back: the next call's
        logits = np.asarray(out[logits_name])
        return logits.reshape(-1, logits.shape[-1])

    def keep(got: dict[Place, np.ndarray], rows: np.ndarray, start: int) -> None:
        for place in inside:
            lo, hi = max(place.first, start), min(place.last + 1, start + len(rows))
            if lo < hi:
                held = got.setdefault(place, np.zeros((place.last + 1 - place.first, rows.shape[1]), np.float32))
                held[lo - place.first : hi - place.first] = rows[lo - start : hi - start]

    runs = []
    for k in range(plan.prompts):
        prompt, draws = _ids(plan, k)
        got: dict[Place, np.ndarray] = {}
        if plan.mode == "whole":
            for d, draw in enumerate(draws):
                empty = {n: _empty(plan.inputs[n], spec, n) for n in plan.inputs if _is_cache(n, plan)}
                rows = call(np.concatenate([prompt, draw]), 0, empty)
                if d == 0:
                    keep(got, rows, 0)
                got[draw_places[d]] = rows[-TOKENS:]
            runs.append(got)
            continue
        past = {n: _empty(plan.inputs[n], spec, n) for n in plan.caches}
        seen = 0
        stops = sorted({p.last + 1 for p in inside if p.stop})  # L there is the window's own (a switch's sides)
        while seen < len(prompt):
            stop = next((b for b in stops if b > seen), len(prompt))
            ids = prompt[seen : min(stop, seen + plan.chunk)]
            keep(got, call(ids, seen, past), seen)
            seen += len(ids)
        prefilled = dict(past)
        for d, draw in enumerate(draws):  # each from the one prefilled cache
            got[draw_places[d]] = call(draw, seen, dict(prefilled))[-TOKENS:]
        runs.append(got)
    return runs


def _is_cache(name: str, plan: Plan) -> bool:
    """A cache input [b, heads, past, d], or a hybrid's state input (``audits.states``)."""
    shape = plan.inputs[name][0]
    return state_shape(name, shape) is not None or len(shape) == 4 and ("past" in name or "cache" in name)


def _empty(declared: tuple[Any, str], spec: Any, name: str = "") -> np.ndarray:
    """An empty cache [1, heads, 0, d] of a cache input; a state input's zeros (``audits.states``)."""
    shape, kind = declared
    state = state_shape(name, shape)
    if state is not None:
        return np.zeros(state, NUMPY.get(kind, np.float32))
    heads = shape[1] if isinstance(shape[1], int) else int(getattr(spec, "num_kv_heads", 1) or 1)
    width = shape[3] if isinstance(shape[3], int) else int(getattr(spec, "head_dim", 1) or 1)
    return np.zeros((1, heads, 0, width), NUMPY.get(kind, np.float32))


def compare(plan: Plan, first: list[dict[Place, np.ndarray]], second: list[dict[Place, np.ndarray]],
            ) -> dict[str, Any]:  # fmt: skip
    """Per place max |first - second| and that over max |first| (the logit scale there), the worst prompt's; the
    worst place.
    """  # noqa: D205
    places: list[dict[str, Any]] = []
    for place in plan.places:
        found = []
        for one, two in zip(first, second, strict=True):
            a, b = np.asarray(one[place], np.float64), np.asarray(two[place], np.float64)
            worst, scale = float(np.max(np.abs(a - b), initial=0.0)), float(np.max(np.abs(a), initial=0.0))
            found.append((worst / scale if scale else worst, worst, scale))
        relative, worst, scale = max(found)
        places.append({"name": place.name, "positions": [place.first, place.last], "max_abs": worst,
                       "scale": scale, "relative": relative})  # fmt: skip
    top = max(places, key=lambda p: p["relative"])
    # kept in the record: every named place (switches, window edges, the worst table row, the draws), the powers of
    # two, and the 16 worst of the windows spread over the prompt (thousands of them, for a long context)
    spread = sorted((p for p in places if not _named(p["name"], p["positions"][1])), key=lambda p: -p["relative"])
    kept = [p for p in places if _named(p["name"], p["positions"][1]) or p in spread[:16]]
    return {"position": top["positions"][1], "positions": top["positions"], "max_abs": top["max_abs"],
            "scale": top["scale"], "relative": top["relative"], "at": top["name"], "places": kept,
            "windows": len(places),
            "how": plan.how(), **({"short": plan.short, "up_to": plan.reach - 1} if plan.short else {})}  # fmt: skip


def _named(name: str, last: int) -> bool:
    """A place scored for what it is (a switch, an edge, a draw, a power of two), not one of the spread windows."""
    return not name.startswith("position ") or "(" in name or (last + 1) & last == 0
