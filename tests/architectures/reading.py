"""What the architecture tests share: a config read by ropeexport and by its transformers config class, and a bad
key's one-line refusal."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from ropeexport.architectures import architecture
from ropeexport.architectures.base import Architecture
from ropeexport.errors import SpecError


def read_both(
    config: Mapping[str, Any], config_class: Callable[..., Any]
) -> tuple[Architecture, dict[str, Any], dict[str, str], Any]:
    """The architecture of ``config``, its fields and their sources as ropeexport reads them, and transformers' own
    config made from the same keys (``model_type`` left to the class)."""
    arch = architecture(config)
    fields, sources = arch.layout(config)
    theirs = config_class(**{k: v for k, v in config.items() if k != "model_type"})
    return arch, fields, sources, theirs


def assert_refused(config: Mapping[str, Any], name: str, key: str, label: str) -> None:
    """Building ``config`` as decoder ``name`` is refused in one line naming ``config.json: key``."""
    from ropeexport.decoder.config import from_config

    with pytest.raises(SpecError) as error:
        from_config(dict(config), name)
    assert error.value.field == f"config.json: {key}", (label, str(error.value))
    assert "\n" not in str(error.value)
