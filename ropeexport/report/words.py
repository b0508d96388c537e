"""The words and numbers of a report, shared by ``report.md`` and ``report.html`` so that both say the same thing.

Plain text, never escaped: each writer escapes for its own format. Every optional key of ``report.json`` may be
absent or empty and every metric may be null (a runtime that raised): the words then say so instead of failing.
"""

from __future__ import annotations

import json
import math
from typing import Any

# Keys of ``worst`` that say where the element sits, with the word a reader sees.
PLACE_WORDS = (
    ("batch", "batch"),
    ("head", "head"),
    ("position", "position"),
    ("query_position", "query"),
    ("key_position", "key"),
    ("channel", "channel"),
)
_NOT_PLACES = {"probe", "error", "actual", "expected", *(key for key, _ in PLACE_WORDS)}


def items(report: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """``report[key]`` as a list of dicts: absent, null, or entries that are not objects are left out."""
    value = report.get(key)
    if not isinstance(value, list):
        return []
    return [entry for entry in value if isinstance(entry, dict)]


def mapping(report: dict[str, Any], key: str) -> dict[str, Any]:
    """``report[key]`` as a dict; empty when absent or not an object."""
    value = report.get(key)
    return value if isinstance(value, dict) else {}


def number(value: Any, digits: int = 3) -> str:
    """A metric for a reader: ``n/a`` for null, thousands separators for counts, 3 significant digits otherwise."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.{digits}g}"
    return str(value)


def exact(value: Any) -> str:
    """An output value with the digits that tell actual from expected (9 significant: float32 and more)."""
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.9g}"
    return number(value)


def cosine(value: Any) -> str:
    """Cosine similarity; near 1 as ``1 - gap`` since six nines say nothing about an fp32 artifact."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return number(value)
    gap = 1.0 - float(value)
    if gap == 0.0:
        return "1"
    if 0.0 < gap < 1e-3:
        return f"1 - {gap:.1e}"
    return f"{value:.6f}"


def verdict(passed: Any) -> str:
    """PASS, FAIL, or info for a check that measures without judging (``passed`` null)."""
    if passed is True:
        return "PASS"
    if passed is False:
        return "FAIL"
    return "info"


def compact(value: Any) -> str:
    """A spec, coverage or environment value on one line, as JSON writes it (strings without quotes)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(", ", ": "), default=str)


def comparison_label(c: dict[str, Any]) -> str:
    """``float64 vs ort: query_out``."""
    return f"{c.get('reference', '?')} vs {c.get('runtime', '?')}: {c.get('output', '?')}"


def error(value: Any) -> str:
    """An error, absolute or relative to a scale, as every report and CLI line prints one: three significant digits
    in scientific notation (``2.98e-08``, ``2.70e-03``, ``0.00e+00``), so that figures side by side line up and
    compare at a glance (``0.0027`` beside ``2.98e-08`` does not); ``n/a`` for null (a runtime that raised).
    """  # noqa: D205
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a" if value is None else str(value)
    if math.isnan(value) or math.isinf(value):
        return number(float(value))
    return f"{value:.2e}"


def share(value: Any) -> str:
    """The worst error as a share of what it may be (1 is the limit), in fixed notation with two decimals:
    ``0.12 of allowed``, ``<0.01 of allowed`` (a share too small for two decimals, never ``0.00``, which reads as
    exact), ``3.40x allowed`` (fails), ``exact`` (0).
    """  # noqa: D205
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a" if value is None else str(value)
    if value == 0:
        return "exact"
    if math.isnan(value) or math.isinf(value):
        return f"{number(float(value))}x allowed"
    if value > 1:
        return f"{value:,.2f}x allowed"
    return "<0.01 of allowed" if value < 0.005 else f"{value:.2f} of allowed"


def io_rows(report: dict[str, Any]) -> list[list[str]]:
    """[kind, name, dtype, shape] for each model input and output the report records."""
    model = mapping(report, "model")
    rows = []
    for kind in ("inputs", "outputs"):
        for v in model.get(kind) or []:
            if isinstance(v, dict):
                shape = "[" + ", ".join(str(d) for d in v.get("shape") or []) + "]"
                rows.append([kind[:-1], str(v.get("name", "?")), str(v.get("dtype", "?")), shape])
    return rows


def trt_rows(report: dict[str, Any]) -> list[tuple[bool | None, list[str]]]:
    """(compatible, [version, verdict, first reason or note]) for each TensorRT version checked."""
    rows = []
    for version, result in (mapping(report, "model").get("trt_compat") or {}).items():
        if not isinstance(result, dict):
            continue
        ok = result.get("compatible")
        reasons = [r.get("reason", str(r)) if isinstance(r, dict) else str(r) for r in result.get("reasons") or []]
        notes = [str(n) for n in result.get("notes") or []]
        detail = reasons[0] + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else "") if reasons else ""
        detail = detail or "; ".join(notes)
        rows.append((ok, [str(version), "parses" if ok else "does not parse", detail]))
    return rows


def worst_location(worst: Any, max_abs: Any = None) -> str:
    """Where the worst element sits, in words; for a runtime that raised, the probe and the error.

    With ``max_abs`` 0 every element is exact and no place is "worst": the words say so instead of naming an
    arbitrary element (which would disagree with the error-by-position table).
    """
    if not isinstance(worst, dict) or not worst:
        return ""
    if max_abs == 0 and not worst.get("error"):
        return "nowhere: every element exact"
    probe = worst.get("probe")
    if worst.get("error"):
        return f"probe {probe}: {worst['error']}" if probe else str(worst["error"])
    parts = [f"probe {probe}"] if probe is not None else []
    parts += [f"{word} {worst[key]}" for key, word in PLACE_WORDS if worst.get(key) is not None]
    query, key = worst.get("query_position"), worst.get("key_position")
    if isinstance(query, int) and isinstance(key, int):
        parts.append(f"distance {query - key}")
    parts += [f"{k} {compact(v)}" for k, v in worst.items() if k not in _NOT_PLACES and v is not None]
    return ", ".join(parts)


def worst_values(worst: Any) -> str:
    """``actual 3.06041169, expected 3.06041197`` when the worst element has values."""
    if not isinstance(worst, dict) or ("actual" not in worst and "expected" not in worst):
        return ""
    return f"actual {exact(worst.get('actual'))}, expected {exact(worst.get('expected'))}"


def failing_items(report: dict[str, Any]) -> list[str]:
    """One sentence per thing that failed, most basic first: nothing ran, comparisons, tables, guards, properties."""
    out = []
    runtimes = items(report, "runtimes")
    if runtimes and not any(r.get("status") == "verified" for r in runtimes):
        skipped = "; ".join(f"{r.get('name', '?')}: {r.get('reason') or r.get('status', '?')}" for r in runtimes)
        out.append(f"No runtime verified the artifact ({skipped}).")
    # A runtime error stops every comparison of that call: one sentence per error, naming each comparison it stopped.
    raised: dict[str, list[str]] = {}
    sentences: list[tuple[str, str]] = []  # (kind, text): "raised" texts are keys of ``raised``
    for c in items(report, "comparisons"):
        if c.get("passed") is not False:
            continue
        worst = c.get("worst")
        worst = worst if isinstance(worst, dict) else {}
        if worst.get("error"):
            where = worst_location(worst)
            if where not in raised:
                raised[where] = []
                sentences.append(("raised", where))
            raised[where].append(comparison_label(c))
            continue
        sentence = (
            f"{comparison_label(c)}: {number(c.get('failures'))} of {number(c.get('elements'))} elements beyond "
            f"atol {number(c.get('atol'))} and rtol {number(c.get('rtol'))}; max abs error {error(c.get('max_abs'))}"
        )
        where = worst_location(worst)
        values = worst_values(worst)
        sentence += f" at {where}" if where else ""
        sentence += f" ({values})" if values else ""
        sentences.append(("error", sentence + "."))
    for kind, text in sentences:
        out.append(f"{', '.join(raised[text])}: the runtime raised on {text}." if kind == "raised" else text)
    for t in items(report, "tables"):
        if t.get("passed") is False:
            why = t.get("reason") or (
                f"shape {compact(t.get('shape'))} (expected {compact(t.get('expected_shape'))}), "
                f"max ulp {number(t.get('max_ulp'))}"
            )
            out.append(f"Table {t.get('name', '?')}: {why}.")
    for g in items(report, "guards"):
        if g.get("passed") is False:
            out.append(f"Guard {g.get('case', '?')} on {g.get('runtime', '?')}: {g.get('error') or 'no reason given'}.")
    for p in items(report, "properties"):
        if p.get("passed") is False:
            on = f" on {p['runtime']}" if p.get("runtime") else ""
            out.append(f"Property {p.get('name', '?')}{on}: {p.get('summary') or 'no summary given'}.")
    return out


def headline(report: dict[str, Any]) -> str:
    """What was checked, in one line: encoding, artifact, dtype, and how many of each check passed."""
    spec = mapping(report, "spec")
    encoding = report.get("encoding") or spec.get("encoding")
    artifact = report.get("artifact") or spec.get("artifact")
    parts = [f"{k} {v}" for k, v in (("encoding", encoding), ("artifact", artifact), ("dtype", spec.get("dtype")))]
    parts = [p for p, v in zip(parts, (encoding, artifact, spec.get("dtype")), strict=True) if v]
    for key, word in (("comparisons", "comparisons"), ("tables", "tables"), ("guards", "guards")):
        entries = items(report, key)
        if entries:
            passed = sum(e.get("passed") is True for e in entries)
            parts.append(f"{passed}/{len(entries)} {word} passed")
    props = items(report, "properties")
    if props:
        judged = [p for p in props if p.get("passed") is not None]
        passed = sum(p.get("passed") is True for p in judged)
        info = len(props) - len(judged)
        parts.append(f"{passed}/{len(judged)} properties passed" + (f" ({info} informational)" if info else ""))
    verified = [str(r.get("name", "?")) for r in items(report, "runtimes") if r.get("status") == "verified"]
    if verified:
        parts.append("verified on " + ", ".join(verified))
    layers = mapping(report, "layers")
    if layers.get("layers"):  # a model whose layers differ (``pipeline.with_layers``)
        kinds = ", ".join(str(k) for k in layers.get("layer_types") or [])
        used = f"used by layers {layers['layers']}" + (f" ({kinds})" if kinds else "")
        if layers.get("model_type"):
            used += f" of the {layers['model_type']} config"
        if layers.get("no_rope_layers"):
            used += f"; layers {layers['no_rope_layers']} have no positional encoding"
        parts.append(used)
    return "; ".join(parts)


def tolerance_words(tolerance: Any) -> str:
    """``fp32: atol 1e-05, rtol 1e-05``."""
    if not isinstance(tolerance, dict):
        return compact(tolerance)
    head = f"{tolerance['dtype']}: " if tolerance.get("dtype") else ""
    return f"{head}atol {number(tolerance.get('atol'))}, rtol {number(tolerance.get('rtol'))}"


def shared_tolerance(comparisons: list[dict[str, Any]]) -> tuple[Any, Any] | None:
    """(atol, rtol) when every comparison has the same; None when they differ (per-output overrides)."""
    pairs = {(c.get("atol"), c.get("rtol")) for c in comparisons}
    return pairs.pop() if len(pairs) == 1 else None


def tolerance_sentence(tolerance: tuple[Any, Any]) -> str:
    """The rule, with the numbers, for a table that leaves out its tolerance column."""
    atol, rtol = tolerance
    return (
        f"Every comparison: atol {number(atol)}, rtol {number(rtol)}; an element fails only when its error exceeds "
        'both atol and rtol × |expected|, so it may err by max(atol, rtol × |expected|). "of allowed" is the worst '
        "element's error as a share of that allowance: at most 1 passes."
    )


def probe_words(probe: dict[str, Any]) -> str:
    """``sweep[0..2047]`` (positions 0..2047, position_ids 1x2048)."""
    low, high = probe.get("min_position"), probe.get("max_position")
    detail = [f"positions {low}..{high}"] if low is not None or high is not None else []
    for key, value in probe.items():
        if key in ("name", "min_position", "max_position"):
            continue
        if key.endswith("_shape") and isinstance(value, list):
            detail.append(f"{key[: -len('_shape')]} {'x'.join(str(d) for d in value)}")
        else:
            detail.append(f"{key} {compact(value)}")
    name = str(probe.get("name", "?"))
    return f"{name} ({', '.join(detail)})" if detail else name


def position_summary(curve: dict[str, Any]) -> tuple[str, str]:
    """(worst bin in words, its max abs error) of one per-position curve; empty words when it has no number."""
    xs, ys = curve.get("x"), curve.get("max_abs")
    if not isinstance(xs, list) or not isinstance(ys, list):
        return "", "n/a"
    pairs = [(x, y) for x, y in zip(xs, ys, strict=False) if isinstance(y, (int, float)) and not isinstance(y, bool)]
    if not pairs:
        return "", "n/a"
    x, y = max(pairs, key=lambda pair: pair[1] if math.isfinite(pair[1]) else math.inf)
    if y == 0:
        return "none: every bin exact", error(0.0)
    ties = sum(1 for _, v in pairs if v == y)
    width = curve.get("bin_width")
    if isinstance(x, int) and isinstance(width, int) and width > 1:
        where = f"{x}..{x + width - 1}"
    else:
        where = f"{x:g}" if isinstance(x, float) else str(x)
    also = f" (first of {ties} bins at this error)" if ties > 1 else ""
    return f"{curve.get('axis') or 'position'} {where}{also}", error(float(y))


def floats(values: Any) -> list[float]:
    """Numbers from JSON: null, booleans and text that is no number become NaN; ``"inf"`` becomes infinity."""
    if not isinstance(values, (list, tuple)):
        return []
    out = []
    for value in values:
        if isinstance(value, bool) or value is None:
            out.append(math.nan)
            continue
        try:
            out.append(float(value))
        except (TypeError, ValueError):
            out.append(math.nan)
    return out
