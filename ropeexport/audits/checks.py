"""One site checked: the record audit.json holds for it, with its call lengths compared and what stopped a check.

A rotary site is evaluated (``observe``) and compared (``diagnose``) at each of the schedule's call lengths; an ALiBi
candidate is evaluated at its one length and dropped when it is a mask (``alibi``). Three findings say why a site was
not checked as asked, and each makes the verdict ``findings``:
- ``not-evaluated``: the values cannot be computed apart from the model: they change with a Loop's iteration
  (``Site.blocked``), or ONNX Runtime refuses the graph computing them (its words quoted);
- ``call-refused``: the model refuses a call of L tokens (a position guard, a table too short: ORT's words): the
  site is checked at the longest call it takes instead, found by bisection;
- ``cannot-run``: ONNX Runtime refuses to run a reader of the site with its tables (``Pattern.check_reader``: a
  GroupQueryAttention whose caches are not a multiple of 8 wide): the model does not run at all.
A fused reader that pairs the rotated channels otherwise than the config (interleaved pairs for rotate_half's halves,
or the reverse) is ``pairing``: its tables are right, its attribute is not (graft sets it). A proportional config's
share read as a partial rotary width (a narrower table whose values are theta^(-2i/(p*r)): no zero-frequency tail) is
``proportional-without-zero-tail``, not a model the config fails to describe (graft cannot widen a rotation).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ropeexport.audits.axes import axes_finding, operator_axes, picked, read_axes, takes_axes
from ropeexport.audits.diagnose import compare, finding
from ropeexport.audits.layers import Encodings, describe, layer_finding
from ropeexport.audits.observe import CallRefused, Evaluator, NotEvaluated
from ropeexport.audits.patterns import Site, SiteKind, pattern_of
from ropeexport.audits.patterns.base import attr
from ropeexport.errors import SpecError
from ropeexport.families.rope.regimes import check_lengths

STRUCTURAL = ("not-evaluated", "call-refused", "cannot-run")  # findings about the model, not its schedule
READER_TOKENS = 8  # the call a reader is run on alone


def dtype_of(site: dict[str, Any]) -> str:
    """The dtype a site's tables are stored in, or why none was read (a site not evaluated has none: not ``None``)."""
    return str(site["dtype"]) if site.get("dtype") else "dtype not read (not evaluated)"


def new_record(site: Site) -> dict[str, Any]:
    """A site's record before it is checked: ``Site.to_dict`` and the audit's own fields."""
    return site.to_dict() | {"probes": [], "findings": [], "exact": False, "dtype": None}


def _inside(site: Site) -> str:
    return f" inside the {site.where}" if site.where else ""


def _not_evaluated(site: Site, why: str) -> dict[str, str]:
    what = f"the {site.kind.value} site{_inside(site)}"
    return finding("not-evaluated", f"{what} cannot be evaluated apart from the model: {why}: not checked")


def _refused(refused: CallRefused, longest: int | None) -> dict[str, str]:
    where = (f"the longest call it takes is {longest} tokens, where it was checked" if longest is not None
             else "it takes no call at all (1 token neither): not checked")  # fmt: skip
    text = f"the model refuses a call of {refused.length} tokens (ONNX Runtime: {refused.reason}); {where}"
    return finding("call-refused", text)


def _each_length(
    site: Site, lengths: list[int], run: Callable[[int], Any], evaluator: Evaluator, record: dict[str, Any]
) -> Iterator[tuple[int, Any]]:
    """(L, ``run(L)``) for each of ``lengths`` until the model refuses one; then (the longest call it takes below that,
    its result), the refusal recorded.
    """  # noqa: D205
    done: list[int] = []
    for length in lengths:
        try:
            result = run(length)
        except CallRefused as refused:
            longest = evaluator.longest(site, length)
            record["findings"].append(_refused(refused, longest))
            if longest is not None and longest not in done:
                yield longest, run(longest)
            return
        done.append(length)
        yield length, result


def summary(probes: list[dict[str, Any]]) -> list[dict[str, str]]:
    """A site's findings: each name once, in the words of the probe where it weighs most (its largest error)."""
    best: dict[str, tuple[float, dict[str, str]]] = {}
    for probe in probes:
        for found in probe["findings"]:
            held = best.get(found["name"])
            if held is None or probe["max_abs"] > held[0]:
                best[found["name"]] = (probe["max_abs"], found)
    return [found for _, found in best.values()]


