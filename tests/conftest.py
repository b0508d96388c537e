"""What tests across folders share, built once per session (slow to make, read-only to use).

- ``tiny_checkpoint(name)``: a random transformers checkpoint of ``tests.decoder.tiny.CONFIGS[name]`` saved with
  save_pretrained (nothing is downloaded). The same folder is handed to every test that asks: copy it
  (``shutil.copytree``) before changing it.
- ``seeded_decoder``: the folder of a tiny seeded Llama-2 decoder (1 layer, hidden 256, vocabulary 128, no
  transformers reference), built and verified once; copy it before changing it.

Tiers: ``pytest -m "not slow"`` is the fast tier for development (docs/how-to/test-suite.md says how long it
takes); CI runs every test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``tiny_checkpoint(name, seed=0)``: the checkpoint folder, made on first use."""
    root = tmp_path_factory.mktemp("checkpoints")
    made: dict[tuple[str, int], Path] = {}

    def get(name: str, seed: int = 0) -> Path:
        if (name, seed) not in made:
            from tests.decoder.tiny import checkpoint

            # the folder is named as the config: a decoder takes its default name from it
            made[name, seed] = checkpoint(root / f"seed{seed}" / name, name, seed)
        return made[name, seed]

    return get


@pytest.fixture(scope="session")
def seeded_decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A verified tiny seeded decoder's folder (module doc)."""
    import ropeexport as rx

    result = rx.build_decoder(tmp_path_factory.mktemp("decoder") / "out", preset="llama-2-7b", num_layers=1,
                              hidden_size=256, vocab_size=128, eager=False)  # fmt: skip
    assert result.passed, result.report
    return result.path
