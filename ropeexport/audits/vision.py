"""The audit of a 2-D vision RoPE model (``vision_rope``: Pixtral's axial RoPE, Qwen2.5-VL's ViT rotary): a model
that takes ``position_ids`` [2, batch, seq] (each patch's height, then width) and rotates float inputs [b, n_h, s, d]
(query, key) into outputs of the same shape, as ropeexport's ``vision_rope`` artifact or a torch.onnx export of
transformers' vision rotary applied to q and k.

Read by running the model, not by its nodes' names:

- **Each pair's axis.** A probe x of 1 on channel j and 0 on channel j + d/2 (rotate-half's pairs) comes back as (cos,
  sin) of pair j's angle. Fed ``apart``-style positions (one axis counting 0 .. L - 1, the other at 0), a pair whose
  values move with axis a alone reads a (0 height, 1 width); compared with ``VisionRopeSpec.pair_axes``.
- **Each pair's frequency.** The angle at position 1 of its axis, atan2(sin, cos), against the float64 oracle's
  (``families.vision_rope.oracle.pair_frequencies``).
- **Every patch.** Seeded random inputs at every (height, width) of the max_positions x max_positions grid (a grid of
  more than ``GRID`` patches: each axis whole with the other at 0 and at its last row, then seeded random patches),
  the outputs against the float64 oracle: max |y - y64| over max |y64| per output, where worst; exact within the
  stored dtype's rounding (``TOLERANCE``).

Named as what it is: height and width swapped (``vision-axes-swapped``), Pixtral's even/odd frequency split read as
halves (``vision-frequency-split``: height takes the first d/4 frequencies theta^(-2i/d), width the next), Qwen's
shared set read as Pixtral's split or the reverse (``vision-frequencies``), other axes (``vision-axes``), values off
with axes and frequencies right (``vision-values``). The effect of each is the model's outputs against the float64
rotation over the grid, as users feed it: nothing else runs after a rotation artifact. graft does not write vision
RoPE (no decoder around it to prove): re-export.

Notation: b batch, n_h heads, s patches, d head_dim, P max_positions (patches a side).
"""  # noqa: D205

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.audits.causes import finding
from ropeexport.errors import SpecError

GRID = 4096  # patches fed at once at most (P x P of them where that fits)
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # relative to the output scale: a few units of
# the stored dtype's rounding of cos, sin and the products (the artifact's own verification bound is per dtype too)


def _io(session: Any) -> tuple[str, list[tuple[str, str]], Any]:
    """(the position input, [(rotated input, its output)], its float dtype) of a vision rotation model, or a
    SpecError naming what it lacks.
    """  # noqa: D205
    inputs = session.get_inputs()
    positions = [i for i in inputs if "int" in i.type and len(i.shape) == 3 and i.shape[0] == 2]
    floats = [i for i in inputs if "float" in i.type and len(i.shape) == 4]
    outputs = [o for o in session.get_outputs() if "float" in o.type and len(o.shape) == 4]
    if len(positions) != 1 or not floats or len(floats) != len(outputs):
        raise SpecError("model", "a vision_rope audit reads a model of position_ids [2, batch, seq] (height, width) "
                        "and float inputs [batch, heads, seq, head_dim] rotated into outputs of the same shape "
                        f"(ropeexport's vision_rope artifact); this one takes {[i.name for i in inputs]}")  # fmt: skip
    dtype = {"tensor(float)": np.float32, "tensor(float16)": np.float16}.get(floats[0].type, np.float32)
    return positions[0].name, [(f.name, o.name) for f, o in zip(floats, outputs, strict=True)], dtype


def _run(session: Any, positions: str, pairs: list[tuple[str, str]], dtype: Any, spec: Any, x: np.ndarray,
         pos: np.ndarray) -> list[np.ndarray]:  # fmt: skip
    """Each output [1, n_h, s, d] (float64) for every rotated input fed ``x`` [1, n_h, s, d] at ``pos`` [2, 1, s]."""
    names = [o for _, o in pairs]
    feeds = {name: x.astype(dtype) for name, _ in pairs} | {positions: pos.astype(np.int64)}
    return [np.asarray(y, np.float64) for y in session.run(names, feeds)]