def _close(record: dict[str, Any]) -> dict[str, Any]:
    """The record's verdict: exact when every probe is and nothing stopped a check; findings: the stops, then the
    probes' findings (``summary``).
    """  # noqa: D205
    stops = record["findings"]
    record["exact"] = bool(record["probes"]) and all(p["exact"] for p in record["probes"]) and not stops
    record["findings"] = stops + summary(record["probes"])
    return record


def check_rope_site(site: Site, spec: Any, evaluator: Evaluator, label: str = "", layers: tuple[int, ...] = (),
                    others: tuple[tuple[str, Any], ...] = ()) -> dict[str, Any]:  # fmt: skip
    """A rotary site's record (module doc): per call length the comparison with ``spec``'s schedule (the encoding of
    the site's ``layers``, labelled ``label``; ``others``: the model's other encodings, which ``causes`` may name).
    """  # noqa: D205
    record = new_record(site)
    if site.kind is SiteKind.UNIDENTIFIED:
        op = "Cos" if site.cos else "Sin"
        text = f"a {op}{_inside(site)} that is not a rotation ropeexport recognises: not checked"
        record["findings"].append(finding("unidentified-site", text))
        return record
    if site.blocked:
        record["findings"].append(_not_evaluated(site, f"its values are computed from the {site.blocked}"))
        return record
    width = spec.rotary_dim // 2
    try:
        evaluate = lambda n: evaluator.evaluate(site, n, width)  # noqa: E731
        for length, (cos, sin, dtype) in _each_length(site, check_lengths(spec), evaluate, evaluator, record):
            if cos.shape[-1] != width and _partial(spec, cos.shape[-1]) is not None:
                record["findings"].append(_partial(spec, cos.shape[-1]))
                return _close(record)
            narrowed = _without_zero_tail(spec, np.asarray(cos, np.float64), np.asarray(sin, np.float64), length,
                                          label, layers)  # fmt: skip
            if cos.shape[-1] != width and narrowed is not None:
                record["dtype"] = dtype
                record["findings"].append(narrowed)
                return _close(record)
            if cos.shape[-1] != width:
                raise SpecError("hf_config", f"describes rotary_dim {spec.rotary_dim} (tables {width} wide) but the "
                                f"model's cos/sin at {site.cos!r} are {cos.shape[-1]} wide: the config does not "
                                "describe this model (head_dim, partial_rotary_factor)")  # fmt: skip
            record["dtype"] = dtype
            record["probes"].append(compare(spec, cos, sin, length, dtype, label, layers, others).to_dict())
        refusal = _reader_refusal(site, spec, evaluator)
        if getattr(spec, "mrope_section", ()):  # M-RoPE: the axis each pair turns by (``audits.axes``)
            read = mrope_axes(site, spec, evaluator)
            record["pair_axes"] = read
            if read == ONE_AXIS_INPUT:
                record["findings"].append(finding("mrope-positions-1d", "computed from position_ids [batch, seq], one "
                                                  "axis, where the config's M-RoPE reads [3, batch, seq] (time, "
                                                  "height, width): image positions cannot be fed, every pair turns "
                                                  "by the one position"))  # fmt: skip
            elif read is not None and axes_finding(tuple(read), spec) is not None:
                record["findings"].append(axes_finding(tuple(read), spec))
        pairs = pairing(site, spec)
        if pairs is not None:
            record["findings"].append(pairs)
    except NotEvaluated as exc:
        record["findings"].append(_not_evaluated(site, f"ONNX Runtime refuses the graph computing them ({exc})"))
        return _close(record)
    if refusal is not None:
        record["findings"].append(refusal)
    return _close(record)


# Fused readers say how they pair the channels they rotate: their attribute names
PAIRING = {SiteKind.ROTARY_MICROSOFT: "interleaved", SiteKind.ROTARY_ONNX: "interleaved",
           SiteKind.MROTARY_MICROSOFT: "interleaved",
           SiteKind.GROUP_QUERY_ATTENTION: "rotary_interleaved"}  # fmt: skip
_PAIRS = {False: "halves (i, i + r/2: rotate_half)", True: "interleaved pairs (2i, 2i + 1)"}


