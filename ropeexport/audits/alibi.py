"""ALiBi inside a foreign model: the bias added to the attention scores, evaluated and named.

Found by ``patterns.alibi_bias``: walking up from each Softmax through the Adds (and the casts, reshapes and Wheres)
that make its input, an operand computed from the attention mask or position_ids and constants only is a candidate
bias. Evaluated as the rotary sites are (``audit.observe``): one call of L tokens, mask all ones, positions
0 .. L - 1. A candidate whose values are only 0 and large negatives is a mask, not a position encoding, and is
dropped; one whose rows rise linearly with the key position, one slope per head, is an ALiBi site; anything else is
reported as an unidentified bias site.

Compared with the config's slopes (``families.alibi``: the paper's recipe for any head count, times slope_scale) in
float64: each head's slope read from its last row (the query at L - 1 sees every key), and every position's bias
against c_h + m_h x key position (a per-row constant cancels in the softmax, so BLOOM's m_h x j and the paper's
-m_h (i - j) are the same bias). Findings: ``alibi-slopes`` (naming the power-of-two formula used for a head count
that is not one, or slopes reversed, where the values say so) and ``values-off`` (right slopes, values off beyond the
dtype's rounding of m_h x distance). ``graft_slopes`` repairs a site whose slopes are one stored constant.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from ropeexport.audits.diagnose import LengthCheck, curve, finding
from ropeexport.audits.patterns.base import ancestors, name_of
from ropeexport.report.words import error

CAP = 4096  # the longest call evaluated: [1, heads, L, L] float32 at 4096 and 16 heads is 1 GiB
SLOPE_MATCH = {"float32": 2e-6, "float16": 2e-3, "bfloat16": 1.6e-2}  # relative, of a slope read from two values


def bias_rows(raw: np.ndarray, heads: int, length: int) -> np.ndarray | None:
    """[heads, length] float64: the bias the last query sees over keys 0 .. L - 1, or None if the shape has no
    [.., heads, .., L] reading (batch 1: [b x heads, 1, L], [b, heads, 1 or L, L], [heads, L] ...).
    """  # noqa: D205
    a = np.asarray(raw, np.float64)
    if a.size % (heads * length) or a.shape[-1] != length or a.size // (heads * length) not in (1, length):
        return None
    return a.reshape(heads, -1, length)[:, -1, :]


def is_mask(rows: np.ndarray) -> bool:
    """Only zeros and large negatives: an attention mask, not a position encoding."""
    return bool(np.all((rows == 0) | (rows <= -1e4) | ~np.isfinite(rows)))


def slopes_of(spec: Any) -> np.ndarray:
    """The config's slopes [heads], float64."""
    from ropeexport.families.alibi.reference import spec_slopes

    return spec_slopes(spec)


