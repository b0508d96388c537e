"""Timing: entries, alternating rounds, ratios to the per-round roofline, and the quiet-machine bookkeeping.

Every entry gets warm-up calls, then ``--rounds`` rounds; in each round every entry runs a block of ``--repeats``
calls, and more until ``--min-block-ms`` has passed (order reversed every other round), and the block's median is
that round's figure. Ratios are the median over rounds of (entry / roofline of the same round), so drift of a shared
machine cancels. Each round records the CPU time other processes took (``/proc/stat`` minus this process); figures
use only the quiet rounds when there are enough of them (``tools/bench.py``'s docstring has the details).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOFLINE = ("copy_1t", "copy_mt")  # the roofline's entries: a round's roofline is the faster of the two
QUIET = 0.10  # a round is quiet when other processes took under 10% of the machine's CPU time during it
MIN_QUIET = 5  # fewer quiet rounds than this: figures fall back to every round


@dataclass
class Entry:
    """One contender of a scenario: ``fn()`` does one call; ``error`` instead when it could not be built or run."""

    name: str
    what: str
    fn: Callable[[], Any] | None = None
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    outputs: Callable[[], list[np.ndarray]] | None = None  # the last call's outputs, for the sanity check


def failed(name: str, what: str, exc: BaseException, **info: Any) -> Entry:
    """An entry that records why it has no time (first line of the exception)."""
    message = (str(exc).strip().splitlines() or [""])[0][:400]
    return Entry(name, what, error=f"{type(exc).__name__}: {message}", info=info)


def block(fn: Callable[[], Any], repeats: int, min_s: float) -> list[float]:
    """Seconds of each call (each timed alone): at least ``repeats`` calls, and more until ``min_s`` has passed.

    The time floor keeps a round of microsecond calls long enough for ``cpu_others`` to see who else ran.
    """
    times: list[float] = []
    begin = time.perf_counter()
    while len(times) < repeats or (time.perf_counter() - begin < min_s and len(times) < 100_000):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def cpu_snapshot() -> tuple[float, float, float] | None:
    """(all CPUs' seconds, their busy seconds, this process's CPU seconds) now; None without /proc/stat."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:8]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    total = sum(fields) / hz
    busy = total - (fields[3] + fields[4]) / hz  # minus idle and iowait
    own = os.times()
    return total, busy, own.user + own.system  # every thread of this process: ORT's, torch's, the roofline's


def cpu_others(before: tuple | None, after: tuple | None) -> float | None:
    """Share of the machine's CPU time that other processes used between two snapshots."""
    if before is None or after is None or after[0] - before[0] <= 0:
        return None
    others = (after[1] - before[1]) - (after[2] - before[2])
    return max(0.0, others / (after[0] - before[0]))


