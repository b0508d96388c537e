"""Targets and findings: the issue's targets checked on this run's figures, and what limits each figure, in words.

Never asserted anywhere: ``targets`` records met / not met with the value and its spread, ``findings`` quotes the
experiments and the profiler with this run's numbers (a part is left out when its scenario did not run).
"""

from __future__ import annotations

import math
from typing import Any

from .timing import ROOFLINE, paired, paired_iqr


def get(scenarios: dict, scenario: str, entry: str, key: str = "ratio") -> Any:
    """scenarios[scenario][entry][key], or None when the scenario or entry did not run."""
    return scenarios.get(scenario, {}).get(entry, {}).get(key)


def target(name: str, value: float | None, limit: float, better: str, detail: str, scenario: str) -> dict[str, Any]:
    """A target row: met when ``value`` is at most (``better="lower"``) or at least ``limit``."""
    if value is None:
        met = None
    else:
        met = value <= limit if better == "lower" else value >= limit
    row = {"target": name, "value": value, "limit": limit, "better": better, "met": met, "detail": detail}
    return row | {"scenario": scenario}


def targets(s: dict, raw: dict, alibi_sizes: dict) -> list[dict[str, Any]]:
    """The issue's targets, checked on this run's figures (never asserted anywhere)."""
    rows = [
        target(
            "fused RoPE prefill fp32 <= 1.15x copy",
            get(s, "rope-prefill-fp32", "fused"),
            1.15,
            "lower",
            f"{get(s, 'rope-prefill-fp32', 'fused', 'median_us')} us vs roofline {_median(s, 'rope-prefill-fp32')} us; "
            f"IQR over rounds {get(s, 'rope-prefill-fp32', 'fused', 'ratio_iqr')}",
            "rope-prefill-fp32",
        )
    ]
    for dtype in ("fp32", "fp16"):
        sc = f"rope-decode-{dtype}"
        rows.append(
            target(
                f"fused RoPE decode {dtype} <= 1.5x copy",
                get(s, sc, "fused"),
                1.5,
                "lower",
                f"{get(s, sc, 'fused', 'median_us')} us vs roofline {_median(s, sc)} us; "
                f"ORT floor (Identity graph) {get(s, sc, 'ort_floor', 'median_us')} us; "
                f"IQR over rounds {get(s, sc, 'fused', 'ratio_iqr')}",
                sc,
            )
        )
    for dtype in ("fp32", "fp16"):
        sc = f"rope-prefill-{dtype}"
        speedup = paired(raw[sc], "peer", "fused") if sc in raw else None
        rows.append(
            target(
                f"fused >= 6x faster than the torch.onnx.export peer, prefill {dtype}",
                speedup,
                6.0,
                "higher",
                f"peer {get(s, sc, 'peer', 'median_us')} us, fused {get(s, sc, 'fused', 'median_us')} us; "
                f"IQR over rounds {paired_iqr(raw[sc], 'peer', 'fused') if sc in raw else None}",
                sc,
            )
        )
    for sc in ("rope-prefill-fp32", "rope-prefill-fp16", "rope-decode-fp32", "rope-decode-fp16"):
        rel = paired(raw[sc], "decomposed", "peer") if sc in raw else None
        rows.append(
            target(
                f"decomposed no slower than the peer, {sc[5:]}",
                rel,
                1.0,
                "lower",
                f"decomposed {get(s, sc, 'decomposed', 'median_us')} us, peer {get(s, sc, 'peer', 'median_us')} us "
                "(value: decomposed / peer, median of rounds; IQR "
                f"{paired_iqr(raw[sc], 'decomposed', 'peer') if sc in raw else None})",
                sc,
            )
        )
    for dtype in ("fp32", "fp16"):
        sc = f"alibi-bias-{dtype}"
        rows.append(
            target(
                f"ALiBi bias {dtype} <= 1.5x writing its output",
                get(s, sc, "fused"),
                1.5,
                "lower",
                f"{get(s, sc, 'fused', 'median_us')} us vs write roofline {_median(s, sc)} us; "
                f"IQR over rounds {get(s, sc, 'fused', 'ratio_iqr')}",
                sc,
            )
        )
    sizes = alibi_sizes
    rows.append(
        {
            "target": "ALiBi artifact stores H slopes, not a table",
            "value": sizes.get("initializer_bytes"),
            "limit": None,
            "better": "flat",
            "met": sizes.get("slopes_only"),
            "detail": sizes.get("detail"),
            "scenario": None,
        }
    )
    return rows