def compare_bias(spec: Any, rows: np.ndarray, length: int, dtype: str) -> LengthCheck:
    """The last query's bias [heads, L] of one call against the config's slopes (module doc)."""
    exact = slopes_of(spec)
    keys = np.arange(length, dtype=np.float64)
    finite = np.isfinite(rows) & (rows > -1e4)
    anchored = rows - rows[:, -1:]  # relative to the key at the query's own position: c_h cancels
    expected = exact[:, None] * (keys - (length - 1))[None, :]
    diff = np.where(finite, np.abs(anchored - expected), 0.0).max(axis=0)
    # each stored value is within half a unit of its dtype; the anchored difference of two, within one unit each
    stored = np.float16 if dtype == "float16" else np.float32
    largest = float(np.max(np.abs(np.where(finite, rows, 0.0)), initial=1.0))
    tol = 2.0 * float(np.spacing(stored(largest))) * (65536.0 if dtype == "bfloat16" else 1.0)
    position = int(np.argmax(diff))
    max_abs = float(diff[position])
    probe = LengthCheck(length, length, max_abs, length - 1 - position, max_abs <= tol, [], None, tol,
                  curve(diff[::-1]))  # fmt: skip
    if probe.exact or length < 2:
        return probe
    seen = (rows[:, -1] - rows[:, 0]) / (length - 1)
    linear = np.abs(anchored - seen[:, None] * (keys - (length - 1))[None, :])
    scale = float(np.max(np.abs(anchored[finite]), initial=1.0))
    if not np.all(np.where(finite, linear, 0.0) <= 1e-3 * scale):
        text = "a bias added to the attention scores that is not linear in the key position: not ALiBi as ropeexport "
        probe.findings.append(finding("unidentified-site", text + "knows it; not checked"))
        return probe
    match = SLOPE_MATCH.get(dtype, SLOPE_MATCH["float32"])
    wrong = np.abs(seen - exact) > match * exact
    if np.any(wrong):
        heads = len(exact)
        first = int(np.argmax(wrong))
        naive = np.array([2.0 ** (-8.0 * h / heads) for h in range(1, heads + 1)])
        why = ""
        if np.all(np.abs(seen - naive) <= match * naive):
            why = f" (the power-of-two formula 2^(-8h/{heads}) used for {heads} heads, which is not a power of two)"
        elif np.all(np.abs(seen - exact[::-1]) <= match * exact[::-1]):
            why = " (the slopes in reverse head order)"
        probe.findings.append(finding("alibi-slopes", f"ALiBi slopes wrong for {heads} heads: {int(wrong.sum())} "
                                       f"of {heads} differ, head {first} has {seen[first]:.6g} where "
                                       f"{exact[first]:.6g} is right{why}"))  # fmt: skip
        return probe
    probe.findings.append(finding("values-off", f"bias off by {error(max_abs)} at distance {probe.position} with the "
                                   "right slopes (beyond the dtype's rounding of slope x distance)"))  # fmt: skip
    return probe


def check_lengths(spec: Any) -> list[int]:
    """ALiBi has one regime: L = max_positions, capped at CAP (a [b, heads, L, L] bias is evaluated whole)."""
    return [int(min(spec.max_positions, CAP))]


def graft_slopes(graphs: list[ir.Graph], site: dict[str, Any], spec: Any) -> dict[str, Any]:
    """The one constant of ``heads`` values the site's bias is computed from (an initializer or a Constant node of
    any of ``graphs``, the main graph down to the site's own: the slopes, as BLOOM's exporters fold them) replaced by
    the config's exact slopes, its shape, dtype and sign kept.
    """  # noqa: D205
    from ropeexport.audits.sites import find_value
    from ropeexport.errors import SpecError

    heads = spec.num_heads
    inside = ancestors([find_value(graphs, site["cos"])])
    found: list[tuple[str, Any, Any]] = []
    for graph in graphs:
        for value in graph.initializers.values():
            if id(value) in inside and value.const_value is not None and value.const_value.size == heads:
                found.append((name_of(value), value.const_value, lambda t, v=value: setattr(v, "const_value", t)))
        for node in graph:
            held = node.attributes.get("value") if node.op_type == "Constant" else None
            tensor = None if held is None else held.value
            if tensor is not None and id(node.outputs[0]) in inside and tensor.size == heads:
                put = lambda t, n=node: n.attributes.__setitem__("value", ir.AttrTensor("value", t))  # noqa: E731
                found.append((name_of(node.outputs[0]), tensor, put))
    found = [f for f in found if np.issubdtype(f[1].numpy().dtype, np.floating)]
    if len(found) != 1:
        what = "none" if not found else ", ".join(repr(f[0]) for f in found)
        raise SpecError("model", f"the ALiBi bias {site['cos']!r} is computed from {what} of the constants with "
                        f"{heads} values graft could take for its slopes: it replaces exactly one")  # fmt: skip
    name, tensor, put = found[0]
    old = tensor.numpy()
    sign = -1.0 if np.all(old < 0) else 1.0  # some exporters store -m
    new = (sign * slopes_of(spec)).reshape(old.shape).astype(old.dtype)
    put(ir.tensor(new, name=tensor.name))
    return {"slopes": name, "heads": heads, "dtype": str(old.dtype), "rows": heads, "regime_length": None,
            "replaced_by": "the config's exact slopes", "cos": site["cos"], "sin": ""}  # fmt: skip
