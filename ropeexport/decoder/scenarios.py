"""The generation scenarios a decoder is verified by, and the RoPE regime each call runs in.

A scenario is a greedy generation: prompts (left-padded to the longest; one length per batch row) placed at a first
position through ``position_ids``, prefilled in one call or in chunks at cache offsets, then single-token decode
steps, present -> past. Every decoder gets a 64-step decode, a chunked prefill, a left-padded batch of different
lengths and a prompt placed so the last step sits at max_positions - 1 (and a prompt straddling each step of a layer's
query scale, Ministral 3's); a schedule with an
``original_max_position_embeddings`` also gets a prompt straddling it and decode steps across it, and a schedule whose
tables change with the length (LongRoPE's switch, dynamic NTK) that crossing once per cache policy:
- ``re-prefill`` (the default, as onnxruntime-genai does): when a step's regime differs from the one the cache was
  built in, the whole sequence is prefilled again, so every cached key is rotated under the regime in effect;
- ``keep``: the cache is kept; keys cached before the switch stay rotated under the old regime, and the difference
  from the float64 truth (which re-rotates them) is reported as that regime's cost, not as a failure.
Each row runs in its own regime, of its own L_b = max(position_ids[b]) + 1 (``families.rope.regimes``); such a schedule
also gets ``mixed-regimes`` (once per cache policy): one batch whose long row sits past the switch while its short
row sits before it and crosses it while decoding, each row judged against its own float64 truth (dynamic NTK: rows
of different L at every call).
"""

from __future__ import annotations

from dataclasses import dataclass

from ropeexport.components.query_scale import QueryScaleSpec
from ropeexport.decoder.spec import POLICIES, DecoderSpec
from ropeexport.errors import SpecError
from ropeexport.families.rope.regimes import original_length, regime, regime_kind


@dataclass(frozen=True)
class Scenario:
    """One greedy generation (module doc): ``prompts`` real tokens per row, ``steps`` decode steps after them."""

    name: str
    prompts: tuple[int, ...]
    steps: int
    start: int = 0  # position of each row's first real token
    chunks: tuple[int, ...] = ()  # prefill chunk sizes (their sum is the longest prompt); () = one call
    policy: str = "re-prefill"
    about: str = ""

    def __post_init__(self) -> None:
        assert self.policy in POLICIES, self.policy
        assert not self.chunks or sum(self.chunks) == max(self.prompts), (self.chunks, self.prompts)


# The regime of a call is the rope family's to say (``families.rope.regimes``); greedy, serve and the tests read these
# names here.
threshold = original_length
__all__ = ["Scenario", "regime", "regime_kind", "scenarios", "threshold"]


def scenarios(spec: DecoderSpec) -> list[Scenario]:
    """The scenarios of the module doc for the spec."""
    position = spec.position_spec()
    top = position.max_positions
    out = [
        Scenario("decode-64", (12,), 64, about="a 12-token prompt, then 64 greedy steps"),
        Scenario("chunked-prefill", (21,), 8, chunks=(8, 7, 6), about="21 tokens prefilled 8 + 7 + 6 at offsets"),
        Scenario("left-padded", (12, 7, 3), 16, about="3 rows of 12, 7 and 3 tokens, left-padded"),
    ]
    if position.encoding == "rope" and top >= 24:  # ALiBi counts key positions from the mask, not position_ids
        out.append(Scenario("far-positions", (8,), 16, start=top - 24, about=f"the last step at {top - 1}"))
    limit = original_length(position)
    if limit is not None and limit + 16 <= top:
        out.append(Scenario("prompt-across-switch", (16,), 8, start=limit - 8,
                            about=f"the prompt straddles original_max {limit}"))  # fmt: skip
        out.append(Scenario("decode-across-switch", (8,), 16, start=limit - 12,
                            about=f"decode steps cross original_max {limit}"))  # fmt: skip
        if regime_kind(position) != "static":
            out.append(Scenario("decode-across-switch-keep", (8,), 16, start=limit - 12, policy="keep",
                                about="the same, the cache kept across the switch"))  # fmt: skip
            # Row 0 ends its prompt at limit + 3 (past the switch), row 1 at limit - 7 (before it; it crosses at
            # step 7); the last step sits at limit + 15, inside the decode-across-switch scenarios' reach.
            mixed = f"rows on both sides of original_max {limit} in one batch, each in its own regime"
            out.append(Scenario("mixed-regimes", (14, 4), 12, start=limit - 10, about=mixed))
            out.append(Scenario("mixed-regimes-keep", (14, 4), 12, start=limit - 10, policy="keep",
                                about=f"{mixed}, the cache kept across the switch"))  # fmt: skip
    windows = sorted({layer.window for layer in spec.layers if layer.window})
    for window in windows[:1] if len(windows) == 1 else windows:  # each window crossed in prefill, then in decode
        if window + 8 + 16 <= top:
            out.append(Scenario(f"across-window-{window}", (window + 8,), 16,
                                about=f"a {window + 8}-token prompt over the {window}-slot window, then 16 steps "
                                "past it"))  # fmt: skip
    for step in _query_scale_steps(spec):  # each step of a query scale crossed by a prompt (Ministral 3)
        crossing = Scenario(f"query-scale-step-{step}", (16,), 8, start=step - 8,
                            about=f"the prompt straddles the query scale's step at position {step}")  # fmt: skip
        if step + 16 <= top and not any((o.prompts, o.steps, o.start) == (crossing.prompts, crossing.steps,
                                                                         crossing.start) for o in out):  # fmt: skip
            out.append(crossing)
    return out


def _query_scale_steps(spec: DecoderSpec) -> list[int]:
    """The positions where a layer's query scale changes (``components.query_scale``), sorted, each once: of each
    scale its first two steps and its last that a straddling prompt fits around (Ministral 3's three; Llama 4's
    temperature steps every floor_scale positions, 8192 in the released models: every step is the same formula, and a
    scenario each would be hundreds).
    """  # noqa: D205
    top = spec.position_spec().max_positions
    # Mistral Large 4's learned log scale is smooth in the position (no steps): the scenarios' spread covers it
    described = [layer.query_scale for layer in spec.layers
                 if layer.query_scale is not None and layer.query_scale.get("kind") != "learned_log"]  # fmt: skip
    out: set[int] = set()
    for d in described:
        # the steps a 16-token prompt straddling them fits around (8 positions before, 8 after)
        steps = [p for p in QueryScaleSpec.of(d, top, spec.dtype).steps() if p >= 8 and p + 16 <= top]
        out |= {*steps[:2], *steps[-1:]}
    return sorted(out)


def positions_needed(spec: DecoderSpec) -> tuple[int, Scenario]:
    """The fewest max_positions every scenario fits in, and the scenario that needs them: its last step feeds the
    token at position start + longest prompt + steps - 1.
    """  # noqa: D205
    return max(((s.start + max(s.prompts) + s.steps, s) for s in scenarios(spec)), key=lambda pair: pair[0])


def check_positions(spec: DecoderSpec, source: str | None = None) -> None:
    """SpecError naming `max_positions` when the decoder's scenarios do not fit in it (``source``: the config key it
    came from, when not the flag); checked before the build, not found at its end.
    """  # noqa: D205
    top = spec.position_spec().max_positions
    need, scenario = positions_needed(spec)
    if need > top:
        where = f" (the config's {source})" if source else ""
        raise SpecError("max_positions", f"{top}{where} is fewer than the {need} positions the decoder is verified "
                        f"over ({scenario.name}: {scenario.about}); give `max_positions` {need} or more")  # fmt: skip
