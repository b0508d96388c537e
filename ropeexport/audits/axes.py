"""Multimodal RoPE's position axes (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL): what an audit feeds a model whose
``position_ids`` is [3, batch, seq], and which axis each frequency pair of a site really reads.

Feeds: a call of text positions gives the same row on all three axes (``rows``), as transformers' ``get_rope_index``
gives text; every one-axis reading of a site (its table, its frequencies, its precision) is then the one-axis
rotation's, compared as any site. Axes: the site's values are computed three more times, each with one axis
counting 0 .. L - 1 and the other two at 0 (``apart``); a pair whose values move with axis a, and with no other,
reads a. That is checked against the config's ``mrope_section`` and interleaving (``RopeSpec.pair_axes``) and named
as what it is (``axes_finding``): the sections in another order (``[24, 16, 24]`` for ``[16, 24, 24]``), interleaved
pairs read as contiguous blocks (a Qwen3-VL model exported as Qwen2-VL) or the reverse, one axis read by every pair
(image positions ignored). Text positions cannot show any of these: their effect is measured on image-grid
positions (``layout``: text, an image grid, text after it, to the far end of the context).

Notation: b batch, s sequence, L call length, r/2 frequency pairs.
"""  # noqa: D205

from __future__ import annotations

from itertools import permutations
from typing import Any

import numpy as np

from ropeexport.audits.causes import finding
from ropeexport.audits.patterns.base import Site, lookups

AXES = 3  # time, height, width
NAMES = ("time", "height", "width")
MIXED = -1  # a pair whose values move with more than one axis, or with none


def takes_axes(shape: Any) -> bool:
    """Whether a position input declared ``shape`` is M-RoPE's [3, batch, seq]."""
    dims = list(shape or [])
    return len(dims) == 3 and dims[0] == AXES


def rows(positions: np.ndarray, shape: Any) -> np.ndarray:
    """``positions`` [b, s] as a position input of ``shape`` takes them: the same row on every axis [3, b, s] for an
    M-RoPE input (a text call), else unchanged.
    """  # noqa: D205
    if not takes_axes(shape):
        return positions
    return np.ascontiguousarray(np.broadcast_to(positions, (AXES, *positions.shape)))


def apart(length: int, axis: int) -> np.ndarray:
    """position_ids int64 [3, 1, L]: axis ``axis`` counts 0 .. L - 1, the other two stay at 0."""
    out = np.zeros((AXES, 1, length), np.int64)
    out[axis, 0] = np.arange(length)
    return out


def layout(tokens: int, last: int) -> np.ndarray:
    """position_ids [3, tokens] of a prompt that ends at position ``last``: 4 text tokens, an image grid of 1 x 4 x 6
    merged patches (height and width apart from time), then text continuing from the grid (``families.rope.mrope``:
    the text after an image continues from its start + max(h, w)), its last token at ``last``. Too short a prompt for
    the grid is text only.
    """  # noqa: D205
    from ropeexport.families.rope.mrope import prompt_positions

    grid = (1, 4, 6)
    count = grid[1] * grid[2]
    delta = count - max(grid[1:])  # the tokens the grid takes beyond the positions it advances
    if tokens < 4 + count + 8 or last != tokens - 1 - delta:
        return prompt_positions([("text", tokens)], last - tokens + 1)
    return prompt_positions([("text", 4), ("image", grid), ("text", tokens - 4 - count)])


def call_positions(start: int, n: int) -> np.ndarray:
    """position_ids int64 [3, 1, n] of a proof's call of n tokens at positions ``start`` .. start + n - 1: a text
    token, an image grid of 1 x 2 x 3 merged patches, then text continuing from the grid to start + n - 1 (height and
    width apart from time, so that an axis read in another's place changes the logits; the grid's 6 tokens advance
    the positions by 3, so the call starts 3 later); a call of fewer than 8 tokens is text, one row on every axis.
    """  # noqa: D205
    from ropeexport.families.rope.mrope import prompt_positions

    if n < 8:
        return prompt_positions([("text", n)], start)[:, None]
    return prompt_positions([("text", 1), ("image", (1, 2, 3)), ("text", n - 7)], start + 3)[:, None]


def grid_delta() -> int:
    """The tokens ``layout``'s image grid takes beyond the positions it advances (its rope_deltas, negated)."""
    return 4 * 6 - 6


# What carries a site's values, or one axis's rows of them, to the value a rotation multiplies by: the picks of
# each pair's axis (ropeexport's Where per axis; transformers' split by mrope_section, select, concatenate) and the
# reshapes around them
PICKS = {"Where", "Identity", "Cast", "Split", "Gather", "Slice", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Expand",
         "Transpose", "ScatterND", "ScatterElements"}  # fmt: skip
