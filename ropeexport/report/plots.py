"""The figures of ``report.html`` as PNG bytes: error against position, a property's curve, an error histogram.

Figures are drawn on matplotlib's Agg canvas directly (``Figure`` + ``FigureCanvasAgg``), never through pyplot: no
figure is registered anywhere, so none is left open, and the caller's backend (``matplotlib.use``) and rcParams are
untouched. Each figure is drawn under matplotlib's default style plus the settings below, so a user's matplotlibrc
cannot change a report, and the PNG has a fixed pixel size and no timestamp or version: the same data gives the same
bytes.

Values come straight from ``report.json``: any of them may be null, a string such as ``"inf"``, or missing. Nothing
is dropped silently: null points are left out and counted, an infinite or NaN error is marked at the top of the axis,
and the figure says so below the axes.
"""

from __future__ import annotations

import io
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullLocator

from ropeexport.report.words import floats

DPI = 100
POSITION_SIZE = (9.6, 3.8)  # inches: 960 x 380 px
CURVE_SIZE = (6.4, 3.4)  # 640 x 340 px
HISTOGRAM_SIZE = (3.6, 2.9)  # 360 x 290 px: three side by side in report.html
STYLE = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": 8,
}
TOLERANCE_COLOR = "#cf222e"
NOTE_COLOR = "#57606a"
# What a log axis can be given. A limit of a third of the smallest error underflows to 0 for an error of 5e-324, and
# matplotlib then prints "Attempt to set non-positive ylim on a log-scaled axis will be ignored" on the user's stderr
# in the middle of a build; its log ticker overflows computing 10 ** x for limits near 1e300 (measured: numpy's
# overflow warnings and an OverflowError at 1e300, neither at 1e200). An error above the ceiling is drawn as a cross
# at the top, as an infinite one is.
LOG_FLOOR = sys.float_info.min  # the smallest normal double, 2.2e-308
LOG_CEILING = 1e200


@dataclass(frozen=True)
class Line:
    """One curve of the error-by-position plot: a comparison's worst absolute error per bin of positions."""

    label: str
    x: Sequence[Any]
    y: Sequence[Any]


def shorten(text: str, limit: int) -> str:
    """Text cut to ``limit`` characters: a long name must not squeeze the axes out of a fixed-size figure."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def new_figure(size: tuple[float, float]) -> Figure:
    """A figure on its own Agg canvas (never pyplot: nothing registered), laid out by constrained layout."""
    figure = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def png_bytes(figure: Figure) -> bytes:
    """The figure as PNG bytes with no timestamp or software tag (the same data gives the same bytes), then cleared."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    figure.clear()
    return buffer.getvalue()


def figure_notes(figure: Figure, notes: list[str]) -> None:
    """Say below the axes what the plot could not draw as it is (the layout makes room for it)."""
    if notes:
        figure.supxlabel("; ".join(notes), fontsize=8, color=NOTE_COLOR)


def drawable(y: float) -> bool:
    """Whether an error can be a point on a log axis (finite, at most ``LOG_CEILING``); zero is a gap, not a point."""
    return math.isfinite(y) and abs(y) <= LOG_CEILING


def log_limits(values: Sequence[float]) -> tuple[float, float]:
    """(low, high) of a log axis showing every positive drawable value, a factor 3 of room below and 5 above,
    inside ``LOG_FLOOR`` .. ``LOG_CEILING`` (so matplotlib neither refuses nor overflows them); (1e-9, 1) for none.
    """  # noqa: D205
    shown = [v for v in values if v > 0 and drawable(v)]
    if not shown:
        return 1e-9, 1.0
    return max(min(shown) / 3, LOG_FLOOR), min(max(shown) * 5, LOG_CEILING)


def _split(x: Sequence[Any], y: Sequence[Any]) -> tuple[list[tuple[float, float]], list[float], int]:
    """(drawable points, x of errors past the axis ("inf", "nan", over ``LOG_CEILING``), count of null points) of
    one curve.
    """  # noqa: D205
    points, bad, missing = [], [], 0
    for xi, yi, raw in zip(floats(list(x)), floats(list(y)), list(y), strict=False):
        if not math.isfinite(xi) or raw is None or isinstance(raw, bool):
            missing += 1
        elif drawable(yi):
            points.append((xi, abs(yi)))
        else:
            bad.append(xi)
    return points, bad, missing


def _draw_lines(ax: Any, curves: list[tuple[Line, list[tuple[float, float]], list[float], int]]) -> tuple[list, list]:
    """One log-axis line per curve; (labels of curves with no positive point, x of their non-finite points).

    A curve with no positive point draws nothing on a log axis, so it gets no legend entry (an invisible line would
    only confuse) and is named in a note instead.
    """
    exact: list[str] = []
    crosses: list[float] = []
    for line, points, bad, _ in curves:
        crosses += bad
        ys = [y if y > 0 else math.nan for _, y in points]  # NaN breaks the line
        if not any(y > 0 for y in ys):
            exact.append(shorten(line.label, 48))
            continue
        ax.plot([x for x, _ in points], ys, linewidth=1.0, alpha=0.9, label=shorten(line.label, 48))
    return exact, crosses


