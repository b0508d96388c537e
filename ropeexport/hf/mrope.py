"""Multimodal RoPE's keys, ``mrope_section`` and ``mrope_interleaved``, read as transformers 5.23 reads them.

Qwen2-VL, Qwen2.5-VL and Qwen3-VL text; each value with its source.

What the type's rotary module computes is its hook's ``mrope`` (``architectures.hooks``): Qwen2-VL and Qwen2.5-VL
recompose contiguous blocks, Qwen3-VL interleaves by frequency index, each whatever ``mrope_interleaved`` says; a
config whose ``mrope_interleaved`` says the other is refused by that key, never read either way. A type without M-RoPE
holding either key is refused where the schedule's parameters are read (``hf.encoding``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropeexport.architectures.hooks import ConfigHook
from ropeexport.hf.reader import _Reader

KEYS = ("mrope_section", "mrope_interleaved")  # in the scaling dict (rope_scaling / rope_parameters)
TYPE = "mrope"  # Qwen2-VL's 4.x rope_scaling type, read as "default" (Qwen2VLTextConfig.convert_rope_params_to_dict)


def read_mrope(r: _Reader, params: Mapping[str, Any], prefix: str, hook: ConfigHook) -> None:
    """Set ``mrope_section`` and ``mrope_interleaved`` from the scaling dict ``params`` (keys under ``prefix``)."""
    said = params.get("mrope_interleaved")
    interleaved = hook.mrope == "interleaved"
    if said is not None:
        if not isinstance(said, bool):
            raise r.error(f"{prefix}mrope_interleaved", f"must be true or false, got {said!r}")
        if said != interleaved:
            code = "interleaves by frequency index" if interleaved else "recomposes contiguous mrope_section blocks"
            raise r.error(
                f"{prefix}mrope_interleaved",
                f"is {str(said).lower()}, but transformers' {hook.model_type} {code} whatever it says: the config "
                "contradicts the model's code",
            )
        r.set("mrope_interleaved", said, f"{prefix}mrope_interleaved")
    else:
        r.set("mrope_interleaved", interleaved, f"{hook.model_type}'s rotary module ({hook.mrope})")
    section = params.get("mrope_section")
    if section is None:
        r.set("mrope_section", list(hook.mrope_default), f"transformers' default mrope_section for {hook.model_type}")
        return
    if not isinstance(section, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in section):
        raise r.error(f"{prefix}mrope_section", f"must be a list of integers (time, height, width), got {section!r}")
    # The rotated width is read before (hf.encoding): 0 stands for all of head_dim.
    half = (r.fields.get("rotary_dim") or r.fields["head_dim"]) // 2
    if sum(section) != half:
        raise r.error(
            f"{prefix}mrope_section",
            f"{section} sums to {sum(section)}, not the {half} frequency pairs of the rotated width "
            f"({2 * half} channels): its time, height and width counts must cover them once",
        )
    r.set("mrope_section", list(section), f"{prefix}mrope_section")