DATA = {"Gather": (0,), "Slice": (0,), "Where": (1, 2), "ScatterND": (0, 2), "ScatterElements": (0, 2)}  # the
# inputs values are carried through (the others: indices, bounds, a mask)
ROTATES = {"Mul", "RotaryEmbedding", "GroupQueryAttention"}  # what reads a multiplier (or a fused op's cos/sin)


def _multipliers(start: Any) -> list[Any]:
    """The values rotations read that ``start`` is carried to through ``PICKS`` (``start`` itself where a rotation
    reads it), by name: one per rotated tensor where the query's and the key's are reshaped apart.
    """  # noqa: D205
    seen, frontier, found = {id(start)}, [start], {}
    while frontier:
        value = frontier.pop()
        uses = list(value.uses())
        if any(u.node.op_type in ROTATES for u in uses):
            found[id(value)] = value
            continue
        for use in uses:
            if use.node.op_type not in PICKS or use.idx not in DATA.get(use.node.op_type, (use.idx,)):
                continue
            for out in use.node.outputs:
                if id(out) not in seen:
                    seen.add(id(out))
                    frontier.append(out)
    return sorted(found.values(), key=lambda v: v.name or "")


def picked(site: Site) -> list[Site]:
    """The per-token values the rotations of ``site`` multiply by, each as a site of its own, where the site's values
    reach them through picks of each pair's axis (``PICKS``): a table whose rows one axis gathers (``site.positions``;
    ropeexport's decomposed form: a ``Where`` per axis over the three gathers, the query's and the key's reshaped
    apart), or cos/sin computed per axis [3, b, s, w] and recomposed by mrope_section (transformers' Qwen2-VL, as
    torch.onnx exports it; Qwen3-VL's interleave, scattered after the Cos its optimizer moved ahead). Empty where
    none is found; the site itself where its rotations read its values.
    """  # noqa: D205
    found = []
    for value in site.values[:2]:
        if value is None:
            return []
        start = value
        if site.table:  # the rows one axis gathers
            gathers = [g for g in lookups(value) if g.inputs[1] is not None and g.inputs[1].name == site.positions]
            if len(gathers) != 1:
                return []
            start = gathers[0].outputs[0]
        found.append([v.name for v in _multipliers(start) if v.name])
    cos, sin = found
    if not cos or len(cos) != len(sin):
        return []
    if [cos, sin] == [[site.cos], [site.sin]]:
        return [site]
    pairs = zip(cos, sin, strict=True)
    return [Site(site.kind, c, s, table=False, scope=site.scope, where=site.where) for c, s in pairs]


def read_axes(values_of: Any) -> tuple[int, ...]:
    """Each pair's axis (``MIXED`` where none or several move it), from ``values_of(axis)``: the site's values
    [L, .., r/2] (cos and sin, say) in a call of ``apart(length, axis)``.
    """  # noqa: D205
    moved = []
    for axis in range(AXES):
        values = np.asarray(values_of(axis), np.float64)
        change = np.any(values != values[:1], axis=0)  # [.., r/2]: the pair's values change along this axis
        moved.append(change.reshape(-1, change.shape[-1]).any(axis=0))
    found = np.stack(moved)  # [3, r/2]
    return tuple(int(np.argmax(col)) if col.sum() == 1 else MIXED for col in found.T)


