"""The config read: ``read_config`` (a config.json from disk, safely), ``model_name`` and ``_Reader``, which looks keys
up and remembers, for each spec field, which key (or default) gave its value (``Imported``).
"""  # noqa: D205

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropeexport.errors import SpecError
from ropeexport.inputs import loads_json, read_text

_HEADS = ("num_attention_heads", "n_head", "n_heads", "num_heads")


_HIDDEN = ("hidden_size", "n_embd", "n_embed", "d_model")


_LENGTH = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")


@dataclass(frozen=True)
class Imported:
    """Spec fields taken from a config, not yet validated, and ``sources[field]``: where each value came from."""

    model_type: str
    fields: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)


class _Reader:
    """Looks keys up in the config and remembers, for each spec field, which key (or default) gave its value."""

    def __init__(self, config: Mapping[str, Any], where: str) -> None:
        self.config = config
        self.where = where
        self.fields: dict[str, Any] = {}
        self.sources: dict[str, str] = {}

    def get(self, *keys: str) -> tuple[str, Any] | None:
        """The first key present with a non-null value, as (key, value)."""
        for key in keys:
            if self.config.get(key) is not None:
                return key, self.config[key]
        return None

    def set(self, name: str, value: Any, source: str) -> None:
        self.fields[name] = value
        self.sources[name] = source

    def error(self, key: str, message: str) -> SpecError:
        return SpecError(f"{self.where}: {key}", message)

    def integer(self, key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer():
            raise self.error(key, f"must be an integer, got {value!r}")
        if not 1 <= value <= 2**40:
            raise self.error(key, f"must be between 1 and 2^40, got {value:.6g}")
        return int(value)

    def number(self, key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.error(key, f"must be a finite number, got {value!r}")
        return float(value)

    def heads(self) -> tuple[str, int]:
        found = self.get(*_HEADS)
        if found is None:
            raise self.error("num_attention_heads", f"missing: the config has none of {', '.join(_HEADS)}")
        return found[0], self.integer(found[0], found[1])

    def head_dim(self, heads_key: str, heads: int, explicit: tuple[str, ...] = ("head_dim",)) -> tuple[int, str]:
        """head_dim from an explicit key, else hidden_size / num_attention_heads (which must divide)."""
        found = self.get(*explicit)
        if found is not None:
            return self.integer(found[0], found[1]), found[0]
        hidden = self.get(*_HIDDEN)
        if hidden is None:
            raise self.error("hidden_size", f"missing: the config has none of {', '.join(('head_dim', *_HIDDEN))}")
        size = self.integer(hidden[0], hidden[1])
        if size % heads:
            raise self.error(hidden[0], f"must be divisible by {heads_key} ({heads}), got {size}")
        return size // heads, f"{hidden[0]} / {heads_key}"

    def length(self) -> tuple[str, int] | None:
        found = self.get(*_LENGTH)
        return None if found is None else (found[0], self.integer(found[0], found[1]))


def read_config(path: str | Path) -> dict[str, Any]:
    """Load a transformers config.json from disk; a missing, unreadable or non-JSON file is a SpecError."""
    path = Path(path)
    # A regular file of sane size (not /dev/zero, not a FIFO), strict JSON with bounded nesting and integers.
    data = loads_json(read_text(path, "hf_config"), f"hf_config {str(path)!r}")
    if not isinstance(data, dict):
        raise SpecError("hf_config", f"{str(path)!r} is not a transformers config (not a JSON object)")
    return data


def model_name(config: Mapping[str, Any], path: str | Path | None = None) -> str:
    """A folder-safe model name for the artifacts of a config file.

    In order: NAME of a Hugging Face cache path (``models--ORG--NAME/snapshots/<sha>/config.json``), the file's stem
    when it is not ``config``, the folder (unless it is a commit hash), ``_name_or_path``'s last part, model_type.
    """
    candidates = []
    if path is not None:
        resolved = Path(path).resolve()
        cache = next((p.name for p in resolved.parents if p.name.startswith("models--")), None)
        if cache:
            candidates.append(cache.split("--")[-1])
        if resolved.stem != "config":
            candidates.append(resolved.stem)
        if resolved.parent.name and not re.fullmatch(r"[0-9a-f]{40}", resolved.parent.name):
            candidates.append(resolved.parent.name)
    if isinstance(config.get("_name_or_path"), str):
        candidates.append(config["_name_or_path"].rstrip("/").split("/")[-1])
    candidates.append(str(config.get("model_type", "model")))
    for candidate in candidates:
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", candidate).strip("-._").lower()[:60]
        if name:
            return name
    return "model"
