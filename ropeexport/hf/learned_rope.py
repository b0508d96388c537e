"""A RoPE parameter a checkpoint holds as a tensor rather than in its config: read into the config before the spec.

Mistral Large 4's LeRoPE (transformers 5.23 ``MistralLarge4TextRotaryEmbedding``, modular 226-245) multiplies each
inverse frequency by ``exp(alpha)``, ``alpha`` a learned buffer of the checkpoint (``lerope.alpha`` as saved): the
encoding's tables depend on it, so it belongs to the position spec (the yarn schedule's ``alpha``,
``families.rope.schedules``), where a rebuild with other values is another artifact. ``with_learned_rope`` copies
the buffer's float32 values (exactly, as float64) into the text config's ``rope_parameters`` under the architecture's
``Architecture.rope_buffer``; without a checkpoint (seeded weights) nothing is added and the factor is exp(0) = 1, the
value transformers initialises it to. ``beside``: the checkpoint next to a config.json, where one is (what an audit
or an encoding read from a config takes as the model's: ``requests.from_hf_config``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.errors import CheckpointError, SpecError


def _read_tensor(checkpoint: Path, names: tuple[str, ...]) -> np.ndarray | None:
    """The first of ``names`` found in the folder's safetensors shards (float64), None when no shard holds one;
    CheckpointError naming a shard that does not read (truncated, not safetensors).
    """  # noqa: D205
    from safetensors import safe_open

    for shard in sorted(checkpoint.glob("*.safetensors")):
        try:
            with safe_open(str(shard), framework="np") as f:  # headers first: only the one tensor is read
                found = next((n for n in names if n in f.keys()), None)  # noqa: SIM118 (safe_open is no Mapping)
                if found is not None:
                    return np.asarray(f.get_tensor(found), np.float64)
        except Exception as error:  # noqa: BLE001 (safetensors raises its own types: a truncated shard, not one)
            first = (str(error).splitlines() or [type(error).__name__])[0]
            raise CheckpointError(f"is not a safetensors file that reads ({first})", field=str(shard)) from None
    return None


def beside(config_path: str | Path) -> Path | None:
    """The folder of ``config_path`` when it holds safetensors (a checkpoint beside its config), else None."""
    folder = Path(config_path).parent
    return folder if any(folder.glob("*.safetensors")) else None


def with_learned_rope(config: Mapping[str, Any], checkpoint: str | Path | None) -> Mapping[str, Any]:
    """``config`` with its text model's learned RoPE buffer in ``rope_parameters`` (module doc), or as it is when its
    architecture has none or there is no checkpoint. CheckpointError when the checkpoint lacks the buffer or holds a
    value that is not finite.
    """  # noqa: D205
    from ropeexport.architectures import ARCHITECTURES

    inner = config.get("text_config")
    text: Mapping[str, Any] = inner if isinstance(inner, Mapping) else config
    arch = ARCHITECTURES.get(str(text.get("model_type")))
    if arch is None or not arch.rope_buffer or checkpoint is None:
        return config
    plain, param = arch.rope_buffer
    value = _read_tensor(Path(checkpoint), (plain,))
    if value is None:
        raise CheckpointError(f"{plain} missing: {arch.model_type}'s RoPE multiplies each frequency by exp(alpha), "
                              "a learned buffer every checkpoint of it holds")  # fmt: skip
    if value.ndim != 1 or not np.isfinite(value).all():
        raise CheckpointError(f"{plain} must be a finite vector (rotary_dim/2 entries), got shape {list(value.shape)} "
                              "or a value that is not finite")  # fmt: skip
    key = next((k for k in ("rope_parameters", "rope_scaling") if isinstance(text.get(k), Mapping)), None)
    if key is None:
        raise SpecError("rope_parameters", f"missing: {arch.model_type}'s config must give its RoPE setting")
    inner = {**text, key: {**text[key], param: [float(v) for v in value]}}
    return {**config, "text_config": inner} if text is not config else inner