def _chunked(section: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(a for a, n in enumerate(section) for _ in range(n))


def _interleaved(section: tuple[int, ...], half: int) -> tuple[int, ...]:
    return tuple(j % 3 if j % 3 and j < 3 * section[j % 3] else 0 for j in range(half))


def axes_finding(read: tuple[int, ...], spec: Any) -> dict[str, str] | None:
    """The ``mrope-axes`` finding of pairs that read other axes than ``spec`` says (module doc), in what the
    difference is; None when every pair reads its own axis.
    """  # noqa: D205
    want = spec.pair_axes()
    if tuple(read) == tuple(want):
        return None
    section, interleaved = tuple(spec.mrope_section), bool(spec.mrope_interleaved)
    form = "interleaved" if interleaved else "contiguous blocks"
    config = f"config: mrope_section {list(section)}, {form}"
    half = len(want)
    if set(read) == {0}:
        return finding("mrope-one-axis", f"every frequency pair turns by the time axis alone: height and width "
                       f"positions (image grids) ignored, as if positions were 1-D ({config})")  # fmt: skip
    if MIXED in read:
        pairs = [j for j, a in enumerate(read) if a == MIXED]
        return finding("mrope-axes", f"frequency pairs {pairs[:6]}{'...' if len(pairs) > 6 else ''} turn by no "
                       f"single position axis ({config})")  # fmt: skip
    for order in permutations(section):
        if order == section:
            continue
        if read == (_interleaved(order, half) if interleaved else _chunked(order)):
            return finding("mrope-sections-swapped", f"pairs split by mrope_section {list(order)} where the config "
                           f"says {list(section)} ({form}): axes read in another order")  # fmt: skip
    if interleaved and read == _chunked(section):
        return finding("mrope-interleaving", f"pairs read as contiguous mrope_section blocks {list(section)} "
                       f"(Qwen2-VL's) where the config interleaves them by frequency index (Qwen3-VL's "
                       f"mrope_interleaved)")  # fmt: skip
    if not interleaved and read == _interleaved(section, half):
        return finding("mrope-interleaving", f"pairs interleaved by frequency index (Qwen3-VL's) where the config "
                       f"reads contiguous mrope_section blocks {list(section)} (Qwen2-VL's)")  # fmt: skip
    counts = [read.count(a) for a in range(AXES)]
    wrong = [j for j, (a, b) in enumerate(zip(read, want, strict=True)) if a != b]
    return finding("mrope-axes", f"pairs {wrong[:6]}{'...' if len(wrong) > 6 else ''} read other axes than the "
                   f"config's: {counts} pairs per axis (time, height, width); {config}")  # fmt: skip



def operator_axes(site: Site, length: int = 16) -> list[list[int]]:
    """Each pair's axis as each reader of ``site`` turns it, one reading per reader (``read_axes``), for an operator
    that picks each pair's axis itself (com.microsoft ``MRotaryEmbedding``: its ``mrope_section`` and ``mrope_layout``
    attributes): each reader run alone (``_reader_axes``). What the operator does is read, not what its attributes
    say.
    """  # noqa: D205
    table = site.values[0] if site.values else None
    last = table.shape[-1] if table is not None and table.shape is not None else None
    width = last if isinstance(last, int) else 0
    read = [_reader_axes(reader, width, length) for reader in site.readers] if width else []
    return [r for r in read if r is not None]


def _reader_axes(reader: Any, width: int, length: int) -> list[int] | None:
    """The axis of each of ``reader``'s ``width`` pairs: the node run alone in ONNX Runtime with its own attributes on
    tables whose every pair moves (cos/sin of p x 0.1 (j + 1): a zero-frequency pair of the model's own tables reads
    too), a probe x [1, L, n_h * h_d] of 1 on the first channel of each pair and 0 elsewhere (each output pair is then
    (cos, sin) of the angle its axis gives), and ``apart(length, axis)`` positions; None where its head is not told.
    """  # noqa: D205
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from ropeexport.audits.model import quiet

    attrs = {k: a.value for k, a in reader.attributes.items()}
    heads, rotary, interleaved = int(attrs.get("num_heads", 1)), int(attrs.get("rotary_embedding_dim", 0)), bool(
        attrs.get("interleaved", 0))  # fmt: skip
    dims = list(reader.inputs[0].shape) if reader.inputs[0] is not None and reader.inputs[0].shape else []
    hidden = dims[-1] if dims and isinstance(dims[-1], int) else heads * (rotary or 2 * width)
    if not heads or hidden % heads:
        return None
    head = hidden // heads
    node = helper.make_node(reader.op_type, ["x", "position_ids", "cos", "sin"], ["y"], domain=reader.domain, **attrs)
    graph = helper.make_graph([node], "reader", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, length, hidden]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT64, [AXES, 1, length]),
        helper.make_tensor_value_info("cos", TensorProto.FLOAT, [length, width]),
        helper.make_tensor_value_info("sin", TensorProto.FLOAT, [length, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])  # fmt: skip
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(reader.domain or "", 1)]
    options, run = quiet(1)
    proto = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    angles = np.outer(np.arange(length), 0.1 * np.arange(1, width + 1))  # [L, w]
    probe = np.zeros((1, length, heads, head), np.float32)
    probe[..., np.arange(width) * 2 if interleaved else np.arange(width)] = 1.0  # each pair's first channel
    feeds = {"x": probe.reshape(1, length, hidden), "cos": np.cos(angles).astype(np.float32),
             "sin": np.sin(angles).astype(np.float32)}  # fmt: skip

    def values(axis: int) -> np.ndarray:
        y = np.asarray(session.run(None, {**feeds, "position_ids": apart(length, axis)}, run)[0])
        y = y.reshape(length, heads, head)[..., : 2 * width]
        if interleaved:  # [L, n, w, 2] -> [L, n, 2, w]
            return y.reshape(length, heads, width, 2).swapaxes(-1, -2)
        return y.reshape(length, heads, 2, width)

    return list(read_axes(values))