def pairing(site: Site, spec: Any) -> dict[str, str] | None:
    """The ``pairing`` finding of a fused reader that pairs the rotated channels otherwise than the config: halves
    (rotate_half, transformers' Llama and most models) against interleaved pairs (GPT-J, the complex form). The
    tables are the same either way; only the reader's attribute tells (``site.interleaved``), or for a decomposed
    rotation its graph's slicing, read by running it (``audits.rotations``).
    """  # noqa: D205
    attribute = PAIRING.get(site.kind)
    read = attribute is None and bool(site.rotations)  # a decomposed rotation's pairing, read by running it
    if (attribute is None and not read) or site.interleaved is None or spec.layout not in ("half", "interleaved"):
        return None
    want = spec.layout == "interleaved"
    if read:
        if site.interleaved == want:
            return None
        return finding("pairing", f"channels paired as {_PAIRS[site.interleaved]} (read from its rotations) where the "
                       f"config pairs {_PAIRS[want]}")  # fmt: skip
    assert attribute is not None  # a fused reader's attribute (``read`` is the decomposed rotations')
    # each reader says its own pairing: readers of one table that disagree (an optimizer's fusion that dropped the
    # attribute, beside a reader that kept it) are judged by the ones that pair otherwise than the config
    said = [(r.name or r.op_type, bool(attr(r, attribute))) for r in site.readers] or [("", bool(site.interleaved))]
    wrong = [name for name, interleaved in said if interleaved != want]
    if not wrong:
        return None
    named = ", ".join(repr(n) for n in wrong[:3]) + (" .." if len(wrong) > 3 else "")
    some = "" if len(wrong) == len(said) else f" in {len(wrong)} of its {len(said)} readers ({named})"
    return finding("pairing", f"channels paired as {_PAIRS[not want]} ({attribute}={int(not want)}){some} where the "
                   f"config pairs {_PAIRS[want]}")  # fmt: skip