def _median(s: dict, scenario: str) -> float | None:
    """The roofline's absolute median (the faster copy's median over all calls)."""
    values = [get(s, scenario, n, "median_us") for n in ROOFLINE]
    values = [v for v in values if v is not None]
    return min(values) if values else None


def f(x: Any, digits: int = 2) -> str:
    """A figure for prose: rounded, or "n/a" when it was not measured."""
    if isinstance(x, (int, float)) and math.isfinite(x):
        return f"{x:.{digits}f}"
    return "n/a"


def ops(profile: dict) -> str:
    """``{op: us}`` of a profile as "Op 12 us, Op 3 us"."""
    return ", ".join(f"{op} {f(us, 0)} us" for op, us in profile.get("by_op_us", {}).items()) or "n/a"


def findings(s: dict, raw: dict, prof: dict) -> list[str]:
    """What limits each figure, in words with this run's numbers (a part is left out when its scenario did not run)."""
    out = []

    def pair(scenario: str, a: str, b: str) -> float | None:
        return paired(raw[scenario], a, b) if scenario in raw else None

    ex = "rope-prefill-fp32-experiments"
    if ex in s:
        p = prof.get(ex, {}).get("fused", {})
        rotary = p.get("by_op_us", {}).get("RotaryEmbedding")
        guard = sum(v for k, v in p.get("by_op_us", {}).items() if k != "RotaryEmbedding")
        run_us = p.get("model_run_us")
        out.append(
            f"RoPE prefill fp32, fused {f(get(s, ex, 'fused'))}x the numpy copy; ORT's own copy of the same bytes "
            f"(Identity graph) {f(get(s, ex, 'ort_floor'))}x, so fused / ORT copy = "
            f"{f(pair(ex, 'fused', 'ort_floor'))}. Profiler, per call: RotaryEmbedding {f(rotary, 0)} us of a "
            f"{f(run_us, 0)} us run; the range guard's {len(p.get('by_op_us', {})) - 1} other op types "
            f"{f(guard, 0)} us ({f(100 * guard / run_us if run_us else None, 1)}%). Without the guard "
            f"{f(get(s, ex, 'fused_no_guard'))}x; one thread {f(get(s, ex, 'fused_1_thread'))}x; session.run "
            f"instead of IO binding {f(get(s, ex, 'fused_run'))}x; ORT_DISABLE_ALL {f(get(s, ex, 'fused_no_opt'))}x "
            "(one fused node: nothing for the optimizer to do). What is left is ORT's RotaryEmbedding kernel "
            "(MLAS AVX2 row kernel under TryParallelFor) against a memcpy."
        )
    ex = "rope-decode-fp32-experiments"
    if ex in s:
        p = prof.get(ex, {})
        fused, bare, floor = p.get("fused", {}), p.get("fused_no_guard", {}), p.get("ort_floor", {})
        out.append(
            f"RoPE decode fp32: fused {f(get(s, ex, 'fused', 'median_us'), 1)} us per call, "
            f"{f(get(s, ex, 'fused'))}x a {f(_median(s, ex), 1)} us numpy copy of the same 320 KiB; ORT's Identity "
            f"graph {f(get(s, ex, 'ort_floor', 'median_us'), 1)} us. Without the guard "
            f"{f(get(s, ex, 'fused_no_guard', 'median_us'), 1)} us, one thread "
            f"{f(get(s, ex, 'fused_1_thread', 'median_us'), 1)} us, both "
            f"{f(get(s, ex, 'fused_no_guard_1_thread', 'median_us'), 1)} us "
            f"({f(get(s, ex, 'fused_no_guard_1_thread'))}x). Profiler (which adds its own cost per node): "
            f"{fused.get('nodes_executed')} nodes, run {f(fused.get('model_run_us'), 0)} us: {ops(fused)}; without "
            f"guard {f(bare.get('model_run_us'), 0)} us; Identity {f(floor.get('model_run_us'), 0)} us. At this size "
            "the limit is per-node dispatch (with the guard's 5 nodes on a [16, 1] int64 tensor a call takes "
            f"{f(pair(ex, 'fused', 'fused_no_guard'))}x as long as without them) and handing rows to the second "
            f"intra-op thread (spinning is off; two threads take {f(pair(ex, 'fused', 'fused_1_thread'))}x as long "
            "as one), not memory."
        )
    ex = "rope-prefill-fp16-experiments"
    if ex in s:
        p = prof.get(ex, {}).get("fused", {})
        out.append(
            f"RoPE prefill fp16: fused {f(get(s, ex, 'fused'))}x the copy (profiler: {ops(p)}); fp16 moves half "
            f"the bytes of fp32 but ORT's fp16 RotaryEmbedding kernel does not run in half the time (fused fp16 / "
            f"ORT copy {f(pair(ex, 'fused', 'ort_floor'))}). Casting to fp32 around an fp32 RotaryEmbedding is no "
            f"cure: {f(get(s, ex, 'fp32_compute'))}x (ORT's Cast passes cost more than the fp16 kernel saves). "
            "The tables are not the cost: half width in fp16, 4096 x 64 x 2 B = 512 KiB each, read once per row."
        )
    for sc in ("rope-prefill-fp32", "rope-prefill-fp16"):
        if sc in s:
            peer = prof.get(sc, {}).get("peer", {})
            ratio = get(s, sc, "torch_compile")
            compiled = f"{f(ratio)}x" if ratio else get(s, sc, "torch_compile", "error")
            out.append(
                f"{sc}: peer (torch.onnx.export) {f(get(s, sc, 'peer'))}x the roofline, fused "
                f"{f(get(s, sc, 'fused'))}x: {f(pair(sc, 'peer', 'fused'))}x faster than the peer; a kernel "
                f"running at the copy roofline itself would be {f(get(s, sc, 'peer'))}x faster. Decomposed "
                f"{f(get(s, sc, 'decomposed'))}x (decomposed / peer {f(pair(sc, 'decomposed', 'peer'))}). The peer "
                f"graph runs {peer.get('nodes_executed')} nodes per call ({ops(peer)}); rotate_half "
                "(Slice, Neg, Concat) and q * cos + rot * sin each write a full-size tensor, which is what a fused "
                f"kernel avoids. Eager {f(get(s, sc, 'eager'))}x, torch.compile {compiled}."
            )
    for sc in ("rope-decode-fp32", "rope-decode-fp16"):
        if sc in s:
            dec, peer = prof.get(sc, {}).get("decomposed", {}), prof.get(sc, {}).get("peer", {})
            out.append(
                f"{sc}: decomposed {f(get(s, sc, 'decomposed', 'median_us'), 1)} us, peer "
                f"{f(get(s, sc, 'peer', 'median_us'), 1)} us (decomposed / peer "
                f"{f(pair(sc, 'decomposed', 'peer'))}); at decode both are node-count bound: decomposed runs "
                f"{dec.get('nodes_executed')} nodes ({ops(dec)}), the peer {peer.get('nodes_executed')} "
                f"({ops(peer)}). The decomposed graph's extra nodes are the range guard (5) and the Split / Concat "
                "form of the rotation."
            )
    for dtype in ("fp32", "fp16"):
        ex = f"alibi-bias-{dtype}-experiments"
        if ex in s:
            p = prof.get(ex, {})
            cast = "" if dtype == "fp32" else ", then one Cast rounds it to fp16"
            text = (
                f"ALiBi bias {dtype}: the shipped single pass is {f(get(s, ex, 'fused'))}x the write roofline "
                f"(profiler {ops(p.get('fused', {}))}): the mask goes on the small [b, 1, q, k] distance (+inf) "
                f"and one broadcasting float32 Mul by the negated slopes writes [b, H, q, k]{cast}. The general "
                f"graph every bias method takes (clamp, Cast, Expand, mask) is {f(get(s, ex, 'general'))}x "
                f"({ops(p.get('general', {}))}); the single pass is {f(pair(ex, 'general', 'fused'))}x faster in "
                "the same rounds and bit for bit the same (tests/families/test_alibi.py). It applies where the "
                "clamp to the dtype's finite range cannot act (max slope x (max_positions - 1) within range: fp16 "
                "up to about 78k positions for the steepest slope 0.84); what remains is ORT's broadcasting Mul "
                + ("against numpy's fill." if dtype == "fp32" else "and the float32 -> fp16 Cast against a fill.")
            )
            out.append(text)
    for dtype in ("fp32", "fp16"):
        sc = f"sinusoidal-apply-{dtype}"
        if sc in s:
            out.append(
                f"{sc}: fused {f(get(s, sc, 'fused'))}x the copy of x -> y; profiler "
                f"{ops(prof.get(sc, {}).get('fused', {}))}: the Gather writes PE rows [b, s, d_model] (a full-size "
                "intermediate) before the Add reads it again"
                + (
                    "; the Casts are ORT's own, inserted around the Add because its CPU provider has no fp16 Add."
                    if dtype == "fp16"
                    else "."
                )
            )
    return out