def read(session: Any, spec: Any) -> dict[str, Any]:
    """What the model does (module doc): ``pair_axes``, ``frequencies``, and per output its worst error over the grid
    (``outputs``: name -> {max_abs, relative, position (h, w)}).
    """  # noqa: D205
    from ropeexport.families.vision_rope.oracle import vision_rope_oracle

    positions, pairs, dtype = _io(session)
    d, heads, p = int(spec.head_dim), int(spec.num_heads), int(spec.max_positions)
    half, length = d // 2, min(p, 16)
    probe = np.zeros((1, heads, length, d))
    probe[..., :half] = 1.0  # each pair's first channel: the output pair is (cos, sin) of its angle
    moved, angle1 = [], []
    for axis in range(2):
        pos = np.zeros((2, 1, length), np.int64)
        pos[axis, 0] = np.arange(length)
        y = _run(session, positions, pairs, dtype, spec, probe, pos)[0][0]  # [n_h, L, d]
        cos, sin = y[..., :half], y[..., half:]
        moved.append(np.any(np.abs(cos - cos[:, :1]) + np.abs(sin - sin[:, :1]) > 1e-6, axis=(0, 1)))  # [d/2]
        angle1.append(np.arctan2(sin[0, 1], cos[0, 1]))  # the angle at position 1 of this axis, per pair
    found = np.stack(moved)  # [2, d/2]
    axes = [int(np.argmax(col)) if col.sum() == 1 else -1 for col in found.T]
    frequencies = [float(angle1[a][j]) if a >= 0 else float("nan") for j, a in enumerate(axes)]
    if p * p <= GRID:
        grid = np.stack(np.meshgrid(np.arange(p), np.arange(p), indexing="ij")).reshape(2, -1)
    else:
        rng = np.random.default_rng(0)
        line = np.arange(p)
        edges = [np.stack([line, np.zeros_like(line)]), np.stack([np.zeros_like(line), line]),
                 np.stack([line, np.full_like(line, p - 1)]), np.stack([np.full_like(line, p - 1), line])]  # fmt: skip
        grid = np.concatenate([*edges, rng.integers(0, p, (2, max(GRID - 4 * p, 0)))], axis=1)
    pos = grid[:, None, :]  # [2, 1, s]
    x = np.random.default_rng(1).standard_normal((1, heads, pos.shape[-1], d))
    truth = vision_rope_oracle(spec, x.astype(dtype).astype(np.float64), pos)
    outputs = {}
    for (_, name), y in zip(pairs, _run(session, positions, pairs, dtype, spec, x, pos), strict=True):
        error = np.abs(y - truth)[0].max(axis=(0, 2))  # [s]
        worst = int(np.argmax(error))
        outputs[name] = {"max_abs": float(error[worst]), "relative": float(error[worst] / np.abs(truth).max()),
                         "position": f"(height {int(grid[0, worst])}, width {int(grid[1, worst])})",
                         "patches": int(pos.shape[-1])}  # fmt: skip
    return {"pair_axes": axes, "frequencies": frequencies, "outputs": outputs, "dtype": np.dtype(dtype).name}


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.all(np.abs(a - b) <= 1e-5 * np.maximum(np.abs(b), 1e-30) + 1e-7))


