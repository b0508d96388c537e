"""A vision tower's 2-D RoPE read from its config, as transformers 5.23 reads it: the ``vision_rope`` spec fields.

Either a vision config itself (``model_type`` ``pixtral`` or ``qwen2_5_vl_vision``) or a whole multimodal config
holding one under ``vision_config`` (``llava`` or ``mistral3`` with a Pixtral tower, ``qwen2_5_vl``), each value with
its source:
- Pixtral (``PixtralVisionRotaryEmbedding``): ``axis_frequencies`` even-odd; ``head_dim`` (or hidden_size /
  num_attention_heads); theta from ``rope_parameters.rope_theta`` (5.x) or ``rope_theta`` (4.x), else 10000
  (PixtralVisionConfig's default); ``max_positions`` = image_size // patch_size, the patches a side of the largest
  image (4.x's ``max_patches_per_side``).
- Qwen2.5-VL (``Qwen2_5_VLVisionRotaryEmbedding``): ``axis_frequencies`` shared; ``head_dim`` = hidden_size /
  num_heads; theta as Pixtral's (4.x hard-codes 10000); no config key bounds the grid (the processor's max_pixels
  does, and a thin image is long on one side), so ``max_positions`` is ``QWEN_MAX_PATCHES`` unless given.
A ``rope_parameters.rope_type`` other than ``axial``, or a key of ``rope_parameters`` this reading does not know, is
one line naming the key: a key dropped is a rotation guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropeexport.errors import SpecError
from ropeexport.hf.reader import Imported, _Reader

VISION_TYPES = {"pixtral": "even-odd", "qwen2_5_vl_vision": "shared"}  # vision config model_type -> split
# A whole config's model_type -> its vision config's type when the vision config names none (Qwen2.5-VL's hub file).
WRAPPERS = {"llava": None, "mistral3": "pixtral", "qwen2_5_vl": "qwen2_5_vl_vision"}
QWEN_MAX_PATCHES = 1024  # 14336 pixels a side at patch_size 14: a default, not the model's bound
DEFAULT_THETA = 10000.0  # PixtralVisionConfig's and Qwen2_5_VLVisionConfig's default rope_theta (transformers 5.23)
_ROPE_KEYS = ("rope_type", "rope_theta")


def is_vision_config(config: Mapping[str, Any]) -> bool:
    """Whether ``config`` is itself a vision tower's config of a type with 2-D RoPE."""
    return config.get("model_type") in VISION_TYPES


def _vision_part(config: Mapping[str, Any], where: str) -> tuple[Mapping[str, Any], str, str]:
    """(the vision config, where it is, its model type): the config itself, or its ``vision_config``."""
    kind = config.get("model_type")
    if kind in VISION_TYPES:
        return config, where, str(kind)
    if kind not in WRAPPERS:
        raise SpecError(f"{where}: model_type", f"{kind!r} has no vision tower with 2-D RoPE read here; allowed: "
                        f"{', '.join([*VISION_TYPES, *WRAPPERS])}")  # fmt: skip
    inner = config.get("vision_config")
    if not isinstance(inner, Mapping):
        raise SpecError(f"{where}: vision_config", f"must be the vision tower's config (an object) in a {kind} "
                        f"config, got {inner!r}")  # fmt: skip
    found = inner.get("model_type", WRAPPERS[kind])
    if found not in VISION_TYPES:
        raise SpecError(f"{where}: vision_config.model_type", f"{found!r} has no 2-D RoPE read here (a learned or "
                        f"absolute position embedding, or a tower not read yet); allowed: {', '.join(VISION_TYPES)}")
    return inner, f"{where}: vision_config", str(found)


def import_vision(config: Mapping[str, Any], where: str = "config.json") -> Imported:
    """The ``vision_rope`` fields of a vision config (or a whole config's ``vision_config``), each with its source."""
    vision, where, kind = _vision_part(config, where)
    r = _Reader(vision, where)
    at = "vision_config." if vision is not config else ""  # sources name the whole config's keys
    r.set("encoding", "vision_rope", f"{kind}'s vision tower (2-D RoPE)")
    r.set("axis_frequencies", VISION_TYPES[kind], f"{kind}'s rotary module ("
          + ("PixtralVisionRotaryEmbedding: height on even frequency indices, width on odd)" if kind == "pixtral"
             else "Qwen2_5_VLVisionRotaryEmbedding: one frequency set for height and width)"))  # fmt: skip
    heads_keys = ("num_attention_heads", "num_heads")
    found = r.get(*heads_keys)
    if found is None:
        raise r.error("num_attention_heads", f"missing: the vision config has none of {', '.join(heads_keys)}")
    heads = r.integer(*found)
    r.set("num_heads", heads, f"{at}{found[0]}")
    if (head := r.get("head_dim")) is not None:
        r.set("head_dim", r.integer(*head), f"{at}{head[0]}")
    else:
        hidden = r.get("hidden_size")
        if hidden is None:
            raise r.error("hidden_size", "missing: the vision config has neither head_dim nor hidden_size")
        size = r.integer(*hidden)
        if size % heads:
            raise r.error("hidden_size", f"must be divisible by {found[0]} ({heads}), got {size}")
        r.set("head_dim", size // heads, f"{at}hidden_size / {at}{found[0]}")
    _theta(r, at)
    if kind == "pixtral":
        image, patch = r.get("image_size"), r.get("patch_size")
        if image is None or patch is None:
            raise r.error("image_size" if image is None else "patch_size",
                          "missing: the patches a side (image_size // patch_size) bound the position tables")
        size, step = r.integer(*image), r.integer(*patch)
        if step > size:
            raise r.error("patch_size", f"must be at most image_size ({size}), got {step}")
        r.set("max_positions", size // step, f"{at}image_size // {at}patch_size")
    else:
        r.set("max_positions", QWEN_MAX_PATCHES, f"ropeexport's default {QWEN_MAX_PATCHES} patches a side (no "
              "config key bounds the grid; --max-positions to change)")  # fmt: skip
    return Imported(kind, r.fields, r.sources)


def _theta(r: _Reader, at: str) -> None:
    """theta from ``rope_parameters`` (5.x), ``rope_theta`` (4.x) or the config class's default (``at``: the keys'
    prefix in the whole config).
    """  # noqa: D205
    params = r.config.get("rope_parameters")
    if params is not None:
        if not isinstance(params, Mapping):
            raise r.error("rope_parameters", f"must be an object, got {params!r}")
        unknown = sorted(set(params) - set(_ROPE_KEYS))
        if unknown:
            raise r.error(f"rope_parameters.{unknown[0]}", f"unknown key for a vision tower's axial RoPE; allowed: "
                          f"{', '.join(_ROPE_KEYS)}")  # fmt: skip
        if params.get("rope_type", "axial") != "axial":
            raise r.error("rope_parameters.rope_type", f"must be 'axial' (the only 2-D RoPE transformers' vision "
                          f"rotary modules compute), got {params['rope_type']!r}")  # fmt: skip
        if "rope_theta" in params:
            theta = r.number("rope_parameters.rope_theta", params["rope_theta"])
            r.set("theta", theta, f"{at}rope_parameters.rope_theta")
            return
    if (found := r.get("rope_theta")) is not None:
        r.set("theta", r.number(*found), f"{at}{found[0]}")
        return
    r.set("theta", DEFAULT_THETA, "the vision config class's default rope_theta (10000)")