def measure(entries: list[Entry], roofline: tuple[str, ...], args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, time alternating blocks, and return per-entry figures relative to the per-round roofline.

    Each round also records how much CPU other processes took. Figures are taken over the *quiet* rounds (others
    under ``QUIET`` of the machine) when there are at least ``MIN_QUIET`` of them, else over every round; the
    basis is recorded (``_basis``), and the all-rounds ratio is kept beside it.
    """
    live = []
    for e in entries:
        if e.fn is None:
            continue
        try:
            for _ in range(args.warmup):
                e.fn()
            live.append(e)
        except Exception as exc:  # a runtime failure is a result too
            e.error, e.fn = failed(e.name, e.what, exc).error, None
    rounds: dict[str, list[float]] = {e.name: [] for e in live}
    samples: dict[str, list[list[float]]] = {e.name: [] for e in live}
    others: list[float | None] = []
    for r in range(args.rounds):
        before = cpu_snapshot()
        for e in live if r % 2 == 0 else live[::-1]:  # A B C, then C B A: drift hits every entry alike
            times = block(e.fn, args.repeats, args.min_block_s)
            samples[e.name].append(times)
            rounds[e.name].append(statistics.median(times))
        others.append(cpu_others(before, cpu_snapshot()))
    quiet = [r for r, o in enumerate(others) if o is not None and o < QUIET]
    basis = quiet if len(quiet) >= MIN_QUIET else list(range(args.rounds))
    present = [n for n in roofline if n in rounds]
    roof = [min(rounds[n][r] for n in present) for r in range(args.rounds)] if present else None
    out: dict[str, Any] = {}
    for e in entries:
        item: dict[str, Any] = {"what": e.what, **e.info}
        if e.name not in rounds:
            item["error"] = e.error or "not run"
            out[e.name] = item
            continue
        item["median_us"] = round(statistics.median(t for r in basis for t in samples[e.name][r]) * 1e6, 2)
        item["calls"] = sum(len(samples[e.name][r]) for r in range(args.rounds))
        item["round_medians_us"] = [round(t * 1e6, 2) for t in rounds[e.name]]
        if roof:
            ratios = [t / rt for t, rt in zip(rounds[e.name], roof, strict=True)]
            chosen = [ratios[r] for r in basis]
            item["ratio"] = round(statistics.median(chosen), 4)
            item["ratio_range"] = [round(min(chosen), 4), round(max(chosen), 4)]
            item["ratio_iqr"] = iqr(chosen)
            item["ratio_all_rounds"] = round(statistics.median(ratios), 4)
        out[e.name] = item
    if roof:
        out["_roofline_round_us"] = [round(t * 1e6, 2) for t in roof]
    out["_others_cpu_by_round"] = [None if o is None else round(o, 3) for o in others]
    out["_basis"] = {
        "rounds": "quiet" if basis == quiet else "all",
        "used": len(basis),
        "of": args.rounds,
        "quiet_threshold": QUIET,
    }
    out["_rounds"] = {name: [rounds[name][r] for r in basis] for name in rounds}  # for paired(); not written
    return out


def iqr(values: list[float]) -> list[float]:
    """[first quartile, third quartile]: how far the per-round figures spread around their median."""
    if len(values) < 2:
        return [round(values[0], 4)] * 2
    q = statistics.quantiles(values, n=4, method="inclusive")
    return [round(q[0], 4), round(q[2], 4)]


def paired_iqr(result: dict[str, Any], a: str, b: str) -> list[float] | None:
    """The interquartile range of the per-round ratios behind ``paired``."""
    rounds = result["_rounds"]
    if a not in rounds or b not in rounds:
        return None
    return iqr([x / y for x, y in zip(rounds[a], rounds[b], strict=True)])


def paired(result: dict[str, Any], a: str, b: str) -> float | None:
    """Median over the basis rounds of time(a) / time(b): timed in the same rounds, so shared drift cancels."""
    rounds = result["_rounds"]
    if a not in rounds or b not in rounds:
        return None
    return round(statistics.median(x / y for x, y in zip(rounds[a], rounds[b], strict=True)), 4)


def sanity(entries: list[Entry], reference: str) -> None:
    """Record each entry's largest |output - reference output| after warm-up: a fast wrong answer is no answer."""
    ref = next((e for e in entries if e.name == reference and e.fn is not None and e.outputs), None)
    if ref is None:
        return
    expected = [np.asarray(a, np.float64) for a in ref.outputs()]
    for e in entries:
        if e is ref or e.fn is None or e.outputs is None or e.name in ROOFLINE or e.name == "ort_floor":
            continue  # rooflines and the floor move bytes; their outputs are not the op's
        try:
            got = [np.asarray(a, np.float64) for a in e.outputs()]
            diffs = []
            for g, x in zip(got, expected, strict=True):
                if g.shape != x.shape:
                    raise ValueError(f"shape {list(g.shape)} vs {list(x.shape)}")
                both_inf = np.isinf(g) & np.isinf(x) & (np.sign(g) == np.sign(x))
                with np.errstate(invalid="ignore"):  # inf - inf where both are the same infinity: masked out below
                    diffs.append(float(np.max(np.where(both_inf, 0.0, np.abs(g - x)), initial=0.0)))
            e.info[f"max_abs_vs_{reference}"] = max(diffs)
        except Exception as exc:  # a shape mismatch is worth seeing, not a crash
            e.info[f"max_abs_vs_{reference}"] = f"not comparable: {exc}"


def run_scenario(entries: list[Entry], reference: str | None, args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, check against ``reference``, measure."""
    for e in entries:  # one call before the sanity check (warm-up proper happens in measure)
        if e.fn is not None:
            try:
                e.fn()
            except Exception as exc:
                e.error, e.fn = failed(e.name, e.what, exc).error, None
    if reference:
        sanity(entries, reference)
    return measure(entries, ROOFLINE, args)


def cpu_busy(window_s: float = 2.0) -> float | None:
    """Fraction of all CPUs busy over ``window_s`` while this process sleeps: other jobs' load (None off Linux).

    The load average would be a poor signal here: it lags by a minute and counts this benchmark's own threads.
    """

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]), idle

    try:
        total0, idle0 = sample()
        time.sleep(window_s)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def wait_quiet(limit_s: float) -> dict[str, Any]:
    """Wait until other jobs use under a quarter of the CPUs, or ``limit_s`` passes; what was seen."""
    start = time.perf_counter()
    busy = cpu_busy() if limit_s > 0 else None
    while busy is not None and busy >= 0.25 and time.perf_counter() - start < limit_s:
        busy = cpu_busy()
    seen = None if busy is None else round(busy, 2)
    return {"waited_s": round(time.perf_counter() - start, 1), "others_cpu_busy": seen}
