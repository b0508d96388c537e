"""Multimodal RoPE's planted bugs (position_ids [3, batch, seq]): the axes of the frequency pairs exported wrong.

Each claims a small M-RoPE spec (``planted.rope.rope``: GQA, 24 of 32 channels rotated, so partial rotation is on
top of every one) and starts from its correct export (``core`` module doc). Text-only calls (three equal rows) cannot
see any of them; the probes with the axes apart and the image prompts must.
"""

from __future__ import annotations

import numpy as np
import onnx

from ropeexport.families.rope.probes import rope_probes
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.planted.core import PlantedBug, checks, export, prune, set_initializer
from ropeexport.planted.rope import ROPE_OUT, _claiming, rope


def _axes_apart(spec: RopeSpec) -> frozenset[str]:
    """The probes whose three axes differ somewhere: where an axis read in another's place shows."""
    probes, _ = rope_probes(spec)
    return frozenset(p.name for p in probes if np.ptp(p.positions["position_ids"], axis=0).any())


def sections_swapped(spec: RopeSpec) -> onnx.ModelProto:
    """The time and height counts of ``mrope_section`` read in each other's place ([16, 24, 24] as [24, 16, 24])."""
    t, h, w = spec.mrope_section
    return _claiming(spec, export(spec.replace(mrope_section=(h, t, w))))


def chunked_as_interleaved(spec: RopeSpec) -> onnx.ModelProto:
    """Qwen2.5-VL's contiguous blocks exported with Qwen3-VL's interleaving (``mrope_interleaved`` assumed)."""
    return _claiming(spec, export(spec.replace(mrope_interleaved=not spec.mrope_interleaved)))


def one_axis_for_all(spec: RopeSpec) -> onnx.ModelProto:
    """Every pair turned by the time axis (position_ids[0] taken as the 1-D positions): height and width unread."""
    model = export(spec)
    half = spec.rotary_dim // 2
    for axis in (1, 2):
        set_initializer(model, f"position_ids_pairs_of_axis{axis}", np.zeros(half, bool))
    return prune(model)


def _bug(name: str, summary: str, spec: RopeSpec, plant: object) -> PlantedBug:
    return PlantedBug(name, summary, spec, plant, checks(*ROPE_OUT), {"probe": _axes_apart(spec)})  # type: ignore[arg-type]


CHUNKED = rope(mrope_section=(2, 4, 6), name="rope-mrope-chunked-p512")  # unequal counts: a swap moves pairs
EVEN = rope(mrope_section=(4, 4, 4), name="rope-mrope-even-p512")  # counts either assignment can hold
INTERLEAVED = rope(mrope_section=(4, 4, 4), mrope_interleaved=True, graph="decomposed", name="rope-imrope-p512")

BUGS: list[PlantedBug] = [
    _bug("mrope-sections-swapped", "mrope_section's time and height counts swapped", CHUNKED, sections_swapped),
    _bug(
        "mrope-chunked-read-as-interleaved",
        "contiguous M-RoPE blocks exported interleaved",
        EVEN,
        chunked_as_interleaved,
    ),
    _bug(
        "mrope-interleaved-read-as-chunked",
        "interleaved M-RoPE (Qwen3-VL) exported as contiguous blocks",
        INTERLEAVED,
        chunked_as_interleaved,
    ),
    _bug("mrope-one-axis-for-all", "every frequency pair turned by the time axis only", CHUNKED, one_axis_for_all),
]