def _log_axes(ax: Any, crosses: list, low: float, high: float, axis_label: str, y_label: str, title: str) -> None:
    """A log y axis from ``low`` to ``high``, the bins with an infinite or NaN error as crosses along its top (room
    made above them), and the labels of a per-position plot: ``title`` "against" the axis's name.
    """  # noqa: D205
    if crosses:
        ax.plot(crosses, [high] * len(crosses), "x", color=TOLERANCE_COLOR, markersize=6, label="inf or NaN error")
        high *= 3
    ax.set_yscale("log")
    # Decades only: minor ticks on a log axis are most of a figure's drawing time (report.html draws about ten per
    # artifact, the largest part of a build), and the errors are read to the decade.
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_ylim(low, high)
    ax.set_xlabel(shorten(axis_label, 90))
    ax.set_ylabel(y_label)
    ax.set_title(shorten(f"{title} against " + axis_label.split(" (")[0], 90))


def error_by_position(lines: Sequence[Line], axis_label: str, atols: Sequence[Any] = ()) -> bytes:
    """Worst absolute error per bin against position: one line per comparison, log y, atol as a dotted red line.

    A log axis has no zero: bins whose worst error is exactly 0 are gaps in their line (and counted below the axes).
    Infinite or NaN errors are red crosses along the top.
    """
    with matplotlib.style.context(["default", STYLE]):
        figure = new_figure(POSITION_SIZE)
        ax = figure.add_subplot()
        curves = [(line, *_split(line.x, line.y)) for line in lines]
        tolerances = sorted({t for t in floats(list(atols)) if math.isfinite(t) and t > 0})
        low, high = log_limits([y for _, points, _, _ in curves for _, y in points] + tolerances)
        zeros = sum(y == 0 for _, points, _, _ in curves for _, y in points)
        missing = sum(lost for _, _, _, lost in curves)
        exact, crosses = _draw_lines(ax, curves)
        for atol in tolerances:
            ax.axhline(atol, color=TOLERANCE_COLOR, linestyle=":", linewidth=1.4, label=f"atol {atol:g}")
        _log_axes(ax, crosses, low, high, axis_label, "worst |error| in bin", "Worst absolute error")
        notes = []
        if exact:
            notes.append(f"no line for {', '.join(exact)}: zero error in every bin")
            zeros -= sum(len(p) for line, p, _, _ in curves if shorten(line.label, 48) in exact)
        if zeros:
            notes.append(f"{zeros} bins with zero error (gaps: a log axis has no 0)")
        if missing:
            notes.append(f"{missing} bins without a value (null) left out")
        if crosses:
            notes.append(f"{len(crosses)} bins with an infinite or NaN error, or one over {LOG_CEILING:g} "
                         "(crosses at the top)")
        figure_notes(figure, notes)
        if ax.get_legend_handles_labels()[0]:
            figure.legend(loc="outside right upper")
        return png_bytes(figure)


def share_by_position(lines: Sequence[Line], axis_label: str) -> bytes:
    """Each bin's worst error as a share of its allowance max(atol, rtol |expected|), log y; the envelope is y = 1.

    Dividing by each element's own allowance turns the tolerance envelope, which moves with |expected|, into one
    line: a point above it is a failing element, whatever the magnitude of the values there.
    """
    with matplotlib.style.context(["default", STYLE]):
        figure = new_figure(POSITION_SIZE)
        ax = figure.add_subplot()
        curves = [(line, *_split(line.x, line.y)) for line in lines]
        low, high = log_limits([y for _, points, _, _ in curves for _, y in points] + [1.0])
        exact, crosses = _draw_lines(ax, curves)
        envelope = "allowed: max(atol, rtol × |expected|)"  # black: the color cycle uses red for its 4th line
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1.2, label=envelope)
        title = "Worst error as a share of its allowance"
        _log_axes(ax, crosses, low, high, axis_label, "worst error / allowed", title)
        figure_notes(figure, [f"no line for {', '.join(exact)}: zero error in every bin"] if exact else [])
        figure.legend(loc="outside right upper")
        return png_bytes(figure)


def curve(title: str, x_label: str, y_label: str, x: Sequence[Any], y: Sequence[Any]) -> bytes:
    """A property's curve (the long-term decay of RoFormer's Figure 2 against relative distance)."""
    with matplotlib.style.context(["default", STYLE]):
        figure = new_figure(CURVE_SIZE)
        ax = figure.add_subplot()
        xs, ys = floats(list(x)), floats(list(y))
        pairs = [(a, b) for a, b in zip(xs, ys, strict=False) if math.isfinite(a) and math.isfinite(b)]
        if pairs:
            ax.plot([a for a, _ in pairs], [b for _, b in pairs], color="#0969da", linewidth=1.3)
        dropped = min(len(xs), len(ys)) - len(pairs)
        figure_notes(figure, [f"{dropped} points without a finite value left out"] if dropped else [])
        if not pairs:
            _note_in_axes(ax, "no finite points to plot")
        ax.set_xlabel(shorten(x_label, 80))
        ax.set_ylabel(shorten(y_label, 40))
        ax.set_title(shorten(title, 80))
        return png_bytes(figure)