def _partial(spec: Any, seen: int) -> dict[str, str] | None:
    """The finding of a rotated width that is the whole head where the config rotates part of it: ``seen`` is the
    values' width (half the rotated channels, or all of them where a computed site duplicates its halves). A narrower
    width than the config's is no finding: the config does not describe the model (its head_dim).
    """  # noqa: D205
    head = spec.head_dim
    if spec.rotary_dim < head and seen in (head // 2, head):
        return finding("partial-rotary-ignored", f"partial rotary {spec.rotary_dim / head:g} but all {head} channels "
                       f"rotated (config: {spec.rotary_dim} of {head})")  # fmt: skip
    return None


def _without_zero_tail(spec: Any, cos: np.ndarray, sin: np.ndarray, length: int, label: str = "",
                       layers: tuple[int, ...] = ()) -> dict[str, Any] | None:  # fmt: skip
    """The finding of a proportional config's share read as a partial rotary width (Megatron-Bridge #4195): p x r
    channels rotated in pairs (i, i + p*r/2) at theta^(-2i/(p*r)), where the config rotates all r channels in pairs
    (i, i + r/2), its p*r/2 real frequencies theta^(-2i/r) followed by zero-frequency pairs. ``cos``/``sin``: the
    site's rows [length, w] as read, w narrower than the config's r/2. Checked on the values, not the width alone.
    """  # noqa: D205
    from dataclasses import replace

    from ropeexport.families.rope.regimes import frequencies

    if spec.scaling != "proportional":
        return None
    share = float(spec.scaling_params.get("partial_rotary_factor", 1.0))
    narrow = int(round(spec.rotary_dim * share))
    if narrow < 2 or narrow % 2 or cos.shape[-1] != narrow // 2:
        return None
    factor = max(1.0, float(spec.scaling_params.get("factor", 1.0)))
    read = replace(spec, rotary_dim=narrow, scaling="linear", scaling_params={"factor": factor})
    inv = frequencies(read, length)[0]
    angles = np.arange(cos.shape[0], dtype=np.float64)[:, None] * inv[None, :]  # [rows, p*r/2]
    if max(np.abs(np.cos(angles) - cos).max(), np.abs(np.sin(angles) - sin).max()) > 1e-5:
        return None  # another narrow table: the config does not describe it (said by the caller)
    r, half = spec.rotary_dim, narrow // 2
    template = (f"{{who}} read{{s}} proportional RoPE as partial rotary {share:g}: {narrow} of {r} channels rotated "
                f"in pairs (i, i + {half}) at theta^(-2i/{narrow}), where the config rotates all {r} in pairs (i, i + "
                f"{r // 2}): {half} real frequencies theta^(-2i/{r}), then {r // 2 - half} zero-frequency pairs (the "
                "zero tail dropped)")  # fmt: skip
    return layer_finding("proportional-without-zero-tail", template, label, layers)


ONE_AXIS_INPUT: list[int] = []  # what ``mrope_axes`` says of a site computed from no [3, batch, seq] input


def mrope_axes(site: Site, spec: Any, evaluator: Evaluator) -> list[int] | None:
    """The axis each frequency pair of ``site`` turns by (``axes.read_axes``; ``axes.MIXED`` where none or several);
    ``ONE_AXIS_INPUT`` where the site is computed from no [3, batch, seq] position input. A table whose rows one axis
    gathers, or values computed per axis, are read where each pair has picked its axis (``axes.picked``: the values
    the rotations multiply by); a table picked nowhere the audit follows is None.
    """  # noqa: D205
    length = min(int(spec.max_positions), 16)  # sin moves every pair from position 1 on, in any dtype
    if site.kind is SiteKind.MROTARY_MICROSOFT:  # the operator picks each pair's axis itself: run it alone
        read = operator_axes(site, length)
        return next((r for r in read if r != list(spec.pair_axes())), read[0]) if read else None
    session = evaluator._session(site)  # noqa: SLF001 - the cut-out's own inputs: does it take three axes?
    if not any("position" in i.name and takes_axes(i.shape) for i in session.get_inputs()):
        return ONE_AXIS_INPUT
    after = picked(site)  # the values the rotations multiply by, each pair picked from its axis on the way there
    if not after and site.table:
        return None
    read = [_pair_axes(one, spec, evaluator, length) for one in after or [site]]
    return next((r for r in read if r != list(spec.pair_axes())), read[0])


def _pair_axes(site: Site, spec: Any, evaluator: Evaluator, length: int) -> list[int]:
    """The axis each pair of a per-token ``site`` turns by (``mrope_axes``)."""
    width = spec.rotary_dim // 2

    def values(axis: int) -> np.ndarray:
        cos, sin, _ = evaluator.evaluate(site, length, width, axis)
        return np.stack([cos, sin], axis=1)  # [L, 2, r/2]

    return list(read_axes(values))


def check_site(site: Site, encodings: Encodings, evaluator: Evaluator) -> dict[str, Any]:
    """A rotary site checked against the encodings of the layers that read it (``audits.layers``).

    Its layers share one encoding: checked against it (the other encodings named where the site holds one of
    theirs). Its layers need different encodings: checked against each, with a ``shared-table`` finding naming the
    groups and the one it matches. Layers with no RoPE reading it: ``nope-rotated``. Its readers name no layer and
    the model has several encodings: checked against each and reported as the one it matches (``checked_as``), or
    as none (``layers-unknown``), compared with the closest.
    """
    groups = encodings.groups
    if site.kind is SiteKind.UNIDENTIFIED or site.blocked or len(groups) == 1 and not encodings.unrotated:
        return check_rope_site(site, encodings.first, evaluator) | {"checked_as": [groups[0].label]}
    if site.layers is None:
        return _untold(site, encodings, evaluator)
    needs = {layer: encodings.of(layer) for layer in site.layers}
    nope = [layer for layer, group in needs.items() if group is None]
    used = [g for g in groups if any(g is n for n in needs.values())]
    if not used:
        record = new_record(site)
    else:
        tried = []
        for group in used:
            mine = tuple(layer for layer, g in needs.items() if g is group)
            others = tuple((g.label, g.spec) for g in groups if g is not group)
            tried.append((group, mine, check_rope_site(site, group.spec, evaluator, group.label, mine, others)))
        wrong = [t for t in tried if not t[2]["exact"]]
        record = (wrong or tried)[0][2]
        if len(tried) > 1:
            told = "; ".join(f"{g.words(mine)}: {describe(g.spec)}" for g, mine, _ in tried)
            matched = [g.label for g, _, r in tried if r["exact"]]
            which = f"it matches the {' and '.join(matched)} layers'" if matched else "it matches neither"
            record["findings"].insert(0, finding("shared-table", f"one table read by layers the config gives "
                                                 f"different encodings ({told}): {which}"))  # fmt: skip
            record["exact"] = False
    record["checked_as"] = [g.label for g in used]
    if nope and not used and _identity(site, evaluator):  # what graft writes for layers without RoPE
        record["exact"] = True
        record["note"] = "an identity rotation (cos 1, sin 0): its layers have no RoPE in the config, as they should"
        return record
    if nope:
        record["findings"].append(layer_finding("nope-rotated", "{who} {has} no RoPE in the config but {are} rotated",
                                                "", nope))  # fmt: skip
        record["exact"] = False
    return record


def _identity(site: Site, evaluator: Evaluator) -> bool:
    """The site's values rotate nothing: cos 1 and sin 0 on a short call."""
    try:
        cos, sin = (np.asarray(v, np.float64) for v in evaluator.raw(site, READER_TOKENS)[:2])
    except (CallRefused, NotEvaluated):
        return False
    return bool(np.all(cos == 1.0) and np.all(sin == 0.0))


def _untold(site: Site, encodings: Encodings, evaluator: Evaluator) -> dict[str, Any]:
    """A site whose readers name no layer, checked against each encoding (``check_site``)."""
    tried = [(g, check_rope_site(site, g.spec, evaluator, g.label)) for g in encodings.groups]
    match = next(((g, r) for g, r in tried if r["exact"]), None)
    if match is not None:
        group, record = match
        record["note"] = (f"its readers name no layer: it matches the {group.words()}' encoding "
                          f"({describe(group.spec)})")  # fmt: skip
    else:
        group, record = min(tried, key=lambda t: max((p["max_abs"] for p in t[1]["probes"]), default=float("inf")))
        told = "; ".join(f"{g.words()}: {describe(g.spec)}" for g in encodings.groups)
        record["findings"].insert(0, finding("layers-unknown", f"its readers name no layer and it matches none of "
                                             f"the encodings ({told}); compared with {group.words()}'s"))
    record["checked_as"] = [group.label]
    return record


def _reader_refusal(site: Site, spec: Any, evaluator: Evaluator) -> dict[str, str] | None:
    """The ``cannot-run`` finding of the first reader ONNX Runtime refuses to run with the site's tables, or None."""
    check = pattern_of(site.kind).check_reader
    if check is None or not site.readers:
        return None
    try:
        cos, sin = evaluator.raw(site, READER_TOKENS)[:2]
    except CallRefused:
        return None  # said already: the model refuses the call
    tried: set[tuple[Any, ...]] = set()
    for node in site.readers:
        shape = (tuple((k, str(a.value)) for k, a in sorted(node.attributes.items())),
                 tuple(v is None for v in node.inputs))  # fmt: skip
        if shape in tried:
            continue  # one layer of a model stands for every layer built the same way
        tried.add(shape)
        reason = check(node, np.asarray(cos), np.asarray(sin), spec)
        if reason is not None:
            text = (f"ONNX Runtime refuses to run {node.op_type} {node.name!r} with these tables ({reason}): the "
                    "model cannot run in ONNX Runtime")  # fmt: skip
            return finding("cannot-run", text)
    return None


def check_bias_site(site: Site, spec: Any, evaluator: Evaluator) -> dict[str, Any] | None:
    """An ALiBi candidate's record, or None when its values are only an attention mask (``alibi``)."""
    from ropeexport.audits.alibi import bias_rows, check_lengths, compare_bias, is_mask

    record = new_record(site)
    if site.blocked:
        record["findings"].append(_not_evaluated(site, f"its values are computed from the {site.blocked}"))
        return record
    try:
        raw_of = lambda n: evaluator.raw(site, n)[0]  # noqa: E731
        for length, raw in _each_length(site, check_lengths(spec), raw_of, evaluator, record):
            if is_mask(np.asarray(raw, np.float64)):
                return None  # an attention mask (only zeros and large negatives), not a position encoding
            rows = bias_rows(raw, spec.num_heads, length)
            if rows is None:
                raise SpecError("hf_config", f"describes {spec.num_heads} heads but the bias {site.cos!r} added to "
                                f"the attention scores has shape {list(raw.shape)} in a call of {length} tokens (no "
                                "axis of that many heads beside the keys): the config does not describe this model "
                                "(num_attention_heads)")  # fmt: skip
            record["dtype"] = str(raw.dtype)
            record["probes"].append(compare_bias(spec, rows, length, str(raw.dtype)).to_dict())
    except NotEvaluated as exc:
        record["findings"].append(_not_evaluated(site, f"ONNX Runtime refuses the graph computing them ({exc})"))
    return _close(record)
