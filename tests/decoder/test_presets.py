"""Every preset with a decoder architecture, shrunk to a tiny seeded model of its real config, verified by generation.

The sizes shrink (one layer, two heads' width, a 256-token vocabulary); the positional encoding is the preset's own,
schedule and max_positions included, so far positions reach max_positions - 1 (131071 for Llama 3.1 and Phi-3 128k).
The transformers reference is built from the same shrunk config with the seeded weights loaded under its names.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="transformers (the test extra) is the eager reference")

import ropeexport as rx  # noqa: E402

pytestmark = pytest.mark.slow  # every preset's decoder built and verified (a minute)

# preset -> hidden size of two heads (head_dim kept)
PRESETS = {
    "llama-2-7b": 256,
    "llama-3.1-8b": 256,
    "codellama-7b": 256,
    "mistral-7b": 256,
    "qwen2.5-7b": 256,
    "phi-3-mini-128k": 192,
    "gpt-neox-20b": 192,
    "gpt-j-6b": 512,
    "bloom-560m": 128,
}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_decoder_verifies(preset: str, tmp_path: Path) -> None:
    result = rx.build_decoder(tmp_path, preset=preset, num_layers=1, hidden_size=PRESETS[preset], vocab_size=256)
    report = result.decoder_report
    assert result.passed, [(s.name, s.summary.data) for s in report.scenarios if not s.passed]
    assert report.references.transformers.startswith("transformers"), report.references.data
    top = report.spec["position"]["max_positions"]
    reached = max(s.summary.positions[1] for s in report.scenarios)
    if report.spec["position"]["encoding"] == "rope":
        assert reached == top - 1
    for scenario in report.scenarios:
        summary = scenario.summary
        if summary.positions[1] < 4096 and summary.regime_cost_rel is None:
            assert summary.worst_rel_transformers <= 1e-4, (scenario.name, summary.data)