def diagnose(seen: dict[str, Any], spec: Any) -> dict[str, str] | None:
    """The finding of what ``seen`` (``read``) is against ``spec`` (module doc), None where the axes and frequencies
    are the config's.
    """  # noqa: D205
    from ropeexport.families.vision_rope.oracle import pair_frequencies

    want_axes, want = pair_frequencies(spec)
    axes, freq = np.array(seen["pair_axes"]), np.array(seen["frequencies"])
    d, theta, quarter = int(spec.head_dim), float(spec.theta), int(spec.head_dim) // 4
    config = f"config: {spec.axis_frequencies}, theta {theta:g}, head_dim {d}"
    if np.array_equal(axes, 1 - want_axes):
        return finding("vision-axes-swapped", f"height and width swapped: the pairs the config turns by the height "
                       f"position turn by the width, and the reverse (position_ids rows read in the other order; "
                       f"{config})")  # fmt: skip
    if not np.array_equal(axes, want_axes):
        wrong = [j for j, (a, b) in enumerate(zip(axes, want_axes, strict=True)) if a != b]
        return finding("vision-axes", f"pairs {wrong[:6]}{'...' if len(wrong) > 6 else ''} turn by another axis "
                       f"than the config's (-1: none or both; {config})")  # fmt: skip
    if _close(freq, want):
        return None
    full = theta ** (-np.arange(0, d, 2) / d)  # theta^(-2i/d), i < d/2: Pixtral's list before its even/odd split
    if spec.axis_frequencies == "even-odd" and _close(freq, full):
        return finding("vision-frequency-split", f"height takes frequencies theta^(-2i/{d}) for i < {quarter} and "
                       f"width the next {quarter} (the list split in halves) where the config's even-odd split "
                       f"(Pixtral's axial RoPE) gives height the even indices i and width the odd ({config})")
    shared = np.concatenate([theta ** (-4 * np.arange(quarter) / d)] * 2)
    other = shared if spec.axis_frequencies == "even-odd" else np.where(want_axes == 0, full[0::2], full[1::2])
    if _close(freq, other):
        read = "shared" if spec.axis_frequencies == "even-odd" else "even-odd"
        return finding("vision-frequencies", f"pairs turn at the frequencies of axis_frequencies {read} where the "
                       f"config says {spec.axis_frequencies} ({config})")  # fmt: skip
    worst = int(np.nanargmax(np.abs(freq - want) / want))
    return finding("vision-frequencies", f"pair {worst} turns at frequency {freq[worst]:.6g} where the config gives "
                   f"{want[worst]:.6g} ({config})")  # fmt: skip


def audit_vision(path: Path, spec: Any, threads: int = 2) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the one site's record, the findings) of the vision rotation model at ``path`` against ``spec`` (module doc):
    the rotation read by running the model, each finding with its effect (the outputs against float64); what
    ``audits.core.audit`` makes its result of.
    """  # noqa: D205
    import onnxruntime as ort

    from ropeexport.audits.advice import severity
    from ropeexport.audits.model import quiet
    from ropeexport.audits.patterns.base import Site, SiteKind

    options, _ = quiet(threads)
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    seen = read(session, spec)
    worst_name, worst = max(seen["outputs"].items(), key=lambda kv: kv[1]["relative"])
    tolerance = TOLERANCE.get(seen["dtype"], TOLERANCE["float32"])
    _, pairs, _ = _io(session)
    site = Site(SiteKind.VISION, pairs[0][1], pairs[-1][1] if len(pairs) > 1 else "")
    site.users = [f"{i} -> {o}" for i, o in pairs]
    note = "; ".join(f"{name}: {w['relative']:.3g} of its scale off the float64 rotation at worst, "
                     f"{w['position']}, over {w['patches']} patches" for name, w in seen["outputs"].items())
    record = site.to_dict() | {"findings": [], "dtype": seen["dtype"], "pair_axes": seen["pair_axes"],
                               "frequencies": seen["frequencies"], "outputs": seen["outputs"], "table": False,
                               "probes": [], "note": f"{note} (exact: within {tolerance:g})"}  # fmt: skip
    found = diagnose(seen, spec)
    if found is None and worst["relative"] > tolerance:
        found = finding("vision-values", f"outputs off the float64 rotation by {worst['relative']:.3g} of their scale "
                        f"at {worst['position']} with every pair's axis and frequency the config's (precision)")
    record["exact"] = found is None
    record["findings"] = [] if found is None else [found]
    if found is None:
        return record, []
    effect = {"relative": worst["relative"], "max_abs": worst["max_abs"], "position": worst["position"],
              "positions": [0, int(spec.max_positions) - 1], "at": worst["position"], "output": worst_name,
              "dtype": seen["dtype"], "how": f"the outputs against the float64 rotation over {worst['patches']} "
              f"patches of the {spec.max_positions} x {spec.max_positions} grid (a rotation artifact: nothing runs "
              "after it)"}  # fmt: skip
    reason = "graft does not write vision RoPE (no decoder around it to prove): re-export the model"
    return record, [found | {"sites": [0], "effect": effect, "severity": severity(effect),
                             "next": {"action": "re-export", "text": reason}}]  # fmt: skip