def _note_in_axes(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color=NOTE_COLOR)


def histogram_bins(edges_log10: Sequence[Any], counts: Sequence[Any]) -> tuple[list[float], list[float], float]:
    """(edges, counts, exact zeros) of a histogram from JSON, with k + 1 finite edges for k counts.

    Two layouts are read: k counts for k + 1 edges, and k + 2 counts (one below the first edge, one at or above the
    last), whose outer counts get bins one edge-width wide. A first edge of ``-inf`` marks a first bin of exact zeros.
    """
    edges, heights = floats(list(edges_log10)), floats(list(counts))
    zeros = 0.0
    if edges and heights and not math.isfinite(edges[0]):
        zeros, edges, heights = heights[0], edges[1:], heights[1:]
    if len(edges) >= 2 and len(heights) == len(edges) + 1:
        width_low, width_high = edges[1] - edges[0], edges[-1] - edges[-2]
        edges = [edges[0] - width_low, *edges, edges[-1] + width_high]
    k = min(len(heights), len(edges) - 1)
    if k < 1 or not all(math.isfinite(e) for e in edges[: k + 1]):
        return [], [], zeros if math.isfinite(zeros) else 0.0
    heights = [h if math.isfinite(h) and h > 0 else 0.0 for h in heights[:k]]
    return edges[: k + 1], heights, zeros if math.isfinite(zeros) else 0.0


def error_histogram(
    title: str, edges_log10: Sequence[Any], counts: Sequence[Any], zeros: Any = None, atol: Any = None
) -> bytes:
    """Elements by |error| (log x, log count axis), exact zeros as a grey bar left of the rest, atol as a red line.

    The x axis spans the bins that hold elements (and atol), not every bin of the histogram.
    """
    with matplotlib.style.context(["default", STYLE]):
        figure = new_figure(HISTOGRAM_SIZE)
        ax = figure.add_subplot()
        edges, heights, exact_zeros = histogram_bins(edges_log10, counts)
        extra = floats([zeros])[0] if zeros is not None else math.nan
        exact_zeros += extra if math.isfinite(extra) and extra > 0 else 0.0
        used = [i for i, h in enumerate(heights) if h > 0]
        tolerance = floats([atol])[0] if atol is not None else math.nan
        tolerance_x = math.log10(tolerance) if math.isfinite(tolerance) and tolerance > 0 else None
        if used:
            lo, hi = edges[used[0]], edges[used[-1] + 1]
            if tolerance_x is not None:
                lo, hi = min(lo, tolerance_x), max(hi, tolerance_x)
            # One filled outline for every bin: a single artist draws far faster than one bar per bin.
            ax.stairs(heights, edges, fill=True, color="#0969da", baseline=0.5)
        else:
            lo, hi = (tolerance_x, tolerance_x) if tolerance_x is not None else (-1.0, 1.0)
        span = max(hi - lo, 1.0)
        # The axis runs in log10 |error|; ticks are labelled as errors (10^-8), so the zeros bar can be labelled 0.
        # Whole decades only: a tick at log10(atol) would read "10^-2.09691".
        ticks = [t for t in MaxNLocator(6, integer=True).tick_values(lo, hi) if lo - 1e-9 <= t <= hi + 1e-9]
        ticks = [t for t in ticks if float(t).is_integer()] or sorted({math.floor(lo), math.ceil(hi)})
        positions, labels = ticks, [f"$10^{{{t:g}}}$" for t in ticks]
        if exact_zeros > 0:
            # log10(0) is -inf: the zeros get their own bar, left of the rest.
            width = span / 15
            left = lo - 2.5 * width
            label = f"{exact_zeros:,.0f} exact 0"
            ax.bar([left], [exact_zeros], width=width, align="edge", color="#8c959f", label=label)
            positions, labels = [left + width / 2, *positions], ["0", *labels]
            lo = left
        ax.set_xticks(positions, labels=labels)
        if tolerance_x is not None:
            ax.axvline(tolerance_x, color=TOLERANCE_COLOR, linestyle=":", linewidth=1.4, label=f"atol {tolerance:g}")
        ax.set_xlim(lo - 0.05 * span, hi + 0.05 * span)
        if used or exact_zeros > 0:
            ax.set_yscale("log")
            ax.set_ylim(bottom=0.7)
            ax.yaxis.set_minor_locator(NullLocator())  # counts need decades only (and minor ticks cost time)
        else:
            _note_in_axes(ax, "no histogram counts")
        ax.set_xlabel("|error| (log scale)")
        ax.set_ylabel("elements")
        ax.set_title(shorten(title, 48))
        if ax.get_legend_handles_labels()[0]:
            figure.legend(loc="outside lower center", ncols=2, frameon=False)
        return png_bytes(figure)
